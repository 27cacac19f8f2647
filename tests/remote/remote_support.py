"""Shared helpers of the remote tests: the infra env file, an SSH transport to it, payloads, polling.

Imported by name (``from remote_support import ...``); conftest modules must not be.
The Slurm/SSH tests read ``$CI_INFRA_DIR/env`` (default ``/var/lib/ci-slurm-ssh/env``),
written by ``tests/infra/start-slurm-ssh.sh``; without it they skip. The in-process
command line is the shared ``cli`` fixture (tests/cli_support.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from httk.workflow.ports import CommandResult
from httk.workflow.protocol import JobSpec, prepare_job_payload

ROOT = Path(__file__).resolve().parents[2]
INFRA_SCRIPT = ROOT / "tests" / "infra" / "start-slurm-ssh.sh"
HTTK = str(Path(sys.executable).parent / "httk")
T = TypeVar("T")

RUNNER = """from httk.workflow import Runner

run = Runner("demo")


@run.step
def main(a):
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
"""


def infra_env_path() -> Path:
    return Path(os.environ.get("CI_INFRA_DIR", "/var/lib/ci-slurm-ssh")) / "env"


def load_infra(*, fresh_httk: bool) -> dict[str, str]:
    """The env file of the running infrastructure; skip (with how to start it) when there is none.

    With ``fresh_httk`` a warning says when the ssh user's httk was installed from other sources.
    """
    path = infra_env_path()
    if not path.is_file():
        pytest.skip(
            f"no Slurm/SSH test infrastructure ({path} is absent): as root run 'make infra' "
            f"or 'bash {INFRA_SCRIPT.relative_to(ROOT)}'"
        )
    env = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    # `make test` reinstalls before pytest runs, so CI always tests these sources on the remote
    # side; a developer who edited since is told, not stopped (the remote side may lag behind).
    if fresh_httk and env.get("CI_HTTK_SOURCE_HASH") != source_hash():
        warnings.warn(
            f"{env['CI_HTTK_COMMAND']} was installed from other sources than this checkout's: the remote "
            f"side runs older code; rerun 'make infra' (or 'bash {INFRA_SCRIPT.relative_to(ROOT)}')",
            StaleInstallWarning,
            stacklevel=2,
        )
    return env


class StaleInstallWarning(UserWarning):
    """The ssh user's httk does not match this checkout."""


def source_hash() -> str:
    """The infra script's ``source_hash``: sha256 of the sorted ``sha256sum`` lines of what the wheel holds."""
    paths: list[str] = ["pyproject.toml"]
    for top in ("src", "adapters", "shell"):
        for directory, dirnames, filenames in os.walk(ROOT / top, followlinks=True):
            dirnames[:] = [name for name in dirnames if name != "__pycache__"]
            relative = Path(directory).relative_to(ROOT)
            paths.extend(str(relative / name) for name in filenames if (Path(directory) / name).is_file())
    lines = b"".join(
        f"{hashlib.sha256((ROOT / path).read_bytes()).hexdigest()}  {path}\n".encode() for path in sorted(paths)
    )
    return hashlib.sha256(lines).hexdigest()


def ssh_transport(infra: dict[str, str], **overrides: Any) -> Any:
    """An ``SshTransport`` to the infrastructure's sshd as its key-only user; ``overrides`` change options."""
    from httk.workflow.adapters.transport_ssh import SshTransport

    options: dict[str, Any] = {
        "port": int(infra["CI_SSH_PORT"]),
        "user": infra["CI_SSH_USER"],
        "key_filename": infra["CI_SSH_KEY"],
        "known_hosts": infra["CI_SSH_KNOWN_HOSTS"],
        "connect_timeout": 5.0,
    }
    options.update(overrides)
    return SshTransport(infra["CI_SSH_HOST"], **options)


