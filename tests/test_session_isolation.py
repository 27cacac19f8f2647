"""tests/conftest.py: every test runs with private XDG homes, and a session that touches the real registry fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from httk.workflow.cli.defaults import registry_path

HERE = Path(__file__).resolve().parent
#: tests/conftest.py and the support modules it imports its shared fixtures from.
CONFTEST_FILES = ("conftest.py", "cli_support.py", "attempt_support.py", "memory_support.py")

ROGUE = """
from pathlib import Path
from conftest import REAL_TREES

def test_writes_the_real_registry():
    (data, _depth), _config = REAL_TREES
    data.mkdir(parents=True, exist_ok=True)
    (data / "registry.json").write_text("{}")
"""

POLITE = """
import os, subprocess, sys

def test_a_subprocess_sees_the_private_homes(tmp_path):
    code = "import os; print(os.environ['XDG_DATA_HOME'])"
    seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "httk-test-homes-" in seen and os.environ["XDG_CONFIG_HOME"] != os.environ["XDG_DATA_HOME"]
"""


def test_the_homes_of_this_session_are_private():
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        assert "httk-test-homes-" in os.environ[name], name
    assert "httk-test-homes-" in registry_path(os.environ)


def _session(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A pytest session of ``body`` under a copy of tests/conftest.py, whose "real" homes are in tmp_path."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in CONFTEST_FILES:
        shutil.copy(HERE / name, suite / name)
    (suite / "test_body.py").write_text(body)
    real = tmp_path / "real-data"
    (real / "httk-workflow").mkdir(parents=True)
    (real / "httk-workflow" / "registry.json").write_text('{"workspaces": {}}')
    env = {**os.environ, "XDG_DATA_HOME": str(real), "XDG_CONFIG_HOME": str(tmp_path / "real-config")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        capture_output=True, text=True, env=env, cwd=suite, timeout=120, check=False,
    )
    return done, real


def test_a_session_that_changes_the_real_registry_fails(tmp_path):
    done, real = _session(tmp_path, ROGUE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout  # the test itself passed: the guard failed the session
    assert f"changed {real}/httk-workflow/registry.json" in done.stdout


def test_a_session_that_keeps_to_its_homes_passes(tmp_path):
    done, real = _session(tmp_path, POLITE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (real / "httk-workflow" / "registry.json").read_text() == '{"workspaces": {}}'
