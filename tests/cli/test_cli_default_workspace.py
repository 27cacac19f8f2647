"""The per-user default workspace: created on first use by a command that writes, never by one that reads.

Spec 000 "Checking and repairing a workspace" (without --repair nothing is
written) and "Inspecting jobs" (none of them writes protocol state): with no
default workspace yet, a read-only command with WORKSPACE omitted is refused
(exit 2, one line, nothing written); submit, run and the other writers create it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

READ_ONLY = [
    ("job", "list"),
    ("job", "show", "abc"),
    ("job", "log", "abc"),
    ("job", "why", "abc"),
    ("job", "request", "abc", "pause", "--operator", "me"),
    ("workspace", "status"),
    ("workspace", "managers"),
    ("workspace", "fsck"),
    ("workspace", "fsck", "--repair"),
    ("workspace", "gc", "--dry-run"),
    ("workspace", "gc"),
    ("workspace", "policy", "show"),
    ("workspace", "settings", "show"),
    ("workspace", "diff", "--since", "@0"),
    ("precheck",),
    ("collect",),
]


def _everything(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_does_not_create_the_default_workspace(cli, tmp_path, args):
    data_home = tmp_path / "fresh-data"
    env = {"XDG_DATA_HOME": str(data_home)}
    result = cli(*args, code=2, env=env)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    default = data_home / "httk-workflow" / "workspaces" / "default"
    assert lines[0] == (f"error: the default workspace does not exist yet: nothing has been submitted; "
                        f"'httk workflow workspace init {default}' or a first 'job submit' creates it")
    assert _everything(data_home) == []


def test_a_first_run_creates_it(cli, tmp_path, payload):
    data_home = tmp_path / "fresh-data"
    env = {"XDG_DATA_HOME": str(data_home)}
    default = data_home / "httk-workflow" / "workspaces" / "default"
    cli("run", env=env)  # a manager on nothing yet: it creates the workspace and goes idle
    assert (default / ".httk-workflow" / "format.json").is_file()
    key = cli("job", "submit", str(payload), "--placement", "p", env=env).stdout.strip()
    assert [job["job_key"] for job in json.loads(cli("job", "list", "--json", env=env).stdout)] == [key]


def test_a_first_submit_creates_it(cli, tmp_path, payload):
    data_home = tmp_path / "fresh-data"
    env = {"XDG_DATA_HOME": str(data_home)}
    key = cli("job", "submit", str(payload), "--placement", "p", env=env).stdout.strip()
    assert (data_home / "httk-workflow" / "workspaces" / "default" / ".httk-workflow" / "format.json").is_file()
    assert json.loads(cli("workspace", "status", "--json", env=env).stdout)["name"] == "default"
    assert json.loads(cli("job", "show", key, "--json", env=env).stdout)["job_key"] == key


def test_a_new_user_lists_the_shipped_workflows_before_submitting_anything(cli, tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "fresh-data")}
    listed = json.loads(cli("workflow", "list", "--json", env=env).stdout)
    assert listed and all(entry["source"] == "shipped" for entry in listed)