def configure_kappa(cli, infra: dict[str, str], *extra: str) -> None:
    """Add the remote ``kappa`` (template ssh-slurm) pointing at the infrastructure; ``extra`` are more options."""
    cli("remote", "add", "kappa", "--template", "ssh-slurm")
    cli(
        "remote", "configure", "kappa",
        "--set", f"host={infra['CI_SSH_HOST']}", "--set", f"port={infra['CI_SSH_PORT']}",
        "--set", f"username={infra['CI_SSH_USER']}", "--set", f"key_filename={infra['CI_SSH_KEY']}",
        "--set", f"known_hosts={infra['CI_SSH_KNOWN_HOSTS']}", "--set", f"httk_command={infra['CI_HTTK_COMMAND']}",
        "--set", f"workspace_root={infra['CI_WORK_ROOT']}", *extra,
    )  # fmt: skip


@contextlib.contextmanager
def kappa_workspace(cli, infra: dict[str, str], directory: str, name: str) -> Iterator[dict[str, Any]]:
    """A workspace on kappa at ``CI_WORK_ROOT/<directory>-<hex>/runs``, registered there as ``<name>-<hex>``.

    Yields ``name``, ``ref`` (``kappa:<name>``), ``path``, its parent ``base``, what ``workspace init``
    printed (``initialized``), an ``ssh`` transport and ``infra``; afterwards the workspace is
    forgotten and ``base`` removed.
    """
    configure_kappa(cli, infra)
    unique = uuid.uuid4().hex[:12]
    base = f"{infra['CI_WORK_ROOT']}/{directory}-{unique}"
    registered = f"{name}-{unique}"
    init = cli("workspace", "init", f"kappa:{base}/runs", "--name", registered)
    ssh = ssh_transport(infra)
    try:
        yield {"name": registered, "ref": f"kappa:{registered}", "path": f"{base}/runs", "base": base,
               "initialized": init.stdout, "ssh": ssh, "infra": infra}
    finally:
        ssh.run([infra["CI_HTTK_COMMAND"], "workflow", "workspace", "forget", registered])
        ssh.run(["rm", "-rf", "--", base])
        ssh.close()


def local_remote(cli, workspace_root: Path, workspace: str | None = None) -> str:
    """Add the ``local`` remote ``here`` whose httk is this venv's; with ``workspace``, init an empty one so named
    at ``workspace_root/<workspace>``. Returns the remote's name."""
    cli("remote", "add", "here", "--template", "local")
    cli("remote", "configure", "here", "--set", f"httk_command={HTTK}", "--set", f"workspace_root={workspace_root}")
    if workspace is not None:
        cli("workspace", "init", f"here:{workspace_root / workspace}", "--name", workspace)
    return "here"


def wait_local_managers(cli, job_ids: Sequence[str], seconds: float = 120) -> None:
    """Wait until every local manager ``job_ids`` of ``here:runs`` exited."""

    def finished():
        jobs = cli.json("manager", "status", "here:runs", *[word for i in job_ids for word in ("--job", i)])["jobs"]
        return True if all(jobs[i]["finished"] for i in job_ids) else None

    wait_until(finished, seconds, f"local managers {list(job_ids)} exiting")


def write_payload(directory: Path) -> Path:
    """A prepared payload whose runner succeeds at once."""
    prepare_job_payload(directory, JobSpec(name="demo", workflow="demo", runner_path="run.py"))
    (directory / "run.py").write_text(RUNNER)
    return directory


def wait_until(probe: Callable[[], T | None], seconds: float, what: str) -> T:
    """Poll ``probe`` every 0.25 s until it returns non-``None``; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {seconds:g} s")
        time.sleep(0.25)


class RecordingTransport:
    """A RemoteTransport double: records each call and answers from a queue of results."""

    def __init__(self, *results: CommandResult) -> None:
        self.results = list(results)
        self.calls: list[tuple[list[str], str | None]] = []

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        self.calls.append((list(argv), input))
        return self.results.pop(0) if self.results else CommandResult(0, "", "")

    def put(self, local: str, remote: str) -> None:
        self.calls.append((["put", local, remote], None))

    def get(self, remote: str, local: str) -> None:
        self.calls.append((["get", remote, local], None))

    def close(self) -> None:
        self.calls.append((["close"], None))
