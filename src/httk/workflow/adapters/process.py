"""Local processes on Linux: launching runners behind the launch gate, identifying and signalling them.

Owns :class:`LocalProcessControl` (the :class:`~httk.workflow.ports.ProcessControl`
adapter) and :class:`GatedProcess` (its :class:`~httk.workflow.ports.LaunchedProcess`);
reading ``/proc`` and signalling process groups is :mod:`~httk.workflow.adapters.process_groups`,
which the runner side uses too.

Invariant (spec, "Runner contract"): a runner executes only after the manager has
recorded its identity, committed the ``running`` marker and released the one-byte
launch gate. The forked child blocks on the gate pipe before it touches anything;
if the manager dies first, the kernel closes the write end, the child reads
end-of-file and exits with status 125 without executing the runner. Identity is
(host, pid, ``/proc`` start ticks, pgid) so pid reuse is never mistaken for the
runner ("Cancelling a running job" verifies exits through it).

Two ways to start the gated child, with the same gate, group, signals and identity:
a spawn (``posix_spawn``, which the C library does with ``vfork``) of ``/bin/sh``
running :data:`GATE_SCRIPT`, which waits on the gate and then executes the runner,
and the fallback, a ``fork`` whose child waits on the gate itself. A fork copies
the manager's page tables and makes every page it writes afterwards fault once
(milliseconds per launch, growing with the manager's memory); a spawn costs the
same at any size. The spawn is taken only when the parent has checked every way
the runner could fail to start (``_spawnable``: an executable regular file with a
``#!`` line naming an executable ELF interpreter, or an ELF file; the workdir a
directory; the logs openable), because a shell would run a file without ``#!`` as
a script where ``execve`` refuses it; everything else takes the fork, whose child
reports the exact failure with status 125.

A Python runner run by this interpreter (``(sys.executable, entry.py)``) is first
offered to :mod:`~httk.workflow.adapters.python_preload`, which forks it from an
interpreter that has already imported the SDK, as our child, behind the same gate,
in its own group; when that does not qualify it is spawned as above. A Bash
runner (``("bash", entry.sh)``) is offered too, for the bridge its library would
otherwise start: the forked child starts it pre-loaded and executes ``bash``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import select
import signal
import socket
import stat
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from httk.workflow.adapters import process_groups
from httk.workflow.adapters.process_groups import read_stat
from httk.workflow.ports import ProcessIdentity

if TYPE_CHECKING:
    from httk.workflow.adapters.python_preload import PythonPreload

GATE_CLOSED_STATUS = 125
"""Exit status of a child whose gate was abandoned or whose runner could not be executed."""

LOST_STATUS = 255
"""Reported when our child was reaped elsewhere and its real status is unknown."""

GATE_FD = 3
"""The gate's read end in a spawned gate shell."""

#: What a spawned ``/bin/sh`` runs: wait for the gate byte on fd 3 (end-of-file: exit 125, never
#: run), close it, enter the workdir ($1), give ``PWD`` and ``OLDPWD`` back the values of the
#: environment the runner was given ($2-$5: set?, value; the shell exports its own), then execute
#: the runner ($6 ...). The parent has checked the workdir and the runner; a failure here is a
#: race (status 125 for the workdir, the shell's 126 or 127 for the exec).
GATE_SCRIPT = (
    'IFS= read -r g <&3; exec 3<&-; [ "$g" = x ] || exit 125; cd -- "$1" || exit 125; '
    'if [ "$2" = 1 ]; then PWD=$3; export PWD; else unset PWD; fi; '
    'if [ "$4" = 1 ]; then OLDPWD=$5; export OLDPWD; else unset OLDPWD; fi; shift 5; exec "$@"'
)
#: Environment names a POSIX shell passes on; it silently drops others (``BASH_FUNC_module%%``,
#: which module systems export), so an environment with one takes the fork.
_SHELL_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\Z")

_SHELL = "/bin/sh"
_ELF = b"\x7fELF"

