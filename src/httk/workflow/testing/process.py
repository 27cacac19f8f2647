"""A fake process control: "runners" are Python callables acting on the in-memory filesystem.

With it, :class:`InMemoryFilesystem` and :class:`FakeClock`, a whole manager runs
in memory and deterministically: launching calls a behaviour with the attempt's
environment once the launch gate is released; the behaviour may publish an
outcome through the filesystem and return an exit status, or return ``None`` to
keep the process "running" until the test finishes or kills it. Waiting
advances the fake clock instead of sleeping.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..ports import ProcessIdentity
from .clock import FakeClock


@attrs.frozen
class Launch:
    """What a behaviour sees of one launch."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    stdout_path: str
    stderr_path: str
    pid: int


Behaviour = Callable[[Launch], int | None]


class FakeProcess:
    """One launched fake process behind its gate."""

    def __init__(self, control: FakeProcessControl, launch: Launch, behaviour: Behaviour) -> None:
        self._control = control
        self.launch = launch
        self._behaviour = behaviour
        self.identity = ProcessIdentity(control.host, launch.pid, launch.pid * 7, launch.pid)
        self.returncode: int | None = None
        self.released = False
        self.abandoned = False
        self.alive = True

    def release(self) -> None:
        if self.released or self.abandoned:
            return
        self.released = True
        status = self._behaviour(self.launch)
        if status is not None:
            self.exit(status)

    def abandon(self) -> None:
        if not self.released:
            self.abandoned = True
            self.exit(125)

    def exit(self, status: int) -> None:
        """End the process with ``status`` (a test may call it for a process left running)."""
        self.returncode = status
        self.alive = False

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None and timeout:
            self._control.clock.advance(timeout)
        return self.returncode

    def fileno(self) -> int:
        raise OSError("a fake process has no descriptor")

    def close(self) -> None:
        if not self.released:
            self.abandon()


class FakeProcessControl:
    """:class:`~httk.workflow.ports.ProcessControl` over behaviours, a fake clock and one fake host."""

    def __init__(self, clock: FakeClock, behaviour: Behaviour, *, host: str = "fakehost", uid: int = 1000) -> None:
        self.clock = clock
        self.behaviour = behaviour
        self.host = host
        self._uid = uid
        self._pids = itertools.count(4000)
        self.processes: list[FakeProcess] = []
        self.signals: list[tuple[int, str]] = []
        self.terminate_callback: Callable[[int], None] | None = None
        #: How many times a manager released launching (:meth:`close`).
        self.closed = 0

    def hostname(self) -> str:
        return self.host

    def pid(self) -> int:
        return 99

    def uid(self) -> int:
        return self._uid

    def launch(
        self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdout_path: str, stderr_path: str
    ) -> FakeProcess:
        launch = Launch(tuple(argv), cwd, dict(env), stdout_path, stderr_path, next(self._pids))
        process = FakeProcess(self, launch, self.behaviour)
        self.processes.append(process)
        return process

    def _by_pgid(self, pgid: int) -> list[FakeProcess]:
        return [process for process in self.processes if process.identity.pgid == pgid]

    def is_alive(self, identity: ProcessIdentity) -> bool | None:
        if identity.host != self.host:
            return None
        return any(process.alive for process in self._by_pgid(identity.pgid))

    def signal_group(self, pgid: int, signum: int) -> bool:
        found = [process for process in self._by_pgid(pgid) if process.alive]
        for process in found:
            process.exit(-signum)
        self.signals.append((pgid, str(signum)))
        return bool(found)

    def terminate_group(self, pgid: int) -> bool:
        return self.signal_group(pgid, 15)

    def kill_group(self, pgid: int) -> bool:
        return self.signal_group(pgid, 9)

    def group_alive(self, pgid: int) -> bool:
        return any(process.alive for process in self._by_pgid(pgid))

    def wait_any(self, processes: Sequence[Any], timeout: float) -> None:
        if not any(process.poll() is not None for process in processes):
            self.clock.advance(timeout)

    def on_terminate(self, callback: Callable[[int], None]) -> None:
        self.terminate_callback = callback

    def close(self) -> None:
        self.closed += 1
