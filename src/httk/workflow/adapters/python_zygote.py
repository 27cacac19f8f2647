"""The preloaded Python launcher's own process: an interpreter that has imported the SDK and forks runners.

Started by :class:`~httk.workflow.adapters.python_preload.PythonPreload` as
``python -c ZYGOTE_CODE MANAGER_PID`` with its control socket (``SOCK_SEQPACKET``)
on descriptor 3. Each request carries a runner's launch gate (``SCM_RIGHTS``)
and what a fresh ``python entry.py`` would have been given: argv, environment,
working directory, log paths and umask. The zygote answers with the pid of a
child created with ``clone(CLONE_PARENT)``, so the runner is the *manager's*
child, exactly as a spawned one: the manager waits on it, reaps it and reads its
``/proc`` identity, and the runner outlives the manager. The zygote itself dies
with the manager (``PR_SET_PDEATHSIG``) or when its socket reaches end-of-file.

The child then does what the gated shell does (own process group, wait for the
gate byte, end-of-file => exit 125 without running anything, open the logs on
0-2, enter the workdir), replaces ``os.environ``, ``sys.argv`` and ``sys.path[0]``
and executes the entry file as ``__main__`` at the bottom of this stack, so the
interpreter's own exit handling applies unchanged (``SystemExit``, a traceback
and status 1, ``KeyboardInterrupt`` re-raising SIGINT, atexit, thread join,
flushing). Tracebacks are shown without the frames of this module.

A Bash runner that calls ``httk_workflow_main`` is forked the same way, with a
program to execute (``bash``) in the request: the child sets up the gate, logs,
workdir and umask as above, forks its **pre-started bridge** (a child of its own,
in its group, already holding the SDK: ``python -m httk.workflow.shell_bridge
--serve`` without the interpreter's start and imports), puts the default signal
dispositions back and executes ``bash entry.sh`` with the bridge's two pipes
named in ``HTTK_WORKFLOW_BRIDGE`` (``RUNNER_PID:REQUEST_FD:REPLY_FD:BRIDGE_PID``).
``httk_workflow_main`` uses them in place of starting its co-process
(docs/sdks/native_bash_api.md); the bridge ends when told to stop, at end-of-file
on its requests, or with the runner (its death signal). Without pipes or a
process to spare the runner is executed without a bridge and its library starts one.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib
import importlib.machinery
import io
import marshal
import os
import platform
import signal
import socket
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

#: The control socket's descriptor in the zygote.
CONTROL_FD = 3
GATE_CLOSED_STATUS = 125
#: Largest request accepted (argv and environment); a larger one is refused and the manager spawns.
MAX_REQUEST = 1 << 20

#: ``clone`` syscall numbers where its first argument is the flags.
CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220, "riscv64": 220}
#: Where ``clone`` takes the child's thread-id address: x86_64 has (flags, stack, parent_tid,
#: child_tid, tls), the generic ABI of aarch64 and riscv64 (flags, stack, parent_tid, tls, child_tid).
_CHILD_TID_ARGUMENT = {"x86_64": 3, "aarch64": 4, "riscv64": 4}
_CLONE_PARENT = 0x00008000
_CLONE_CHILD_CLEARTID = 0x00200000
_CLONE_CHILD_SETTID = 0x01000000
_PR_GET_TID_ADDRESS = 40
_PR_SET_PDEATHSIG = 1

#: What ``python -c`` runs: remember the modules of a bare start, drop ``''`` (the zygote's cwd must never
#: be importable), then serve. In a runner this stack is all that is above ``__main__``.
ZYGOTE_CODE = (
    "import sys; _startup = set(sys.modules); del sys.path[0]; "
    "from httk.workflow.adapters.python_zygote import main; main(_startup)"
)

#: Imported once here so that a runner finds them loaded: ``from httk.workflow import Runner`` and what
#: ``Runner.main`` imports on first use (the document converter, logging, tracebacks).
PRELOAD_MODULES = ("httk.workflow.sdk", "cattrs", "logging", "traceback", "textwrap", "dataclasses", "string",
                   # A Bash runner's pre-started bridge: the server, its commands and the filesystem they write with.
                   "httk.workflow.shell_bridge", "httk.workflow.shell_serve", "httk.workflow.adapters.fs_posix")
#: Where a Bash runner's bridge pipes are put: above the descriptors a script names itself (``exec 3>log``)
#: and below Bash's own (``{name}`` from 10 up is per script; 255 holds the script).
BRIDGE_FD_BASE = 200
#: The environment name that hands a Bash runner its pre-started bridge (shell/httk-workflow.sh reads it).
BRIDGE_ENV = "HTTK_WORKFLOW_BRIDGE"
#: What Python changes at start-up that a spawned runner has at its default (the manager resets the rest).
_PYTHON_SET_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGINT")
                            if hasattr(signal, name))


def _warm() -> None:
    """Build what every runner builds first, once: the converter and its hook for ``context.json``."""
    from httk.workflow import codec
    from httk.workflow.attempt_records import ContextDocument

    codec.converter().get_structure_hook(ContextDocument)


def _libc() -> Any:
    # PyDLL: the GIL stays held across the call, as os.fork holds it.
    return ctypes.PyDLL(None, use_errno=True)


class _MmMap(ctypes.Structure):
    """``struct prctl_mm_map`` (linux/prctl.h)."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
        "arg_start", "arg_end", "env_start", "env_end")] + [
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


_PR_SET_MM, _PR_SET_MM_MAP = 35, 14
#: The blocks /proc/PID/cmdline and /proc/PID/environ show once :func:`_show` moved them here; never freed.
_shown: list[Any] = []


def _show(libc: Any, argv: list[str], env: dict[str, str]) -> None:
    """Make ``/proc/self/cmdline`` and ``/proc/self/environ`` show ``argv`` and ``env`` (``ps``, tools reading /proc).

    ``PR_SET_MM_MAP`` without a new executable needs no privilege; everything else it sets is
    handed back unchanged (``/proc/self/stat`` and the current break).
    """
    args = b"".join(os.fsencode(arg) + b"\0" for arg in argv)
    variables = b"".join(os.fsencode(key) + b"=" + os.fsencode(value) + b"\0" for key, value in env.items())
    block = ctypes.create_string_buffer(args + (variables or b"\0"))  # the kernel wants a non-empty block
    base = ctypes.addressof(block)
    with open("/proc/self/stat", "rb") as handle:
        raw = handle.read()
    field = raw[raw.rindex(b")") + 2:].split()

    def stat(number: int) -> int:  # 1-based field numbers of proc(5); fields resume at 3 after comm
        return int(field[number - 3])

    libc.sbrk.restype = ctypes.c_void_p
    mapping = _MmMap(stat(26), stat(27), stat(45), stat(46), stat(47), libc.sbrk(0) or stat(47), stat(28),
                     base, base + len(args), base + len(args), base + len(args) + max(len(variables), 1), None, 0,
                     0xFFFFFFFF)
    if libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.byref(mapping), ctypes.sizeof(mapping), 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"PR_SET_MM_MAP: {os.strerror(error)}")
    _shown[:] = [block]


