"""``--json`` on the commands that change a workspace's names or settings: one object saying what changed.

``workspace policy set`` had it; ``settings set``/``unset``, ``default``, ``forget`` and ``delete`` now do too.
"""

from __future__ import annotations

import json
from pathlib import Path


def test_settings_set_and_unset_json(cli, workspace):
    assert cli.json("workspace", "settings", "set", workspace, "manager.workers", "8") == {
        "workspace": workspace, "name": "manager.workers", "value": 8}
    assert cli.json("workspace", "settings", "show", workspace)["manager.workers"] == 8
    assert cli.json("workspace", "settings", "unset", workspace, "manager.workers") == {
        "workspace": workspace, "name": "manager.workers", "removed": True}
    assert cli.json("workspace", "settings", "unset", workspace, "manager.workers")["removed"] is False
    assert "manager.workers" not in cli.json("workspace", "settings", "show", workspace)


def test_default_json(cli, tmp_path):
    path = str(tmp_path / "runs")
    cli("workspace", "init", path)
    assert cli.json("workspace", "default", "runs") == {
        "default": "runs", "path": path, "previous": "default", "changed": True}
    assert cli.json("workspace", "default")["changed"] is False
    shown = cli.json("workspace", "default", "--unset")
    assert shown["default"] == "default" and shown["previous"] == "runs" and shown["changed"] is True
    assert json.loads(cli.registry.read_text())["default"] is None


def test_forget_json(cli, tmp_path):
    path = str(tmp_path / "runs")
    cli("workspace", "init", path)
    assert cli.json("workspace", "forget", "runs") == {"forgot": "runs", "path": path}
    assert "runs" not in json.loads(cli.registry.read_text())["workspaces"]
    assert Path(path, ".httk-workflow", "format.json").is_file()


def test_delete_json(cli, tmp_path):
    path = str(tmp_path / "runs")
    cli("workspace", "init", path)
    assert cli.json("workspace", "delete", "runs", "--force") == {"deleted": path, "forgot": "runs"}
    assert not Path(path).exists()
    assert "runs" not in json.loads(cli.registry.read_text())["workspaces"]


def test_default_with_a_name_and_unset_is_refused_and_writes_nothing(cli, tmp_path):
    cli("workspace", "init", str(tmp_path / "runs"))
    cli("workspace", "default", "runs")
    before = cli.registry.read_bytes()
    line = cli.refused("workspace", "default", "other", "--unset")
    assert "give NAME (other) or --unset, not both" in line
    assert cli.registry.read_bytes() == before
    assert cli.json("workspace", "default")["default"] == "runs"
