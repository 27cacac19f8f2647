"""Supervised execution of one argv: streamed output, followed files, checkers, timeouts.

Owns :class:`ProcessSupervisor` (Bash: ``httk_workflow_run``) and its
:class:`SupervisedResult`; spec "Data and workdir changes" and the
``supervision.ProcessSupervisor`` row and exit-code discipline of the Python
and Bash authoring parity table.

Invariants: the program runs in its own session and process group, and when
:meth:`ProcessSupervisor.run` returns nothing of that group is left running —
a stop (timeout, inactivity, checker) is SIGTERM to the group, ``kill_grace``
seconds, then SIGKILL; processes that outlive a normally exiting leader get the
same treatment. The leader stays unreaped until its group is gone, so its pid
(the group id) cannot be reused while it is still being signalled. Every
run writes ``process-report.json`` (``httk-workflow-process-report`` version 1)
atomically, and its ``exit_class`` is 0, 22 (nonzero exit), 124 (timeout) or
125 (stopped by a checker or the inactivity watch). A checker that breaks its
protocol stops the run: a broken diagnostic is never silently ignored.

All I/O is one ``selectors`` loop in the calling thread, so there are no
threads to leak and every wait is bounded by ``poll_interval``. Time comes from
the clock adapter, group liveness and signals from
:mod:`~httk.workflow.adapters.process_groups`, the report is published by the
POSIX filesystem adapter; the parts are :mod:`~httk.workflow.line_splitter`,
:mod:`~httk.workflow.followed_files` and :mod:`~httk.workflow.checker_protocol`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from httk.workflow import codec
from httk.workflow.adapters.clock import SystemClock
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.adapters.process_groups import child_exited, group_alive, signal_group
from httk.workflow.checker_protocol import EVENT_FORMAT, event_line, parse_result
from httk.workflow.followed_files import FollowedFile
from httk.workflow.line_splitter import LineSplitter
from httk.workflow.ports import Clock
from httk.workflow.runner_env import durable_from_env

__all__ = [
    "CHECKER_CLOSE_TIMEOUT", "EVENT_FORMAT", "EXIT_FAILED", "EXIT_STOPPED", "EXIT_SUCCEEDED", "EXIT_TIMEOUT",
    "REPORT_FORMAT", "ProcessSupervisor", "SupervisedResult",
]

REPORT_FORMAT = "httk-workflow-process-report"
REPORT_VERSION = 1

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_TIMEOUT, EXIT_STOPPED = 0, 22, 124, 125

CHECKER_CLOSE_TIMEOUT = 5.0
"""Seconds a checker may go without reading its remaining events, or without exiting once they are read."""

_READ_SIZE = 1 << 16
_MAX_PENDING = 64 << 20  # events queued for a checker that does not read them
_MAX_RESULTS = 1000  # recorded results per checker; the rest are only counted


@attrs.frozen
class SupervisedResult:
    """How a supervised run ended; ``report`` is the document written to ``process-report.json``."""

    argv: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    stopped_by: str | None
    status: str
    exit_class: int
    duration: float
    report: dict[str, Any] = attrs.field(eq=False, repr=False)


class _Checker:
    """One running checker: its pipes, the events not yet written, and the results read back."""

    def __init__(self, name: str, argv: tuple[str, ...], process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self.name, self.argv, self.process = name, argv, process
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr
        os.set_blocking(self.stdin.fileno(), False)
        self.pending = bytearray()
        self.lines = LineSplitter()
        self.stderr_tail = bytearray()
        self.results: list[dict[str, Any]] = []
        self.continued = self.dropped = 0
        self.writing = self.broken = self.closing = False
        self.stdout_open = self.stderr_open = self.stdin_open = True
        self.exit_seen = False


def _signal(pgid: int, signum: int) -> None:
    """Signal a group this run started; one that is gone, or no longer ours to signal, needs nothing."""
    with contextlib.suppress(PermissionError):
        signal_group(pgid, signum)


def _forward(fd: int, data: bytes) -> None:
    """Copy output to our own stdout/stderr, the destination when no file was named."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:
            return  # our own stream is gone; the checkers still saw the line


