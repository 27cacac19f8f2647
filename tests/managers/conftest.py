"""Fixtures of the manager-operations tests: a real workspace, real managers in subprocesses, real runners.

Every manager runs as a separate process (``httk workflow run`` or a tiny Python
script when a ``ManagerConfig`` field has no command-line option), because a
manager installs signal handlers and process-wide logging. Runners are Bash
scripts in the payload that publish their outcome by hand. Every wait polls
with a deadline; the ``ops`` fixture kills whatever it started, and every
runner process still carrying this workspace in its environment, at teardown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from httk.workflow.operations import inspection
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.store.markers import Marker
from httk.workflow.workspace import Workspace
from runner_support import BIN, HTTK, PRELUDE, group_members, pid_alive

#: A Python runner: ``main`` spawns one prepared child payload (its ``run.sh`` exits CHILD_EXIT) at the
#: placement ``elsewhere``, which the tests' managers do not serve, and gathers it; ``after`` succeeds.
SPAWNING_PARENT = """from httk.workflow import JobSpec, Runner, prepare_job_payload

run = Runner("ops")


@run.step
def main(a):
    child = prepare_job_payload(a.workdir / "child", JobSpec(name="child", workflow="ops", runner_path="run.sh"))
    (child / "run.sh").write_text("exit CHILD_EXIT\\n")
    a.spawn(child, label="c1", placement="elsewhere")
    a.gather("after")


@run.step
def after(a):
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
"""

#: Runs a manager built in-process from a JSON ManagerConfig: ``python -c MANAGER_SCRIPT WS CONFIG``.
MANAGER_SCRIPT = """
import json, sys
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.workspace import Workspace
options = json.loads(sys.argv[2])
for name in ("pools", "capabilities", "executors", "placement_prefixes", "runner_search_paths"):
    if name in options:
        options[name] = tuple(options[name])
