"""Helpers of the review3 tests: a recording fake transport, an in-process CLI, the infra env file.

Imported by name (``from review3_support import ...``), never through a conftest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from httk.workflow.bootstrap import Container
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk
from httk.workflow.ports import CommandResult


class RecordingTransport:
    """A RemoteTransport that records every argv and answers from a queue (default: exit 0, no output)."""

    def __init__(self, *answers: CommandResult) -> None:
        self.calls: list[tuple[list[str], str | None]] = []
        self.answers = list(answers)

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        self.calls.append((list(argv), input))
        return self.answers.pop(0) if self.answers else CommandResult(0, "", "")

    def put(self, local: str, remote: str) -> None:  # pragma: no cover - unused
        raise AssertionError("put")

    def get(self, remote: str, local: str) -> None:  # pragma: no cover - unused
        raise AssertionError("get")

    def close(self) -> None:
        pass


class Cli:
    """``httk workflow ...`` in-process with private XDG homes below ``tmp_path``."""

    def __init__(self, tmp_path: Path) -> None:
        self.runner = CliRunner()
        self.config = tmp_path / "xdg-config"
        self.env = {"XDG_DATA_HOME": str(tmp_path / "xdg-data"), "XDG_CONFIG_HOME": str(self.config)}
        self.container = Container()

    @property
    def remotes(self) -> Path:
        return self.config / "httk-workflow" / "remotes"

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(httk, ["workflow", *args], obj=AppContext(self.container), env=self.env)


def one_error_line(result: Result) -> str:
    """The single ``error: ...`` line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def infra() -> dict[str, str]:
    """``$CI_INFRA_DIR/env`` of tests/infra/start-slurm-ssh.sh; skip when absent."""
    path = Path(os.environ.get("CI_INFRA_DIR", "/var/lib/ci-slurm-ssh")) / "env"
    if not path.is_file():
        pytest.skip(f"no Slurm/SSH test infrastructure ({path} is absent): run 'bash tests/infra/start-slurm-ssh.sh'")
    env: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def ssh_transport(env: dict[str, str], **overrides: Any) -> Any:
    from httk.workflow.adapters.transport_ssh import SshTransport

    options: dict[str, Any] = {
        "port": int(env["CI_SSH_PORT"]),
        "user": env["CI_SSH_USER"],
        "key_filename": env["CI_SSH_KEY"],
        "known_hosts": env["CI_SSH_KNOWN_HOSTS"],
        "connect_timeout": 5.0,
    }
    options.update(overrides)
    return SshTransport(env["CI_SSH_HOST"], **options)