def thread_id_address(libc: Any) -> int:
    """Where the C library keeps this (main) thread's kernel thread id: the address it gave the kernel.

    glibc hands ``&self->tid`` to ``set_tid_address`` at start and to ``clone`` in ``fork``,
    so the kernel writes a forked child's id there. A clone that skipped it would leave the
    child believing it is this process's thread: ``pthread_kill``, ``pthread_getcpuclockid``
    and ``pthread_setaffinity_np(pthread_self())`` (OpenMP binding) would act on the zygote.
    """
    address = ctypes.c_void_p()
    if libc.prctl(_PR_GET_TID_ADDRESS, ctypes.byref(address), 0, 0, 0) != 0 or not address.value:
        error = ctypes.get_errno()
        raise OSError(error, f"PR_GET_TID_ADDRESS: {os.strerror(error) if error else 'no address'}")
    return int(address.value)


def _clone_parent(libc: Any, number: int, tid_argument: int, tid_address: int) -> int:
    """``fork`` whose child's parent is our parent (the manager), with CPython's fork hooks around it.

    The flags and thread-id address are glibc's own ``fork``'s (:func:`thread_id_address`) plus
    ``CLONE_PARENT``.
    """
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    api = ctypes.pythonapi
    arguments = [ctypes.c_long(0)] * 5
    arguments[tid_argument] = ctypes.c_long(tid_address)
    flags = _CLONE_PARENT | _CLONE_CHILD_SETTID | _CLONE_CHILD_CLEARTID | signal.SIGCHLD
    api.PyOS_BeforeFork()
    pid = syscall(ctypes.c_long(number), ctypes.c_long(flags), *arguments[1:])
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    error = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(error, os.strerror(error))
    return int(pid)


