"""The manager's side of the preloaded Python launcher: qualifying a launch and asking the zygote for it.

A Python runner's command is ``(the manager's interpreter, entry.py)``
(:func:`httk.workflow.engine.attempts.command_for`). Starting that interpreter and
importing the SDK is most of a trivial runner's cost, so :class:`PythonPreload`
keeps one interpreter that has done both (:mod:`~httk.workflow.adapters.python_zygote`)
and has it fork each runner as a child of the manager. The launch is used only
when the result cannot differ from a fresh ``python entry.py``; otherwise
:meth:`PythonPreload.start` says why at debug level and returns ``None``, and the
caller spawns as before:

- another interpreter, or an entry that is not an absolute path of a ``.py`` file;
- a start-up variable (``PYTHON*``, locale, ``HOME``, the dynamic loader's and
  the allocator's) that differs from the zygote's;
- the runner's directory holding a module name the zygote has already imported
  (a fresh interpreter would import the runner's file instead);
- resource limits changed since the zygote started;
- no zygote: not Linux, an unsupported architecture, or it failed to start or
  crashed (restarted once, then given up for this manager).

A Bash runner ``("bash", entry.sh)`` qualifies too, for its bridge
(:func:`~httk.workflow.adapters.python_zygote._exec_with_bridge`): the entry file
calls ``httk_workflow_main`` (whose co-process the pre-started bridge replaces),
its ``HTTK_WORKFLOW_PYTHON`` is this interpreter, ``HTTK_WORKFLOW_SHELL_COPROCESS``
is not ``0``, and the start-up environment and limits are the zygote's as above.
The runner itself is the same ``bash`` a spawn would execute; only its bridge
skips the interpreter's start and the SDK's import.

The zygote starts at the first qualifying launch and stops with :meth:`close`,
at interpreter exit, when its socket reaches end-of-file, or by its death signal
when the manager dies. Runners are the manager's children and outlive it.
"""

from __future__ import annotations

import atexit
import errno
import logging
import marshal
import os
import platform
import resource
import select
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .python_zygote import CLONE_SYSCALL, CONTROL_FD, MAX_REQUEST, ZYGOTE_CODE

log = logging.getLogger("httk.workflow.manager")

#: Environment names the interpreter (or the C library under it) reads while it starts, before a runner's
#: first line: a zygote started with other values would not be the interpreter ``python entry.py`` is.
STARTUP_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "LC_")
STARTUP_NAMES = frozenset({"LANG", "LANGUAGE", "HOME", "GLIBC_TUNABLES"})

#: Seconds to wait for the zygote's hello (it imports the SDK) and for one answer.
START_TIMEOUT = 30.0
ANSWER_TIMEOUT = 10.0
#: How long a zygote being stopped after a timed-out request is given to say what it forked.
LATE_ANSWER_WAIT = 1.0
#: The program of a Bash runner (:func:`httk.workflow.engine.attempts.command_for`) and its entry files.
BASH = "bash"
BASH_SUFFIXES = (".sh", ".bash")
#: What a Bash runner calls for the library to start its bridge; read from the entry's first bytes.
BASH_MAIN = b"httk_workflow_main"
BASH_SCAN_LIMIT = 1 << 20


