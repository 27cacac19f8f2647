"""``job debug`` on the defect campaign, through the installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from e2e_support import EXAMPLE

HTTK = str(Path(sys.executable).with_name("httk"))


def httk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, timeout=120)


def submit(tmp_path: Path) -> tuple[str, str]:
    workspace = str(tmp_path / "ws")
    out = subprocess.run([sys.executable, str(EXAMPLE / "submit.py"), workspace], capture_output=True, text=True,
                         check=True)
    return workspace, out.stdout.strip()


def test_debug_stops_at_the_join_without_follow_children(tmp_path, campaign_env):
    workspace, key = submit(tmp_path)
    result = httk("job", "debug", workspace, key)
    assert result.returncode == 4, result.stderr
    assert "[characterize] characterized 4 candidate sites" in result.stdout
    assert "[debug] waiting" in result.stdout


def test_debug_follows_children_to_success(tmp_path, campaign_env):
    workspace, key = submit(tmp_path)
    result = httk("job", "debug", workspace, key, "--follow-children")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("[relax] relaxed site") == 4
    assert "ended succeeded" in result.stdout.splitlines()[-1]


def test_debug_failure_exit_status_and_step_refusal(tmp_path, campaign_env):
    campaign_env.setenv("DEMO_DIVERGE", "0")
    workspace, key = submit(tmp_path)
    result = httk("job", "debug", workspace, key, "--follow-children")
    assert result.returncode == 3, result.stdout + result.stderr
    refused = httk("job", "debug", workspace, key, "--step", "triage")
    assert refused.returncode == 2
    assert "already has a history" in refused.stderr and refused.stderr.count("\n") == 1