# Python ignores some of these at start-up and a manager may handle or ignore others; the
# runner must start with the defaults (as subprocess does), and a gated child must die of SIGTERM.
_RESET_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGPIPE", "SIGXFSZ", "SIGXFZ", "SIGCHLD", "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


def _decode_status(status: int) -> int:
    """A wait status as subprocess reports it: exit code, or minus the signal."""
    return os.waitstatus_to_exitcode(status)


def _child(gate_r: int, max_fd: int, argv: list[bytes], env: dict[bytes, bytes],
           candidates: list[bytes], cwd: bytes, stdout: bytes, stderr: bytes) -> None:
    """The forked child up to ``execve``; only os-level calls, everything pre-computed."""
    os.setpgid(0, 0)
    for signum in _RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    # Other gates' write ends are copied into us until exec; close them now or an
    # abandoned sibling would not see EOF while we wait.
    if gate_r > 3:
        os.closerange(3, gate_r)
    os.closerange(max(3, gate_r + 1), max_fd)
    if os.read(gate_r, 1) == b"":
        return  # the manager abandoned us or died: never run the runner
    os.close(gate_r)
    failure: OSError | None = None
    try:
        for path, target, flags in ((b"/dev/null", 0, os.O_RDONLY),
                                    (stdout, 1, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                                    (stderr, 2, os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
            fd = os.open(path, flags, 0o644)
            if fd == target:
                os.set_inheritable(fd, True)  # os.open is close-on-exec; dup2 targets are not
            else:
                os.dup2(fd, target)
                os.close(fd)
        os.chdir(cwd)
    except OSError as error:
        failure = error
        candidates = []
    for candidate in candidates:
        try:
            os.execve(candidate, argv, env)
        except OSError as error:
            # Like execvpe: report the first error that is not "not here".
            if failure is None or failure.errno in (errno.ENOENT, errno.ENOTDIR):
                failure = error
    reason = b"empty search path"
    if failure is not None:
        reason = b"%s (%s)" % (os.fsencode(failure.strerror or ""), os.fsencode(failure.filename or ""))
    os.write(2, b"httk-workflow: cannot execute '%s': %s\n" % (argv[0], reason))


def _is_elf_executable(path: bytes) -> bool:
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or not os.access(path, os.X_OK):
            return False
        with open(path, "rb") as handle:
            return handle.read(4) == _ELF
    except OSError:
        return False


def _spawnable(path: bytes) -> bool:
    """Whether ``execve(path)`` will start a program: an ELF file, or a ``#!`` script of an ELF interpreter."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or not os.access(path, os.X_OK):
            return False
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return False
    if head.startswith(_ELF):
        return True
    if not head.startswith(b"#!"):
        return False  # execve says ENOEXEC; a shell would run it as a script
    words = head[2:].split(b"\n", 1)[0].split()
    return bool(words) and words[0].startswith(b"/") and _is_elf_executable(words[0])


def _inherited_fds() -> list[int]:
    """Descriptors above 2 this process would pass on through ``exec`` (not close-on-exec)."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                found.append(fd)
        except OSError:
            continue  # the listing's own descriptor, closed by now
    return found


class GatedProcess:
    """A child of this process, started in its own group and held behind its launch gate."""

    def __init__(self, identity: ProcessIdentity, gate_w: int, pidfd: int | None) -> None:
        self._identity = identity
        self._gate_w: int | None = gate_w
        self._pidfd = pidfd
        self._returncode: int | None = None

    @property
    def identity(self) -> ProcessIdentity:
        return self._identity

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def release(self) -> None:
        """Write the gate byte: the runner executes. Idempotent."""
        self._close_gate(b"x")

    def abandon(self) -> None:
        """Close the gate without the byte: the child exits 125 and the runner never runs."""
        self._close_gate(b"")

    def _close_gate(self, byte: bytes) -> None:
        if self._gate_w is None:
            return
        fd, self._gate_w = self._gate_w, None
        try:
            if byte:
                os.write(fd, byte)
        except BrokenPipeError:
            pass  # the child is already gone; poll() will say how
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        """The exit status (negative for a signal) once ended, reaping the child; else ``None``."""
        if self._returncode is None:
            try:
                pid, status = os.waitpid(self._identity.pid, os.WNOHANG)
            except ChildProcessError:
                self._returncode = LOST_STATUS
            else:
                if pid:
                    self._returncode = _decode_status(status)
        return self._returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the process ends or ``timeout`` seconds pass; ``None`` on timeout."""
        if self.poll() is not None:
            return self._returncode
        if self._pidfd is None:
            return self._wait_without_pidfd(timeout)
        poller = select.poll()  # not select.select: descriptors may exceed FD_SETSIZE
        poller.register(self._pidfd, select.POLLIN)
        poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        return self.poll()

    def _wait_without_pidfd(self, timeout: float | None) -> int | None:
        if timeout is None:
            try:
                _, status = os.waitpid(self._identity.pid, 0)
            except ChildProcessError:
                self._returncode = LOST_STATUS
            else:
                self._returncode = _decode_status(status)
            return self._returncode
        # Kernels before 5.3 lack pidfd: back off from 1 ms to 50 ms (no clock here).
        waited, pause = 0.0, 0.001
        while self.poll() is None and waited < timeout:
            step = min(pause, timeout - waited)
            select.poll().poll(int(step * 1000) or 1)
            waited, pause = waited + step, min(pause * 2, 0.05)
        return self._returncode

    def fileno(self) -> int:
        """A pidfd that becomes readable when the process ends (for ``select``/``poll``)."""
        if self._pidfd is None:
            raise OSError(errno.ENOSYS, "pidfd_open is not available; use wait(timeout)")
        return self._pidfd

    def close(self) -> None:
        """Abandon the gate if still closed and release the pidfd; the child is not signalled."""
        self.abandon()
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            os.close(fd)

    def __del__(self) -> None:
        # Nobody can release a dropped process any more: abandon its gate, free the pidfd.
        with contextlib.suppress(Exception):
            self.close()


class LocalProcessControl:
    """:class:`~httk.workflow.ports.ProcessControl` for this Linux host (fork, pidfd, /proc)."""

    def __init__(self, *, use_pidfd: bool = True, use_spawn: bool = True, python_preload: bool = True) -> None:
        self._use_pidfd = use_pidfd and hasattr(os, "pidfd_open")
        self._use_spawn = use_spawn and hasattr(os, "posix_spawn") and os.path.exists(_SHELL)
        self._children: weakref.WeakValueDictionary[int, GatedProcess] = weakref.WeakValueDictionary()
        #: Forks ``(sys.executable, entry.py)`` runners from a preloaded interpreter; built at first use.
        self._use_preload = python_preload
        self._preload: PythonPreload | None = None

    @property
    def python_preload(self) -> PythonPreload | None:
        """The preloaded Python launcher, once a launch has asked for it."""
        return self._preload

    def close(self) -> None:
        """Stop the preloaded Python launcher, if one runs; launched runners are not touched."""
        if self._preload is not None:
            self._preload.close()

    def hostname(self) -> str:
        return socket.gethostname()

    def pid(self) -> int:
        return os.getpid()

    def uid(self) -> int:
        return os.getuid()

    def launch(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
               stdout_path: str, stderr_path: str) -> GatedProcess:
        """Start ``argv`` in a new process group, blocked on a closed launch gate (spawned, else forked)."""
        if not argv:
            raise ValueError("argv must not be empty")
        if any("=" in key or not key for key in env):
            raise ValueError("environment names must be non-empty and must not contain '='")
        # Everything the child needs is built here, so the child allocates next to nothing.
        argv_b = [os.fsencode(arg) for arg in argv]
        env_b = {os.fsencode(key): os.fsencode(value) for key, value in env.items()}
        if any(b"\0" in item for item in (*argv_b, *env_b, *env_b.values())):
            raise ValueError("argv and environment must not contain NUL bytes")
        if b"/" in argv_b[0]:
            candidates = [argv_b[0]]
        else:
            candidates = [os.path.join(os.fsencode(d), argv_b[0]) for d in os.get_exec_path(dict(env))]
        cwd_b, out_b, err_b = os.fsencode(cwd), os.fsencode(stdout_path), os.fsencode(stderr_path)
        gate_r, gate_w = os.pipe()  # both close-on-exec
        if self._use_preload and argv[0] in (sys.executable, "bash"):
            pid = self._preloaded(gate_r, argv, env, cwd, stdout_path, stderr_path)
            if pid is not None:
                os.close(gate_r)
                return self._gated(pid, gate_w)
            # A fresh gate: a child of a zygote lost mid-request may wait on this one (it now reads end-of-file).
            os.close(gate_r)
            os.close(gate_w)
            gate_r, gate_w = os.pipe()
        try:
            pid = self._spawn(gate_r, argv_b, env_b, candidates, cwd_b, out_b, err_b)
            if pid is None:
                pid = self._fork(gate_r, argv_b, env_b, candidates, cwd_b, out_b, err_b)
        except BaseException:
            os.close(gate_r)
            os.close(gate_w)
            raise
        os.close(gate_r)
        return self._gated(pid, gate_w)

    def _gated(self, pid: int, gate_w: int) -> GatedProcess:
        """Our child ``pid`` in its own group, identified, behind the gate whose write end is ``gate_w``."""
        try:
            try:
                os.setpgid(pid, pid)  # also in the child: whichever runs first wins the race
            except OSError as error:
                if error.errno not in (errno.EACCES, errno.ESRCH):
                    raise
            pidfd = self._pidfd_open(pid)
        except BaseException:
            os.close(gate_w)
            raise
        proc_stat = read_stat(pid)
        identity = ProcessIdentity(self.hostname(), pid, proc_stat[3] if proc_stat else None, pid)
        process = GatedProcess(identity, gate_w, pidfd)
        self._children[pid] = process
        return process

    def _preloaded(self, gate_r: int, argv: Sequence[str], env: Mapping[str, str], cwd: str,
                   stdout: str, stderr: str) -> int | None:
        """A Python (or Bash) runner forked from the preloaded interpreter, or ``None`` (logged) to spawn it."""
        if self._preload is None:
            from httk.workflow.adapters.python_preload import PythonPreload

            self._preload = PythonPreload(sys.executable, reset_signals=_RESET_SIGNALS)
        return self._preload.start(gate_r, argv, env, cwd, stdout, stderr, _inherited_fds)

    def _spawn(self, gate_r: int, argv: list[bytes], env: dict[bytes, bytes], candidates: list[bytes],
               cwd: bytes, stdout: bytes, stderr: bytes) -> int | None:
        """``posix_spawn`` the gate shell; ``None`` when the runner might not start (the fork reports why)."""
        if not self._use_spawn or not os.path.isdir(cwd) or not all(_SHELL_NAME.match(name) for name in env):
            return None
        program = next((candidate for candidate in candidates if os.path.exists(candidate)), None)
        if program is None or not _spawnable(program):
            return None
        write = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds() if fd != gate_r]
        actions += [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.fsdecode(stdout), write, 0o644),
            (os.POSIX_SPAWN_OPEN, 2, os.fsdecode(stderr), write, 0o644),
        ]
        gate = gate_r if gate_r != GATE_FD else os.dup(gate_r)  # dup2 onto itself would keep close-on-exec
        try:
            actions.append((os.POSIX_SPAWN_DUP2, gate, GATE_FD))
            kept = [item for name in (b"PWD", b"OLDPWD")
                    for item in ((b"1", env[name]) if name in env else (b"0", b""))]
            shell_argv = [_SHELL.encode(), b"-c", GATE_SCRIPT.encode(), b"httk-gate", cwd, *kept, program, *argv[1:]]
            try:
                return os.posix_spawn(_SHELL, shell_argv, env, file_actions=actions, setpgroup=0,
                                      setsigmask=(), setsigdef=_RESET_SIGNALS)
            except OSError:
                return None  # a log that cannot be opened, say: the fork's child reports it
        finally:
            if gate != gate_r:
                os.close(gate)

    def _fork(self, gate_r: int, argv: list[bytes], env: dict[bytes, bytes], candidates: list[bytes],
              cwd: bytes, stdout: bytes, stderr: bytes) -> int:
        """``fork`` a child that waits on the gate itself and reports any failure to start (status 125)."""
        max_fd = os.sysconf("SC_OPEN_MAX")
        max_fd = max_fd if max_fd > 0 else 65536
        pid = os.fork()
        if pid == 0:
            try:
                _child(gate_r, max_fd, argv, env, candidates, cwd, stdout, stderr)
            finally:
                os._exit(GATE_CLOSED_STATUS)
        return pid

    def _pidfd_open(self, pid: int) -> int | None:
        if not self._use_pidfd:
            return None
        try:
            return os.pidfd_open(pid)
        except OSError as error:
            if error.errno not in (errno.ENOSYS, errno.EPERM):  # kernel < 5.3 or seccomp
                raise
            self._use_pidfd = False
            return None

    def is_alive(self, identity: ProcessIdentity) -> bool | None:
        """``None`` off this host; ``False`` if gone, reused or a zombie (reaped if ours)."""
        if identity.host != self.hostname():
            return None
        stat = read_stat(identity.pid)
        if stat is None:
            return False
        state, ppid, _, start_ticks = stat
        if identity.start_ticks is not None and start_ticks != identity.start_ticks:
            return False  # the pid was reused
        if state not in ("Z", "X"):
            # Without start ticks a live pid may be ours: claiming alive is the safe side.
            return True
        if ppid == os.getpid():
            self._reap(identity.pid)
        return False

    def _reap(self, pid: int) -> None:
        child = self._children.get(pid)
        if child is not None:
            child.poll()  # keeps the status for its owner
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass

    def terminate_group(self, pgid: int) -> bool:
        """SIGTERM a process group; False when it no longer exists."""
        return self.signal_group(pgid, signal.SIGTERM)

    def kill_group(self, pgid: int) -> bool:
        """SIGKILL a process group; False when it no longer exists."""
        return self.signal_group(pgid, signal.SIGKILL)

    def wait_any(self, processes: Sequence[GatedProcess], timeout: float) -> None:
        """Block until one of ``processes`` exits or ``timeout`` passes."""
        wait_any(processes, timeout)

    def on_terminate(self, callback: Callable[[int], None]) -> None:
        install_termination_handler(callback)

    def signal_group(self, pgid: int, signum: int) -> bool:
        """``killpg``; ``False`` when the group no longer exists."""
        return process_groups.signal_group(pgid, signum)

    def group_alive(self, pgid: int) -> bool:
        """Whether any non-zombie member of the group remains (verifies a cancelled group is gone)."""
        process_groups.check_signallable(pgid)
        for child in list(self._children.values()):
            if child.identity.pgid == pgid:
                child.poll()  # our own exited child is reaped here, not left as a zombie member
        return process_groups.group_alive(pgid)


def wait_any(processes: Sequence[GatedProcess], timeout: float) -> None:
    """Block until one of ``processes`` exits or ``timeout`` seconds pass (poll on pidfds)."""
    poller = select.poll()
    pollable = 0
    for process in processes:
        try:
            poller.register(process.fileno(), select.POLLIN)
            pollable += 1
        except OSError:
            continue
    if pollable < len(processes):
        # Without pidfds we cannot block on exits: bound the wait so exits are seen quickly.
        timeout = min(timeout, 0.05)
    if pollable == 0:
        time.sleep(max(timeout, 0.0))
        return
    poller.poll(max(timeout, 0.0) * 1000.0)


def install_termination_handler(callback: Callable[[int], None]) -> None:
    """Call ``callback(signum)`` on SIGTERM and SIGINT (the batch system's walltime signal)."""
    def handler(signum: int, _frame: object) -> None:
        callback(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
