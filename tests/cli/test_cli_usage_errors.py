"""A usage error (click's or ours) is one ``error: <what> — <fix>; see '... --help'`` line, exit 2, nothing written.

The examples are the ones a new-user walkthrough hit, where click printed four lines
(usage, "Try ... --help", a blank line, ``Error: ...``) although every ``--help``
promises one ``error:`` line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli_support import Cli
from disk_support import names_below
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk, taskmanager

#: (arguments after ``httk workflow``, the command path the line points at, a word the line names).
WALKTHROUGH = [
    (["run", "WS", "--workers", "0"], "run", "--workers"),
    (["run", "kappa:runs", "--managers", "0"], "run", "--managers"),
    (["collect", "--kind", "bogus"], "collect", "bogus"),
    (["job", "list", "--kind", "nope"], "job list", "nope"),
    (["workspace", "report", "--watch", "-1"], "workspace report", "--watch"),
    (["job", "request", "WS", "t1", "pause"], "job request", "--operator"),
    (["job", "submit", "--from-file", "L"], "job submit", "--placement"),
    (["run", "--wrkers", "3"], "run", "did you mean '--workers'"),
    (["run", "--workers"], "run", "--workers"),
    (["job", "sho", "t1"], "job", "did you mean 'show'?"),
    (["jbo", "list"], "", "did you mean 'job'?"),
    (["bogus"], "", "bogus"),
    (["job", "request", "WS", "t1", "bogus", "--operator", "me"], "job request", "unknown action"),
    (["workspace", "settings", "set", "WS", "manager.workers", "-x"], "workspace settings set", "'-x'"),
]


def _one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize(("args", "command", "named"), WALKTHROUGH, ids=lambda value: " ".join(value)
                         if isinstance(value, list) else None)
def test_a_usage_error_is_one_line_with_exit_2_and_writes_nothing(
    cli: Cli, workspace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], command: str,
    named: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [workspace if arg == "WS" else arg for arg in args]
    before = names_below(tmp_path)
    result = cli(*args, code=2)
    line = _one_error_line(result.stderr)
    assert named in line, line
    assert line.endswith(f"; see '{' '.join(['httk workflow', command]).strip()} --help'"), line
    assert result.stdout == ""
    assert names_below(tmp_path) == before


@pytest.mark.parametrize("args", [["run", "--workers", "0"], ["bogus"], ["--bogus"]], ids=" ".join)
def test_the_alias_tree_renders_usage_errors_the_same_way(cli: Cli, args: list[str]) -> None:
    result = CliRunner().invoke(taskmanager, args, obj=AppContext(cli.container), env=cli.env)
    assert result.exit_code == 2
    line = _one_error_line(result.stderr)
    assert line.endswith("--help'") and "'httk-taskmanager" in line, line


def test_an_unknown_option_of_the_root_is_one_line(cli: Cli) -> None:
    result = CliRunner().invoke(httk, ["--bogus"], obj=AppContext(cli.container), env=cli.env)
    assert result.exit_code == 2
    assert _one_error_line(result.stderr) == (
        "error: no such option '--bogus' — check its spelling (a value that starts with '-' goes after '--'); "
        "see 'httk --help'"
    )


def test_help_and_a_bare_group_still_print_the_help_page(cli: Cli) -> None:
    assert cli("run", "--help").stdout.startswith("Usage: httk workflow run")
    bare = cli("job", code=None)
    assert "Commands:" in bare.output and "error:" not in bare.output  # click prints it on stderr


# -- a free value may start with '-' -----------------------------------------------------------------------
def test_a_negative_setting_value_reaches_the_validator(cli: Cli, workspace: str) -> None:
    before = names_below(workspace)
    line = cli.refused("workspace", "settings", "set", workspace, "manager.workers", "-3")
    assert line == "error: setting manager.workers must be a positive integer, not -3"
    assert names_below(workspace) == before


def test_a_negative_number_is_a_value_wherever_it_stands(cli: Cli, workspace: str) -> None:
    cli("workspace", "settings", "set", workspace, "site.offset", "-1.5")
    assert cli.json("workspace", "settings", "show", workspace)["site.offset"] == -1.5
    line = cli.refused("workspace", "policy", "set", workspace, "lease_seconds", "-5")
    assert "lease_seconds" in line and "No such option" not in line