manager = build_manager(default_container(), Workspace(sys.argv[1]).handle, ManagerConfig(**options))
sys.exit(manager.run())
"""


def wait_until(
    condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition", every: float = 0.02
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class ManagerProcess:
    """One manager subprocess; stdout and stderr go to files so a kill loses nothing already written."""

    def __init__(self, argv: list[str], env: dict[str, str], directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.stdout_path = directory / "stdout"
        self.stderr_path = directory / "stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)
            raise AssertionError(
                f"manager {self.popen.args} did not exit within {timeout}s\n"
                f"stdout: {self.stdout}\nstderr: {self.stderr}"
            ) from None

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    @property
    def manager_id(self) -> str:
        """The id from the banner (``httk-workflow manager m-…: workspace …``)."""
        line = wait_until(lambda: self.stdout.split("\n", 1)[0] if "\n" in self.stdout else "", 30, "the banner")
        return line.split()[2].rstrip(":")


class Ops:
    """One workspace and the tools to drive it from outside, as an operator would."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "ws"
        self.workspace = Workspace.init(self.root, durable=False)
        self.handle = self.workspace.handle
        self.env = {
            "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin",
            "HOME": str(tmp_path),
            "XDG_DATA_HOME": str(tmp_path / "xdg"),
            "PYTHONUNBUFFERED": "1",
            "LC_ALL": "C.UTF-8",
        }
        self.managers: list[ManagerProcess] = []
        self._count = 0

    # -- jobs ----------------------------------------------------------------------------------
    def job(self, body: str, placement: str = "p", files: dict[str, str] | None = None, **spec: Any) -> str:
        """Submit a job whose payload runner is ``run.sh`` = PRELUDE + ``body``; returns the job id."""
        self._count += 1
        payload = self.tmp / "payloads" / f"job{self._count}"
        values: dict[str, Any] = {"name": f"job{self._count}", "workflow": "ops", "runner_path": "run.sh"}
        values.update(spec)
        prepare_job_payload(payload, JobSpec(**values), durable=False)
        runner = values["runner_path"]
        (payload / runner).write_text(PRELUDE + body + "\n" if runner.endswith(".sh") else body)
        for name, text in (files or {}).items():
            (payload / name).write_text(text)
        return self.workspace.submit(payload, placement).job_id

    def spawning_parent(self, child_exit: int = 0) -> str:
        """Submit a parent that spawns one child at placement ``elsewhere`` (exiting ``child_exit``) and gathers it."""
        return self.job(SPAWNING_PARENT.replace("CHILD_EXIT", str(child_exit)), runner_path="run.py")

    def marker(self, job: str) -> Marker:
        return inspection.resolve_job(self.handle, job)

    def kind(self, job: str) -> str:
        return self.marker(job).kind.value

    def frame(self, job: str) -> Any:
        marker = self.marker(job)
        return self.handle.store.read_job(marker).frame

    def log(self, job: str) -> list[dict[str, Any]]:
        """``job log --json`` through the command line."""
        return json.loads(self.httk("job", "log", str(self.root), job, "--json").stdout)

    def payload(self, job: str) -> Path:
        marker = self.marker(job)
        return Path(self.handle.store.payload_dir(marker))

    def workdir(self, job: str) -> Path:
        return Path(self.handle.layout.persistent_workdir(job))

    def wait_kind(self, job: str, *kinds: str, timeout: float = 30.0) -> str:
        return wait_until(lambda: self.kind(job) if self.kind(job) in kinds else "", timeout,
                          f"job {job} to reach {'/'.join(kinds)}")

    # -- commands ------------------------------------------------------------------------------
    def httk(self, *args: str, code: int | None = 0, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)
        if code is not None and done.returncode != code:
            raise AssertionError(f"exit {done.returncode} != {code} for {args}\nstdout: {done.stdout}\n"
                                 f"stderr: {done.stderr}")
        return done

    def request(self, job: str, action: str, *extra: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        return self.httk("job", "request", str(self.root), job, action, "--operator", "me", "--reason", "r",
                         *extra, code=code)

    def start(self, *options: str) -> ManagerProcess:
        """``httk workflow run WS OPTIONS`` in the background."""
        return self._spawn([HTTK, "workflow", "run", str(self.root), *options])

    def start_script(self, **config: Any) -> ManagerProcess:
        """A manager built in-process with ``ManagerConfig(**config)`` (for fields the CLI lacks)."""
        return self._spawn([sys.executable, "-c", MANAGER_SCRIPT, str(self.root), json.dumps(config)])

    def _spawn(self, argv: list[str]) -> ManagerProcess:
        manager = ManagerProcess(argv, self.env, self.tmp / "managers" / str(len(self.managers)))
        self.managers.append(manager)
        return manager

    def orphan(self, job: str) -> tuple[str, Any]:
        """Run ``job`` under a manager with a 1 s lease until its runner touches ``started``, then SIGKILL
        the manager; returns (that manager's id, the process the frame records)."""
        first = self.start("--lease-seconds", "1")
        first_id = first.manager_id
        self.wait_kind(job, "running")
        wait_until(lambda: (self.workdir(job) / "started").exists(), 30, "the runner to start")
        process = self.frame(job).process
        first.signal(signal.SIGKILL)
        first.wait(10)
        return first_id, process

    def run(self, *options: str, code: int = 0, timeout: float = 60.0) -> ManagerProcess:
        """A manager until idle; asserts its exit status."""
        manager = self.start(*options)
        status = manager.wait(timeout)
        assert status == code, f"manager exited {status}\nstdout: {manager.stdout}\nstderr: {manager.stderr}"
        return manager

    # -- files ---------------------------------------------------------------------------------
    def requests(self, where: str) -> list[dict[str, Any]]:
        directory = Path(self.handle.layout.requests) / where
        if not directory.is_dir():
            return []
        return [json.loads(path.read_text()) for path in sorted(directory.rglob("*.json"))]

    def heartbeat_age(self, manager_id: str) -> float:
        path = Path(self.handle.layout.managers) / manager_id / "heartbeat.json"
        return time.time() - json.loads(path.read_text())["time"]

    # -- helpers (the test modules reach them through the fixture, not by importing conftest) ---
    wait_until = staticmethod(wait_until)
    group_members = staticmethod(group_members)
    pid_alive = staticmethod(pid_alive)

    # -- teardown ------------------------------------------------------------------------------
    def cleanup(self) -> None:
        for manager in self.managers:
            manager.kill()
        # Runners outlive a SIGKILLed manager by design: find them by the workspace in their environment.
        needle = f"HTTK_WORKFLOW_WORKSPACE_DIR={self.root}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                try:
                    os.kill(int(name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def ops(tmp_path: Path):
    instance = Ops(tmp_path)
    try:
        yield instance
    finally:
        instance.cleanup()