def main(startup: set[str]) -> None:
    """Serve launch requests until the manager goes away; in a forked child, run the runner and return."""
    manager = int(sys.argv[1])
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != manager:
        os._exit(0)  # the manager died before the death signal was armed
    os.chdir("/")
    for name in PRELOAD_MODULES:
        __import__(name)
    _warm()
    # Into the permanent generation: a runner's collections (and the one at its exit) then skip what is
    # preloaded instead of touching, and so copying, every page of it (CPython's advice for pre-forking).
    gc.freeze()
    bare = {name.partition(".")[0] for name in startup}
    preloaded = sorted({name.partition(".")[0] for name in sys.modules} - bare)
    control = socket.socket(fileno=CONTROL_FD)
    try:
        # Once on ourselves: a runner that could not show its own argv and environment in /proc is not made.
        _show(libc, list(sys.orig_argv), dict(os.environ))
        tid_address = thread_id_address(libc)
    except OSError as error:
        control.send(marshal.dumps(("refused", str(error))))
        os._exit(0)
    number = CLONE_SYSCALL.get(platform.machine(), 0)
    tid_argument = _CHILD_TID_ARGUMENT.get(platform.machine(), 3)
    # The interpreter's start may have added to its environment (PEP 538 sets LC_CTYPE): a fresh one would too.
    control.send(marshal.dumps(("hello", os.getpid(), preloaded, dict(os.environ))))
    request, gate = _serve(control, libc, lambda: _clone_parent(libc, number, tid_argument, tid_address))
    _run_runner(request, gate)


def _serve(control: socket.socket, libc: Any, clone: Callable[[], int]) -> tuple[tuple[Any, ...], int]:
    """The zygote's loop; returns only in a forked child, with its request and gate."""
    while True:
        message, fds, flags, _ = socket.recv_fds(control, MAX_REQUEST, 1)
        if not message:
            os._exit(0)  # the manager closed the socket (stopped or died)
        if len(fds) != 1 or flags & socket.MSG_TRUNC:
            for fd in fds:
                os.close(fd)
            control.send(marshal.dumps(("error", "malformed request")))
            continue
        gate = fds[0]
        for stream in (sys.stdout, sys.stderr):
            # A child must not inherit buffered bytes of ours.
            if stream is not None:
                stream.flush()
        try:
            pid = clone()
        except OSError as error:
            os.close(gate)
            control.send(marshal.dumps(("error", f"clone: {error}")))
            continue
        if pid == 0:
            control.detach()  # the descriptor is closed below; no finalizer may close a reused number later
            return marshal.loads(message), gate
        os.close(gate)
        control.send(marshal.dumps(("pid", pid)))


def _fail(message: str, what: str = "python runner") -> None:
    os.write(2, f"httk-workflow: cannot execute {what}: {message}\n".encode(errors="replace"))
    os._exit(GATE_CLOSED_STATUS)


