"""``httk workflow run`` / ``manager run`` / ``httk-taskmanager run``: options reach the manager.

Run in a subprocess through the installed console scripts, because a manager
configures process-wide logging; the in-process tests stay unaffected.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def script(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.skip(f"console script {name} is not installed next to {sys.executable}")
    return str(path)


def run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_run_drives_a_job_to_a_terminal_state(cli, workspace, payload, tmp_path):
    key = cli("job", "submit", workspace, str(payload), "--placement", "p").stdout.strip()
    options = [
        "--workers", "2",
        "--pool", "default",
        "--capability", "gpu",
        "--placement-prefix", "p",
        "--lease-seconds", "60",
        "--takeover-grace-factor", "3",
        "--join-grace-seconds", "10",
        "--until-idle",
        "--idle-timeout", "120",
        "--runner-search-path", str(tmp_path),
        "--drain-timeout", "5",
        "--log-level", "info",
        "--log-file", str(tmp_path / "manager.log"),
        "--json-logs",
        "--gc-interval", "3600",
    ]  # fmt: skip
    done = run([script("httk"), "workflow", "run", workspace, *options], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "pools default; capabilities gpu" in done.stdout
    assert (tmp_path / "manager.log").is_file()
    report = cli.json("job", "show", workspace, key)
    # The payload runner exits 0 without publishing an outcome: a protocol error, not retried.
    assert report["kind"] == "failed" and report["failure"]["code"] == "protocol_error"
    events = [entry["event"] for entry in cli.json("job", "log", workspace, key)]
    assert events[0] == "submit" and events[-1] == "commit_fail"


@pytest.mark.parametrize("prefix", [["httk", "workflow", "manager", "run"], ["httk-taskmanager", "run"]])
def test_every_spelling_runs_a_manager(workspace, tmp_path, prefix):
    done = run([script(prefix[0]), *prefix[1:], workspace, "--idle-timeout", "60"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert workspace in done.stdout


def test_run_refuses_a_missing_workspace(tmp_path):
    done = run([script("httk"), "workflow", "run", str(tmp_path / "missing")], tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ")


def test_run_without_workspace_uses_the_default(tmp_path):
    done = run([script("httk"), "workflow", "run", "--idle-timeout", "60"], tmp_path)
    assert done.returncode == 0, done.stderr
    default = tmp_path / "xdg" / "httk-workflow" / "workspaces" / "default"
    status = run([script("httk"), "workflow", "workspace", "status", "--json"], tmp_path)
    assert json.loads(status.stdout)["path"] == str(default)


def test_run_refuses_a_bad_placement_prefix(workspace, tmp_path):
    done = run([script("httk"), "workflow", "run", workspace, "--placement-prefix", "../x"], tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: invalid placement")


def test_run_takes_the_worker_count_from_manager_workers_unless_given(cli, workspace, tmp_path):
    # Spec 000 "Application settings": manager.workers supplies the default worker count.
    cli("workspace", "settings", "set", workspace, "manager.workers", "3")
    done = run([script("httk"), "workflow", "run", workspace, "--idle-timeout", "60"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith("; workers 3")
    explicit = run([script("httk"), "workflow", "run", workspace, "--workers", "2", "--idle-timeout", "60"], tmp_path)
    assert explicit.returncode == 0, explicit.stderr
    assert explicit.stdout.splitlines()[0].endswith("; workers 2")


def test_run_refuses_a_bad_manager_workers_before_starting(workspace, tmp_path):
    # Written by hand (settings set refuses it): the run refuses it too, and starts nothing.
    settings = Path(workspace, ".httk-workflow", "settings.json")
    settings.write_text('{"manager.workers":0}\n')
    before = sorted(str(path) for path in Path(workspace).rglob("*"))
    done = run([script("httk"), "workflow", "run", workspace], tmp_path)
    assert done.returncode == 2
    assert done.stderr == "error: setting manager.workers must be a positive integer, not 0\n"
    assert sorted(str(path) for path in Path(workspace).rglob("*")) == before
