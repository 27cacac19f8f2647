"""``transfer`` follows the one rule for the per-user default workspace (cli/context.py ``open_workspace``).

A source only reads: a default that does not exist yet is refused with the same one
line as every read-only command, and nothing is created. A destination writes: the
default is created on first use, as ``job submit`` creates it.
"""

from __future__ import annotations

from pathlib import Path


def _default(cli) -> Path:
    return cli.data_home / "httk-workflow" / "workspaces" / "default"


def test_a_missing_default_as_the_source_is_the_read_only_refusal(cli, workspace):
    default = _default(cli)
    line = cli.refused("transfer", str(default), workspace)
    assert line == (f"error: the default workspace does not exist yet: nothing has been submitted; "
                    f"'httk workflow workspace init {default}' or a first 'job submit' creates it")
    assert not default.exists() and not default.parent.exists()


def test_a_missing_default_as_the_destination_is_created(cli, workspace):
    default = _default(cli)
    cli("transfer", workspace, str(default))
    assert (default / ".httk-workflow" / "format.json").is_file()