def _run_runner(request: tuple[Any, ...], gate: int) -> None:
    """In the child: the gate, then the process a fresh ``python entry.py`` would be, then the entry file.

    With a ``program`` in the request (a Bash runner), the process ``program entry.sh`` would be
    instead, with its pre-started bridge (:func:`_exec_with_bridge`).
    """
    program, entry, args, env, added, cwd, stdout, stderr, umask = request  # added: see main()
    os.setpgid(0, 0)
    # The gated shell dies of SIGINT while it waits; Python's handler comes back once the runner starts.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if gate > CONTROL_FD:
        os.closerange(CONTROL_FD, gate)
    highest = os.sysconf("SC_OPEN_MAX")
    os.closerange(max(CONTROL_FD, gate + 1), highest if highest > 0 else 65536)
    if os.read(gate, 1) == b"":
        os._exit(GATE_CLOSED_STATUS)  # the manager abandoned us or died: never run the runner
    os.close(gate)
    os.umask(umask)
    try:
        for path, target, flags in (("/dev/null", 0, os.O_RDONLY),
                                    (stdout, 1, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                                    (stderr, 2, os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
            fd = os.open(path, flags, 0o644)
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.chdir(cwd)
    except OSError as error:
        _fail(f"{error.strerror} ({error.filename})", "runner" if program else "python runner")
    if program:
        _exec_with_bridge(program, entry, args, env, added)
    _reopen_stdio()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()  # through putenv/unsetenv: what the runner's own children inherit too
    os.environ.update(env)
    os.environ.update(added)
    time.tzset()
    sys.argv = [entry, *args]
    sys.orig_argv = [sys.executable, entry, *args]
    try:
        _show(_libc(), sys.orig_argv, env)
    except OSError as error:
        _fail(str(error))
    sys.path.insert(0, os.path.dirname(os.path.realpath(entry)))
    importlib.invalidate_caches()  # directory listings cached while the zygote imported
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __loader__=importlib.machinery.SourceFileLoader("__main__", entry), __annotations__={},
        __builtins__=sys.modules["builtins"], __file__=entry, __cached__=None,
    )
    sys.modules["__main__"] = module
    try:
        with open(entry, "rb") as handle:
            source = handle.read()
    except OSError as error:
        sys.stderr.write(f"{sys.executable}: can't open file {entry!r}: [Errno {error.errno}] {error.strerror}\n")
        raise SystemExit(2) from None
    try:
        exec(compile(source, entry, "exec", dont_inherit=True), module.__dict__)
    except SystemExit:
        raise  # the interpreter handles its code exactly as for ``python entry.py``
    except BaseException:
        _hide_own_frames(entry)
        raise


def _exec_with_bridge(program: str, entry: str, args: list[str], env: dict[str, str], added: dict[str, str]) -> None:
    """Fork this runner's bridge, then become ``program entry ARGS`` as a spawned runner would start; never returns.

    Without pipes or a process for the bridge (descriptor or process limits) the runner is executed
    without one: its library starts the co-process itself, as under a spawn.
    """
    runner = os.getpid()
    bridge = 0
    try:
        request_fd, reply_fd, bridge = _fork_bridge(runner, env, added)
    except OSError:
        pass
    for signum in _PYTHON_SET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    if bridge:
        env = {**env, BRIDGE_ENV: f"{runner}:{request_fd}:{reply_fd}:{bridge}"}
    try:
        os.execvpe(program, [program, entry, *args], env)
    except OSError as error:
        if bridge:
            os.kill(bridge, signal.SIGKILL)
        _fail(f"{error.strerror} ({program})", "runner")


def _fork_bridge(runner: int, env: dict[str, str], added: dict[str, str]) -> tuple[int, int, int]:
    """The runner's ends of the bridge's pipes (requests, replies) and the bridge's pid; ``OSError`` leaves none."""
    opened: list[int] = []
    try:
        request_r, request_w = os.pipe()  # the runner writes requests
        opened += (request_r, request_w)
        reply_r, reply_w = os.pipe()  # the bridge writes replies
        opened += (reply_r, reply_w)
        # Kept across exec (F_DUPFD is not close-on-exec), high enough that a script's own `exec 3>...` misses them.
        request_fd = fcntl.fcntl(request_w, fcntl.F_DUPFD, BRIDGE_FD_BASE)
        opened.append(request_fd)
        reply_fd = fcntl.fcntl(reply_r, fcntl.F_DUPFD, BRIDGE_FD_BASE)
        opened.append(reply_fd)
        sys.stdout.flush()
        sys.stderr.flush()
        bridge = os.fork()
    except OSError:
        for fd in opened:
            os.close(fd)
        raise
    if bridge == 0:
        for fd in (request_w, reply_r, request_fd, reply_fd):
            os.close(fd)
        try:
            status = _serve_bridge(runner, request_r, reply_w, env, added)
        except BaseException:  # noqa: BLE001 - shown where a co-process's would be; the runner sees end-of-file
            traceback.print_exc()
            status = 2
        os._exit(status)
    for fd in (request_r, request_w, reply_r, reply_w):
        os.close(fd)
    return request_fd, reply_fd, bridge


def _serve_bridge(runner: int, requests: int, replies: int, env: dict[str, str], added: dict[str, str]) -> int:
    """In the runner's child: what ``python -m httk.workflow.shell_bridge --serve`` does once started."""
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != runner:
        return 0  # the runner ended before the death signal was armed
    os.dup2(requests, 0)
    os.dup2(replies, 1)
    os.dup2(2, 3)  # serve() takes its stderr from 3, where the library's co-process keeps it
    highest = os.sysconf("SC_OPEN_MAX")
    os.closerange(4, highest if highest > 0 else 65536)
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(added)
    time.tzset()
    tempfile.tempdir = None  # chosen again from this environment's TMPDIR, as a fresh interpreter would
    from httk.workflow import shell_bridge, shell_serve

    argv = [sys.executable, "-m", "httk.workflow.shell_bridge", "--serve"]
    sys.argv, sys.orig_argv = [shell_bridge.__file__ or "-m", "--serve"], argv
    _show(libc, argv, env)  # ps shows what it is
    _reopen_stdio()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # The calls are compared with how this server was started, not with the first call: a runner that
        # changed PYTHONIOENCODING, say, before httk_workflow_main gets one-shot calls, as from a co-process.
        started = shell_serve.interpreter_environment(env)
        return shell_serve.serve(shell_bridge.dispatch, shell_bridge.Session, shell_bridge.command_name, started)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


def _reopen_stdio() -> None:
    """``sys.stdin``/``stdout``/``stderr`` made anew on the logs, as the interpreter's start makes them.

    The zygote's were made on ``/dev/null``: the buffer size follows the file's ``st_blksize`` and
    line buffering whether it is a terminal, so both are chosen again for the runner's descriptors;
    encoding and errors come from the same start-up variables and are kept.
    """
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        old = getattr(sys, f"__{name}__")
        if old is None:
            continue
        buffered = not old.write_through  # not under -u or PYTHONUNBUFFERED, which the zygote shares
        binary = open(fd, mode, buffering=-1 if buffered or fd == 0 else 0, closefd=False)
        raw = getattr(binary, "raw", binary)
        raw.name = f"<{name}>"
        stream = io.TextIOWrapper(binary, old.encoding, old.errors, "\n",
                                  line_buffering=buffered and (raw.isatty() or fd == 2), write_through=not buffered)
        stream.mode = mode[0]
        setattr(sys, f"__{name}__", stream)
        setattr(sys, name, stream)


def _hide_own_frames(entry: str) -> None:
    """Until it has printed the uncaught exception once, ``sys.excepthook`` skips the frames above the entry file."""
    hook = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        sys.excepthook = hook
        while tb is not None and tb.tb_frame.f_code.co_filename != entry:
            tb = tb.tb_next
        value.__traceback__ = tb
        hook(kind, value, tb)

    sys.excepthook = excepthook
