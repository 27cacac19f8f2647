"""Fixtures of the command-line tests: a registered workspace and payload builders.

The ``cli`` fixture (``httk workflow ...`` in-process) is the shared one of tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_support import Cli
from httk.workflow.protocol import JobSpec, prepare_job_payload


@pytest.fixture
def workspace(cli: Cli, tmp_path: Path) -> str:
    path = str(tmp_path / "ws")
    cli("workspace", "init", path)
    return path


def _make_payload(directory: Path, *, tag: str | None = None, **overrides: object) -> Path:
    """A prepared payload: job.json for a payload runner plus the runner file."""
    values: dict[str, object] = {"name": "demo", "workflow": "demo", "runner_path": "run.py", "tag": tag}
    values.update(overrides)
    prepare_job_payload(directory, JobSpec(**values))  # type: ignore[arg-type]
    (directory / "run.py").write_text("print('hello')\n")
    return directory


@pytest.fixture
def make_payload():
    """``make_payload(directory, tag=None, **JobSpec overrides)`` writes a prepared payload."""
    return _make_payload


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    return _make_payload(tmp_path / "payload")