def startup_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` that shapes an interpreter's start."""
    return {key: value for key, value in env.items() if key.startswith(STARTUP_PREFIXES) or key in STARTUP_NAMES}


def current_umask() -> int:
    """This process's umask, read without changing it (``/proc``), else by setting it back at once."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _rlimits() -> tuple[tuple[int, int], ...]:
    return tuple(resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                 if name.startswith("RLIMIT_"))


class ZygoteLost(Exception):
    """The zygote did not answer as it should; it is stopped and may be restarted."""


class _Zygote:
    """One running zygote: its pid, control socket, start-up environment and preloaded module names."""

    def __init__(self, python: str, env: Mapping[str, str], reset_signals: Sequence[int],
                 close_fds: Callable[[], Sequence[int]]) -> None:
        self.env = startup_env(env)
        self.rlimits = _rlimits()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            given = theirs.fileno() if theirs.fileno() != CONTROL_FD else os.dup(theirs.fileno())
            actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_CLOSE, fd) for fd in close_fds() if fd != given]
            actions += [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_RDWR, 0) for fd in (0, 1, 2)]
            actions.append((os.POSIX_SPAWN_DUP2, given, CONTROL_FD))
            # Runner-time values (the attempt's HTTK_*) are each runner's; the zygote starts without them.
            zygote_env = {key: value for key, value in env.items() if not key.startswith("HTTK_")}
            try:
                self.pid = os.posix_spawn(python, [python, "-c", ZYGOTE_CODE, str(os.getpid())], zygote_env,
                                          file_actions=actions, setpgroup=0, setsigmask=(),
                                          setsigdef=tuple(reset_signals))
            finally:
                if given != theirs.fileno():
                    os.close(given)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        #: A request timed out without its answer: the zygote may have forked for it anyway.
        self.outstanding = False
        try:
            hello = self._answer(START_TIMEOUT, MAX_REQUEST)
        except ZygoteLost:
            self.stop()
            raise
        if hello[0] == "refused":
            self.stop()
            raise ZygoteLost(hello[1])
        if hello[0] != "hello":
            self.stop()
            raise ZygoteLost(f"unexpected greeting {hello[0]!r}")
        self.preloaded = frozenset(hello[2])
        #: What the interpreter's start added to the start-up environment (PEP 538's ``LC_CTYPE``); the
        #: same start from the same start-up variables adds the same to each runner's.
        self.added = {key: value for key, value in startup_env(hello[3]).items() if self.env.get(key) != value}

    def _answer(self, timeout: float, size: int = 4096) -> tuple[Any, ...]:
        poller = select.poll()
        poller.register(self.control.fileno(), select.POLLIN)
        if not poller.poll(timeout * 1000):
            raise ZygoteLost(f"no answer within {timeout:.0f}s")
        try:
            message = self.control.recv(size)
        except OSError as error:
            raise ZygoteLost(str(error)) from None
        if not message:
            raise ZygoteLost("it exited")
        return marshal.loads(message)

    def fork(self, gate_r: int, request: tuple[Any, ...]) -> int:
        """The pid of the runner the zygote forked for ``request``; :class:`ZygoteLost` or ``OSError`` if none."""
        try:
            socket.send_fds(self.control, [marshal.dumps(request)], [gate_r])
        except OSError as error:
            if error.errno == errno.EMSGSIZE:
                raise  # too large for one message: this launch spawns, the zygote is fine
            raise ZygoteLost(str(error)) from None
        try:
            answer = self._answer(ANSWER_TIMEOUT)
        except ZygoteLost:
            self.outstanding = True  # it may still fork: stop() waits a moment for that pid
            raise
        if answer[0] != "pid":
            raise OSError(f"zygote: {answer[1]}")
        return int(answer[1])

    def stop(self) -> list[int]:
        """Close the socket (the zygote exits at end-of-file) and reap it, killing it if it lingers.

        Returns the pids of runners it forked for a request given up on (its answer came
        after :data:`ANSWER_TIMEOUT`): children of ours, behind a gate the caller closes,
        which the caller must reap.
        """
        late: list[int] = []
        poller = select.poll()
        poller.register(self.control.fileno(), select.POLLIN)
        while poller.poll(LATE_ANSWER_WAIT * 1000 if self.outstanding and not late else 0):
            try:
                answer = marshal.loads(self.control.recv(4096))
            except (OSError, EOFError, ValueError, TypeError):
                break
            if isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "pid":
                late.append(int(answer[1]))
        self.control.close()
        for _ in range(100):
            try:
                pid, _status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return late
            if pid:
                return late
            select.poll().poll(10)
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        return late


class PythonPreload:
    """Starts qualifying Python runners by forking a preloaded interpreter (see the module docstring)."""

    def __init__(self, python: str, *, reset_signals: Sequence[int]) -> None:
        self._python = python
        self._reset_signals = tuple(reset_signals)
        self._zygote: _Zygote | None = None
        self._losses = 0
        #: Runners a lost zygote forked for requests given up on: our children, reaped when they exit.
        self._orphans: list[int] = []
        self._failure = ""
        self._unavailable: str | None = None
        if not sys.platform.startswith("linux"):
            self._unavailable = "not Linux"
        elif platform.machine() not in CLONE_SYSCALL:
            self._unavailable = f"no clone(CLONE_PARENT) support for {platform.machine()}"
        self._at_exit = False

    @property
    def zygote_pid(self) -> int | None:
        """The running zygote's pid, if one runs."""
        return self._zygote.pid if self._zygote is not None else None

    def start(self, gate_r: int, argv: Sequence[str], env: Mapping[str, str], cwd: str,
              stdout: str, stderr: str, close_fds: Callable[[], Sequence[int]]) -> int | None:
        """The pid of a runner forked from the zygote behind ``gate_r``, or ``None`` (logged) to spawn instead.

        After ``None`` the caller must not reuse this gate: a zygote lost mid-request may have
        forked a child that waits on it (closing the write end makes that child exit 125).
        """
        self._reap_orphans()
        bash = len(argv) > 1 and argv[0] == BASH
        reason = self._bash_refusal(argv, env) if bash else self._refusal(argv)
        zygote = self._running(env, close_fds) if reason is None else None
        if reason is None:
            reason = self._mismatch(zygote, argv[1], env, bash) if zygote else (self._unavailable or self._failure)
        if reason is None and zygote is not None:
            request = (BASH if bash else "", argv[1], list(argv[2:]), dict(env), zygote.added, cwd, stdout, stderr,
                       current_umask())
            try:
                return zygote.fork(gate_r, request)
            except ZygoteLost as lost:
                reason = f"the zygote was lost ({lost})"
                self._lose(reason)
            except OSError as error:
                reason = str(error)
        log.debug("python preload not used for %s: %s", argv[1] if len(argv) > 1 else argv[0], reason)
        return None

    def _refusal(self, argv: Sequence[str]) -> str | None:
        if self._unavailable is not None:
            return self._unavailable
        if len(argv) < 2 or argv[0] != self._python:
            return f"not run by this interpreter ({self._python})"
        if not os.path.isabs(argv[1]) or not argv[1].endswith(".py"):
            return "not an absolute path of a .py entry file"
        if not os.path.isfile(argv[1]):
            return "the entry file is not a regular file"
        return None

    def _bash_refusal(self, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
        """Why a Bash runner's bridge cannot be pre-started, or ``None``."""
        if self._unavailable is not None:
            return self._unavailable
        entry = argv[1]
        if not os.path.isabs(entry) or not entry.endswith(BASH_SUFFIXES):
            return "not an absolute path of a .sh or .bash entry file"
        if env.get("HTTK_WORKFLOW_PYTHON") != self._python:
            return f"its bridge is not run by this interpreter ({self._python})"
        if env.get("HTTK_WORKFLOW_SHELL_COPROCESS", "1") == "0":
            return "HTTK_WORKFLOW_SHELL_COPROCESS=0 asks for one interpreter per bridge call"
        try:
            with open(entry, "rb") as handle:
                head = handle.read(BASH_SCAN_LIMIT)
        except OSError as error:
            return f"the entry file is unreadable ({error})"
        if BASH_MAIN not in head:
            return "the entry file does not call httk_workflow_main"
        return None

    def _mismatch(self, zygote: _Zygote, entry: str, env: Mapping[str, str], bash: bool = False) -> str | None:
        wanted = startup_env(env)
        if wanted != zygote.env:
            names = sorted(key for key in wanted.keys() | zygote.env.keys() if wanted.get(key) != zygote.env.get(key))
            return f"start-up environment differs from the zygote's: {', '.join(names)}"
        if _rlimits() != zygote.rlimits:
            return "resource limits changed since the zygote started"
        if bash:
            return None  # the bridge puts no directory of the runner's on sys.path
        try:
            names = os.listdir(os.path.dirname(os.path.realpath(entry)))
        except OSError as error:
            return f"the runner directory is unreadable ({error})"
        shadowing = sorted({name.partition(".")[0] for name in names} & zygote.preloaded)
        if shadowing:
            return f"the runner directory shadows preloaded modules: {', '.join(shadowing)}"
        return None

    def _running(self, env: Mapping[str, str], close_fds: Callable[[], Sequence[int]]) -> _Zygote | None:
        """The zygote, started now if it is not running (once more after it was lost)."""
        if self._zygote is None and self._unavailable is None:
            try:
                self._zygote = _Zygote(self._python, env, self._reset_signals, close_fds)
            except (ZygoteLost, OSError) as error:
                self._failure = f"the zygote did not start ({error})"
                self._lose(self._failure)
            else:
                log.debug("python preload: zygote %d started", self._zygote.pid)
                if not self._at_exit:
                    atexit.register(self.close)
                    self._at_exit = True
        return self._zygote

    def _reap_orphans(self) -> None:
        # Each exits 125 once its gate is closed (the launch that lost it spawned instead).
        for pid in list(self._orphans):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self._orphans.remove(pid)

    def _lose(self, reason: str) -> None:
        """Stop a failed zygote; the next launch starts another, unless one was lost before."""
        if self._zygote is not None:
            self._orphans += self._zygote.stop()
            self._zygote = None
        self._losses += 1
        if self._losses > 1:
            self._unavailable = f"given up after losing the zygote twice, last: {reason}"

    def close(self) -> None:
        """Stop the zygote (runners it forked are not touched). Idempotent; a later launch starts a new one."""
        if self._zygote is not None:
            zygote, self._zygote = self._zygote, None
            self._orphans += zygote.stop()
        self._reap_orphans()
