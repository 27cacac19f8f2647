"""The workspace registry: init registers, names resolve, default, forget, delete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HTTK = str(Path(sys.executable).with_name("httk"))


def run(env, *args):
    return subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=env, timeout=60)


def test_registry_round_trip(tmp_path):
    import os

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    ws = tmp_path / "runs" / "silicon"
    assert run(env, "workspace", "init", str(ws)).returncode == 0
    listing = json.loads(run(env, "workspace", "list", "--json").stdout)
    assert {"name": "silicon", "path": str(ws), "default": False, "exists": True} in listing
    assert run(env, "workspace", "status", "silicon").returncode == 0
    # The same basename elsewhere is initialized but not registered (a note), unless --name asks for it.
    other = tmp_path / "elsewhere" / "silicon"
    result = run(env, "workspace", "init", str(other))
    assert result.returncode == 0 and "reachable by its path only" in result.stderr
    refused = run(env, "workspace", "init", str(tmp_path / "third"), "--name", "silicon")
    assert refused.returncode == 2 and not (tmp_path / "third").exists()
    assert run(env, "workspace", "default", "silicon").returncode == 0
    status = json.loads(run(env, "workspace", "status", "--json").stdout)
    assert status["path"] == str(ws)
    assert run(env, "workspace", "delete", "silicon").returncode == 2 and ws.exists()
    assert run(env, "workspace", "delete", "silicon", "--force").returncode == 0 and not ws.exists()
    assert run(env, "workspace", "status", "silicon").returncode == 2
    assert run(env, "workspace", "forget", "silicon").returncode == 2


# -- a damaged registry is one error line, never a traceback ------------------------------------
@pytest.mark.parametrize("content", ["{not json", "[1]", '{"workspaces": []}'])
@pytest.mark.parametrize(
    "args", [("workspace", "list"), ("workspace", "list", "--json"), ("workspace", "status", "ws")]
)
def test_unreadable_registry_is_one_error_line(cli, workspace, content, args):
    cli.registry.write_text(content)
    cli.refused(*args)


def test_registry_entry_with_non_string_path_is_refused(cli, workspace):
    document = json.loads(cli.registry.read_text())
    document["workspaces"]["ws"] = 5
    cli.registry.write_text(json.dumps(document))
    cli.refused("workspace", "status", "ws")
