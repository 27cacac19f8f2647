"""``transfer`` follows the one rule for the per-user default workspace (cli/context.py ``open_workspace``).

A source only reads: a default that does not exist yet is refused with the same one
line as every read-only command, and nothing is created. A destination writes: the
default is created on first use, as ``job submit`` creates it.
"""

from __future__ import annotations

import json
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


# -- the name 'default' is the local default workspace: the recorded one when recorded -------------
def _jobs(cli, workspace: str | None = None) -> set[str]:
    return {row["job_id"] for row in cli.json("job", "list", *([workspace] if workspace else []))}


def _recorded_walk(cli, tmp_path: Path) -> str:
    walk = str(tmp_path / "walk")
    cli("workspace", "init", walk)
    cli("workspace", "default", "walk")
    return walk


def test_default_as_the_source_is_the_recorded_default(cli, tmp_path, payload):
    walk = _recorded_walk(cli, tmp_path)
    other = str(tmp_path / "other")
    cli("workspace", "init", other)
    job = cli.json("job", "submit", str(payload), "--placement", "p")["job_id"]  # no WORKSPACE: into walk
    assert _jobs(cli, "default") == _jobs(cli, walk) == {job}
    cli("transfer", "default", other, "--job", job)
    assert _jobs(cli, walk) == set() and _jobs(cli, other) == {job}
    assert not _default(cli).exists()


def test_default_as_the_destination_is_the_recorded_default_and_the_per_user_one_is_not_created(cli, tmp_path,
                                                                                               payload):
    walk = _recorded_walk(cli, tmp_path)
    other = str(tmp_path / "other")
    cli("workspace", "init", other)
    job = cli.json("job", "submit", other, str(payload), "--placement", "p")["job_id"]
    cli("transfer", other, "default", "--job", job)
    assert _jobs(cli, walk) == _jobs(cli) == {job} and _jobs(cli, other) == set()
    assert not _default(cli).exists() and not _default(cli).parent.exists()


def test_without_a_recorded_default_the_name_is_the_per_user_default(cli, tmp_path, payload):
    other = str(tmp_path / "other")
    cli("workspace", "init", other)
    job = cli.json("job", "submit", other, str(payload), "--placement", "p")["job_id"]
    cli("transfer", other, "default", "--job", job)  # created on first use, as before
    assert (_default(cli) / ".httk-workflow" / "format.json").is_file()
    assert _jobs(cli, "default") == _jobs(cli, str(_default(cli))) == {job}
    cli("transfer", "default", other, "--job", job)
    assert _jobs(cli, other) == {job} and _jobs(cli, "default") == set()


def test_the_registry_names_default_the_recorded_default(cli, tmp_path):
    walk = _recorded_walk(cli, tmp_path)
    rows = {row["name"]: row for row in cli.json("workspace", "list")}
    assert rows["default"]["path"] == rows["walk"]["path"] == walk
    assert [name for name, row in rows.items() if row["default"]] == ["walk"]
    assert f"default              {walk}  (the recorded default, walk)" in cli("workspace", "list").stdout
    assert cli.json("workspace", "status", "default")["path"] == walk
    # 'default' is no name to register, and recording it goes back to the per-user default.
    line = cli.refused("workspace", "init", str(tmp_path / "x"), "--name", "default")
    assert line.startswith("error: the name 'default' means the local default workspace")
    assert not (tmp_path / "x").exists()
    assert cli.json("workspace", "default", "default") == {
        "default": "default", "path": str(_default(cli)), "previous": "walk", "changed": True}
    assert json.loads(cli.registry.read_text())["default"] is None
    assert {row["name"]: row["path"] for row in cli.json("workspace", "list")}["default"] == str(_default(cli))


def test_deleting_default_deletes_and_forgets_the_recorded_default(cli, tmp_path):
    walk = _recorded_walk(cli, tmp_path)
    assert cli.json("workspace", "delete", "default", "--force") == {"deleted": walk, "forgot": "walk"}
    document = json.loads(cli.registry.read_text())
    assert "walk" not in document["workspaces"] and document["default"] is None
    assert not _default(cli).exists()


def test_a_workspace_registered_as_default_keeps_the_name(cli, tmp_path):
    _recorded_walk(cli, tmp_path)
    own = str(tmp_path / "own")
    cli("workspace", "init", own)
    document = json.loads(cli.registry.read_text())
    document["workspaces"]["default"] = own  # registered under that very name (an older registry, by hand)
    cli.registry.write_text(json.dumps(document))
    assert cli.json("workspace", "status", "default")["path"] == own
    assert cli.json("workspace", "status")["path"] == str(tmp_path / "walk")


def test_initializing_the_per_user_default_beside_a_recorded_one_says_nothing_of_names(cli, tmp_path):
    _recorded_walk(cli, tmp_path)
    made = cli("workspace", "init", str(_default(cli)))
    assert made.stderr == "" and made.stdout == f"initialized workspace 'default' at {_default(cli)}\n"
    assert cli.json("workspace", "status")["path"] == str(tmp_path / "walk")