def _argv(value: Sequence[str | os.PathLike[str]], what: str) -> tuple[str, ...]:
    # A string would be split into characters or need a shell; both are refused by design.
    if isinstance(value, str | bytes):
        raise TypeError(f"{what} must be an argument array, not a string: {value!r}")
    argv = tuple(os.fspath(item) for item in value)
    if not argv:
        raise ValueError(f"{what} is empty")
    return argv


class ProcessSupervisor:
    """Run ``argv`` supervised by timeouts, an inactivity watch and checker programs.

    ``timeout`` bounds the wall-clock run (exit class 124); ``inactivity_timeout``
    stops a program that wrote nothing to stdout, stderr or a followed file for
    that long (125). ``follow`` names files to tail, from their end at start or
    from their beginning if created later. Each checker is an argv that reads
    checker events on stdin and writes checker results on stdout. Output goes to
    ``stdout_path``/``stderr_path``, or to this process's own streams. The
    program's stdin is ``/dev/null``. Relative paths are relative to ``cwd``,
    where the program and the checkers run.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        inactivity_timeout: float | None = None,
        follow: Sequence[str | os.PathLike[str]] = (),
        checkers: Sequence[Sequence[str]] = (),
        stdout_path: str | os.PathLike[str] | None = None,
        stderr_path: str | os.PathLike[str] | None = None,
        report_path: str | os.PathLike[str] | None = None,
        poll_interval: float = 0.1,
        kill_grace: float = 2.0,
    ) -> None:
        self.argv = _argv(argv, "argv")
        self.checkers = tuple(_argv(checker, "checker") for checker in checkers)
        for name, value in (("timeout", timeout), ("inactivity_timeout", inactivity_timeout)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if poll_interval <= 0 or kill_grace < 0:
            raise ValueError("poll_interval must be positive and kill_grace non-negative")
        self.cwd = Path(cwd if cwd is not None else ".").absolute()
        self.env = dict(env) if env is not None else None
        self.timeout, self.inactivity_timeout = timeout, inactivity_timeout
        self.follow = tuple(os.fspath(path) for path in follow)
        self.stdout_path = self.cwd / stdout_path if stdout_path is not None else None
        self.stderr_path = self.cwd / stderr_path if stderr_path is not None else None
        self.report_path = self.cwd / (report_path if report_path is not None else "process-report.json")
        self.poll_interval, self.kill_grace = poll_interval, kill_grace

    def run(self) -> SupervisedResult:
        """Run to the end and write the report.

        A program or checker that cannot start raises ``OSError`` once the report recording it is written.
        """
        return _Session(self, SystemClock()).run()


class _Session:
    """The state of one :meth:`ProcessSupervisor.run`."""

    def __init__(self, config: ProcessSupervisor, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.followers = [FollowedFile(name, config.cwd / name) for name in config.follow]
        self.checkers: list[_Checker] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.sinks: dict[str, Any] = {}
        self.splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}
        self.errors: list[dict[str, str]] = []
        self.stopped_by: str | None = None
        self.stop: dict[str, Any] | None = None
        self.leader_exited = self.stray = self.killed = self.cleaned = False
        self.term_at: float | None = None
        self.returncode: int | None = None
        self.fed = 0  # bytes of events written to checkers: their progress through a backlog
        self.started_at, self.start = clock.now(), clock.monotonic()
        self.last_activity = self.start

    def run(self) -> SupervisedResult:
        try:
            self._start_checkers()
            self._start_process()
            self._supervise()
            self._drain_output()
            self._close_checkers()
        except OSError as error:
            if self.process is not None:
                raise
            self.errors.append({"source": "supervisor", "message": f"could not start: {error}"})
            self._cleanup()
            self._publish()
            raise
        finally:
            self._cleanup()
        return self._publish()


    def _start_checkers(self) -> None:
        names = [os.path.basename(argv[0]) for argv in self.config.checkers]
        for index, argv in enumerate(self.config.checkers):
            # Two checkers run by the same interpreter would share a name; number them apart.
            name = names[index] if names.count(names[index]) == 1 else f"{names[index]}#{index + 1}"
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.config.cwd, env=self.config.env, start_new_session=True, bufsize=0,
            )
            checker = _Checker(name, argv, process)
            self.checkers.append(checker)
            self.selector.register(checker.stdout, selectors.EVENT_READ, ("result", checker))
            self.selector.register(checker.stderr, selectors.EVENT_READ, ("complaint", checker))

    def _start_process(self) -> None:
        config = self.config
        # Output is piped through this loop only when something watches it.
        watched = bool(config.checkers) or config.inactivity_timeout is not None
        streams: dict[str, Any] = {}
        for source, path in (("stdout", config.stdout_path), ("stderr", config.stderr_path)):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                self.sinks[source] = open(path, "wb")  # closed in _cleanup
            streams[source] = subprocess.PIPE if watched else self.sinks.get(source)
        self.process = subprocess.Popen(
            config.argv, cwd=config.cwd, env=config.env, stdin=subprocess.DEVNULL,
            stdout=streams["stdout"], stderr=streams["stderr"], start_new_session=True, bufsize=0,
        )
        if watched:
            for source in ("stdout", "stderr"):
                self.selector.register(getattr(self.process, source), selectors.EVENT_READ, (source, None))
        with contextlib.suppress(AttributeError, OSError):
            # Wakes the loop the moment the program exits; without it the exit is seen at the next poll.
            pidfd = os.pidfd_open(self.process.pid)
            self.selector.register(open(pidfd, "rb", buffering=0), selectors.EVENT_READ, ("exit", None))


    def _supervise(self) -> None:
        config, process = self.config, self.process
        assert process is not None
        last_follow = 0.0
        abandon_at: float | None = None
        while True:
            self._select(config.poll_interval)
            now = self.clock.monotonic()
            if now - last_follow >= config.poll_interval:
                last_follow = now
                self._poll_followers()
            self._check_checkers()
            if not self.leader_exited:
                if child_exited(process.pid):
                    self.leader_exited = True
                    if self.term_at is None and group_alive(process.pid):
                        self.stray = True
                        self._terminate()
                elif self.stopped_by is None:
                    self._watch(now)
            alive = not self.leader_exited or group_alive(process.pid)
            overdue = self.term_at is not None and now >= self.term_at + config.kill_grace
            if alive and overdue and not self.killed:
                self.killed = True
                _signal(process.pid, signal.SIGKILL)
            pipes_open = any(key.data[0] in self.splitters for key in self.selector.get_map().values())
            if self.leader_exited and not alive and not pipes_open:
                return
            if self.leader_exited and not alive or self.killed:
                # Only a process that left the group (or cannot die) still holds the pipes now.
                abandon_at = abandon_at if abandon_at is not None else now + max(config.kill_grace, 1.0)
                if now >= abandon_at:
                    what = "process group did not exit after SIGKILL" if alive else "pipes held open"
                    self.errors.append({"source": "supervisor", "message": f"{what}; gave up waiting"})
                    return

    def _watch(self, now: float) -> None:
        timeout, inactivity = self.config.timeout, self.config.inactivity_timeout
        if timeout is not None and now - self.start >= timeout:
            self._request_stop("timeout", f"wall-clock timeout of {timeout} s")
        elif inactivity is not None and now - self.last_activity >= inactivity:
            self._request_stop("inactivity", f"no new output for {inactivity} s")

    def _select(self, timeout: float) -> None:
        for checker in self.checkers:
            self._sync_writer(checker)
        for key, mask in self.selector.select(timeout):
            kind, checker = key.data
            if mask & selectors.EVENT_WRITE:
                self._write(checker)
                continue
            if kind == "exit":
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                continue
            data = os.read(key.fd, _READ_SIZE)
            if not data:
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                if checker is not None:
                    setattr(checker, "stdout_open" if kind == "result" else "stderr_open", False)
                    if kind == "result":
                        self._results(checker, checker.lines.flush())
                continue
            if kind == "result":
                self._results(checker, checker.lines.feed(data))
            elif kind == "complaint":
                checker.stderr_tail = (checker.stderr_tail + data)[-4096:]
            else:
                self._output(kind, data)

    def _output(self, source: str, data: bytes) -> None:
        sink = self.sinks.get(source)
        if sink is not None:
            sink.write(data)
            sink.flush()
        else:
            _forward(1 if source == "stdout" else 2, data)
        self.last_activity = self.clock.monotonic()
        for line in self.splitters[source].feed(data):
            self._event(source, line)

    def _poll_followers(self) -> None:
        for follower in self.followers:
            grew, lines = follower.poll()
            if grew:
                self.last_activity = self.clock.monotonic()
            for line in lines:
                self._event(follower.name, line)

    def _drain_output(self) -> None:
        for source, splitter in self.splitters.items():
            for line in splitter.flush():
                self._event(source, line)
        for follower in self.followers:
            for _ in range(64):  # to the current end, bounded against a writer that never pauses
                grew, lines = follower.poll()
                for line in lines:
                    self._event(follower.name, line)
                if not grew:
                    break
            for line in follower.lines.flush():
                self._event(follower.name, line)


    def _request_stop(self, by: str, reason: str, diagnosis: Mapping[str, Any] | None = None) -> None:
        # The first reason wins; a verdict after the program exited still classifies the run.
        if self.stopped_by is None:
            self.stopped_by = by
            self.stop = {"by": by, "reason": reason, "diagnosis": dict(diagnosis or {})}
            if not self.leader_exited:
                self._terminate()

    def _terminate(self) -> None:
        assert self.process is not None
        if self.term_at is None:
            self.term_at = self.clock.monotonic()
            _signal(self.process.pid, signal.SIGTERM)

    def _cleanup(self) -> None:
        """Make sure nothing started here survives, whatever ended the run."""
        if self.cleaned:
            return
        self.cleaned = True
        process = self.process
        if process is not None and process.returncode is None:
            if not self.leader_exited or group_alive(process.pid):
                _signal(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = process.wait(timeout=max(self.config.kill_grace, 1.0))
        for checker in self.checkers:
            if checker.process.poll() is None:
                _signal(checker.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    checker.process.wait(timeout=1.0)
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        for stream in [*self.sinks.values(), *(checker.stdin for checker in self.checkers)]:
            with contextlib.suppress(OSError):
                stream.close()
        self.selector.close()


    def _event(self, source: str, line: str) -> None:
        if not self.checkers:
            return
        data = event_line(source, line, self.clock.now())
        for checker in self.checkers:
            if checker.stdin_open and not checker.broken:
                checker.pending += data
                if len(checker.pending) > _MAX_PENDING:
                    self._checker_error(checker, f"fell more than {_MAX_PENDING} bytes of events behind")

    def _sync_writer(self, checker: _Checker) -> None:
        if not checker.stdin_open:
            return
        if checker.broken:
            checker.pending.clear()
        want = bool(checker.pending)
        if want != checker.writing:
            if want:
                self.selector.register(checker.stdin, selectors.EVENT_WRITE, ("events", checker))
            else:
                self.selector.unregister(checker.stdin)
            checker.writing = want
        if checker.closing and not want:
            checker.stdin_open = False
            checker.stdin.close()

    def _write(self, checker: _Checker) -> None:
        try:
            written = os.write(checker.stdin.fileno(), checker.pending[:_READ_SIZE])
        except BlockingIOError:
            return
        except OSError:
            # The checker closed its input; whether that was an error shows in its exit status.
            checker.pending.clear()
            self._sync_writer(checker)
            checker.stdin_open = False
            checker.stdin.close()
            return
        del checker.pending[:written]
        self.fed += written

    def _results(self, checker: _Checker, lines: list[str]) -> None:
        for line in lines:
            if checker.broken or not line.strip():  # a broken checker's later output is not evidence
                continue
            problem, result = parse_result(line)
            if problem is not None:
                self._checker_error(checker, f"{problem}: {line[:200]!r}")
                continue
            assert result is not None
            if result["action"] == "stop":
                self._request_stop(f"checker:{checker.name}", result["reason"], result["diagnosis"])
            elif not result["reason"] and not result["diagnosis"]:
                checker.continued += 1
                continue
            if len(checker.results) < _MAX_RESULTS:
                checker.results.append({**result, "time": self.clock.now()})
            else:
                checker.dropped += 1

    def _checker_error(self, checker: _Checker, message: str) -> None:
        if checker.broken:
            return  # its first error is the one that explains the stop
        self.errors.append({"source": f"checker:{checker.name}", "message": message})
        checker.broken = True
        self._request_stop(f"checker:{checker.name}", f"checker error: {message}")

    def _check_checkers(self) -> None:
        # A checker that died mid-run is a broken diagnostic: stop rather than run unwatched.
        for checker in self.checkers:
            if checker.exit_seen or checker.stdout_open or checker.process.poll() is None:
                continue
            checker.exit_seen = True
            if checker.process.returncode != 0:
                tail = checker.stderr_tail.decode("utf-8", "replace").strip()[-500:]
                self._checker_error(checker, f"exited with status {checker.process.returncode}: {tail}")

    def _close_checkers(self) -> None:
        for checker in self.checkers:
            checker.closing = True
        deadline, fed = self.clock.monotonic() + CHECKER_CLOSE_TIMEOUT, self.fed
        while any(c.stdout_open or c.stderr_open or c.stdin_open for c in self.checkers):
            if self.fed != fed:  # a slow checker still working through its backlog is not stuck
                deadline, fed = self.clock.monotonic() + CHECKER_CLOSE_TIMEOUT, self.fed
            if self.clock.monotonic() >= deadline:
                for checker in self.checkers:
                    if checker.stdout_open or checker.stdin_open:
                        self._checker_error(checker, f"did not finish within {CHECKER_CLOSE_TIMEOUT} s")
                break
            self._select(self.config.poll_interval)
        for checker in self.checkers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                checker.process.wait(timeout=max(0.0, deadline - self.clock.monotonic()))
            if checker.process.returncode is None and not checker.broken:
                self._checker_error(checker, f"did not exit within {CHECKER_CLOSE_TIMEOUT} s")
        self._check_checkers()


    def _publish(self) -> SupervisedResult:
        config = self.config
        if self.process is not None and self.process.returncode is not None:
            self.returncode = self.process.returncode
        if self.stopped_by == "timeout":
            status, exit_class = "timeout", EXIT_TIMEOUT
        elif self.stopped_by is not None or self.process is None:
            status, exit_class = ("stopped" if self.process else "failed"), EXIT_STOPPED
        elif self.returncode == 0:
            status, exit_class = "succeeded", EXIT_SUCCEEDED
        else:
            status, exit_class = "failed", EXIT_FAILED
        duration = self.clock.monotonic() - self.start
        report = {
            "format": REPORT_FORMAT, "format_version": REPORT_VERSION,
            "argv": list(config.argv), "cwd": os.fspath(config.cwd),
            "returncode": self.returncode, "timed_out": self.stopped_by == "timeout",
            "stopped_by": self.stopped_by, "status": status, "exit_class": exit_class,
            "duration": duration, "started_at": self.started_at, "ended_at": self.started_at + duration,
            "timeout": config.timeout, "inactivity_timeout": config.inactivity_timeout,
            "stdout": os.fspath(config.stdout_path) if config.stdout_path else None,
            "stderr": os.fspath(config.stderr_path) if config.stderr_path else None,
            "followed": list(config.follow), "stray_processes_terminated": self.stray,
            "stop": self.stop,
            "checkers": [
                {"name": c.name, "argv": list(c.argv), "returncode": c.process.returncode,
                 "results": c.results, "continued": c.continued, "dropped": c.dropped}
                for c in self.checkers
            ],
            "errors": self.errors,
        }
        PosixFilesystem().write_atomic(os.fspath(config.report_path), codec.encode(report), durable=durable_from_env())
        return SupervisedResult(
            argv=config.argv, returncode=self.returncode, timed_out=report["timed_out"],
            stopped_by=self.stopped_by, status=status, exit_class=exit_class, duration=duration,
            report=report,
        )
