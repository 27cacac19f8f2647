"""Fixtures of the command-line tests: a CliRunner bound to a fresh container, payload builders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from httk.workflow.bootstrap import Container
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk
from httk.workflow.protocol import JobSpec, prepare_job_payload


class Cli:
    """Runs ``httk workflow ...`` in-process; every run gets a private XDG data home."""

    def __init__(self, tmp_path: Path) -> None:
        self.runner = CliRunner()
        self.env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
        self.container = Container()

    def __call__(self, *args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
        result = self.runner.invoke(
            httk, ["workflow", *args], obj=AppContext(self.container), env={**self.env, **(env or {})}
        )
        if result.exit_code != code:
            raise AssertionError(
                f"exit {result.exit_code} != {code} for {args}\nstdout: {result.stdout}\n"
                f"stderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


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
