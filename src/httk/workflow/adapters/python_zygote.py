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
and executes the entry file as ``__main__`` at the bottom of this stack. It ends
as the interpreter ends a script (:func:`_exit`: ``SystemExit``, a traceback and
status 1, ``KeyboardInterrupt`` re-raising SIGINT, thread join, atexit, the
runner's own modules finalized, flushing), without tearing down the preloaded
modules. Tracebacks are shown without the frames of this module.

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

import builtins
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
    loaded = set(sys.modules)
    builtin_names = dict(vars(builtins))
    uncaught: BaseException | None = None
    stopped = False
    try:
        exec(compile(source, entry, "exec", dont_inherit=True), module.__dict__)
        status = 0
    except SystemExit as stop:
        status, stopped = _system_exit_status(stop), True
    except BaseException as error:  # noqa: BLE001 - printed and ended exactly as the interpreter would
        uncaught, status = error, 1
    del module  # nothing of the runner's is kept alive here while it is finalized
    interrupted = isinstance(uncaught, KeyboardInterrupt)
    if uncaught is not None:
        # Outside the except block: the interpreter calls the hook with no exception being handled.
        _hide_own_frames(entry)
        status = _print_uncaught(uncaught)
        del uncaught
    if not stopped:
        # The interpreter forgets them once the script has run (or its traceback was printed); a SystemExit
        # ends it before that.
        namespace = vars(sys.modules["__main__"])
        namespace.pop("__file__", None)
        namespace.pop("__cached__", None)
        del namespace
    _exit(status, loaded, builtin_names, interrupted)


def _system_exit_status(stop: SystemExit) -> int:
    """The status ``python entry.py`` exits with for ``stop`` (CPython's ``_Py_HandleSystemExit``)."""
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        if not -(1 << 63) <= code < 1 << 63:
            return -1  # PyLong_AsLong overflows: -1, its error cleared
        low = code & 0xFFFFFFFF  # the C cast of a long to int
        return low - (1 << 32) if low >= 1 << 31 else low
    stream = getattr(sys, "stderr", None)
    try:
        if stream is not None:
            stream.write(f"{code}\n")
        else:
            os.write(2, f"{code}\n".encode(errors="backslashreplace"))
    except Exception:  # noqa: BLE001 - the interpreter ignores a failing stderr here too
        pass
    return 1


def _print_uncaught(error: BaseException) -> int:
    """What ``PyErr_Print`` does with an uncaught exception (``sys.last_*``, ``sys.excepthook``); the status."""
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    hook = getattr(sys, "excepthook", None)
    if not hasattr(sys, "excepthook"):
        _write_stderr("sys.excepthook is missing\n")
        error.__traceback__ = _without_own_frames(error.__traceback__)
        sys.__excepthook__(type(error), error, error.__traceback__)
        return 1
    try:
        hook(type(error), error, error.__traceback__)  # type: ignore[misc]
    except SystemExit as stop:  # the hook's own exit decides, as in PyErr_Print
        return _system_exit_status(stop)
    except BaseException as failure:  # noqa: BLE001 - as the interpreter: both are shown
        _write_stderr("Error in sys.excepthook:\n")
        failure.__traceback__ = _without_own_frames(failure.__traceback__)  # the one the hook prints
        sys.__excepthook__(type(failure), failure, failure.__traceback__)
        _write_stderr("\nOriginal exception was:\n")
        sys.__excepthook__(type(error), error, error.__traceback__)
    return 1


def _write_stderr(text: str) -> None:
    stream = getattr(sys, "stderr", None)
    try:
        if stream is not None:
            stream.write(text)
    except Exception:  # noqa: BLE001 - nowhere left to say it
        pass


def _without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` from its first frame outside this module (the interpreter calls a hook from C)."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


#: The key that marks a namespace of the runner's while it is finalized.
_MARK = "__httk_workflow_finalizing__"
#: What ``finalize_modules_delete_special`` sets to ``None`` before modules are cleared.
_SYS_CLEARED = ("path", "argv", "ps1", "ps2", "last_type", "last_value", "last_traceback", "path_hooks",
                "path_importer_cache", "meta_path", "__interactivehook__")


def _exit(status: int, loaded: set[str], builtin_names: dict[str, Any], interrupted: bool) -> None:
    """End the runner as the interpreter ends, without tearing down what the zygote preloaded.

    ``Py_FinalizeEx`` would clear every module's globals, and so write to every preloaded
    object the fork shares with the zygote: about 2,000 page copies and 11 ms of CPU for a
    trivial runner. This does its steps for what the runner made and then ``_exit``: threads
    joined, atexit functions run, stdout and stderr flushed (a failing stdout makes the status
    120), Python signal handlers back to their defaults, ``sys`` and ``builtins`` put back as
    the interpreter puts them back, the modules the runner imported and ``__main__`` taken
    out of ``sys.modules`` and collected (finalizers see their globals intact), then every
    one of their namespaces cleared the way the interpreter clears a module, collected again,
    and every file object still open flushed (one that only a preloaded module holds). An
    uncaught ``KeyboardInterrupt`` ends by ``SIGINT``.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()  # type: ignore[attr-defined]
        except BaseException as error:  # noqa: BLE001 - reported as the interpreter reports it
            _unraisable(error, threading, error.__traceback__)
    # Other threads (daemon ones, or _thread's): only the interpreter can stop them before modules are cleared.
    if len(sys._current_frames()) > 1 and not interrupted:
        raise SystemExit(status)
    import atexit
    import weakref

    atexit._run_exitfuncs()
    if len(sys._current_frames()) > 1 and not interrupted:  # an atexit function started one
        raise SystemExit(status)
    if not _flush_std():
        status = 120
    for signum in range(1, signal.NSIG):  # _PySignal_Fini: from here on a signal has its default action
        try:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    for name in _SYS_CLEARED:
        setattr(sys, name, None)
    for name in ("stdin", "stdout", "stderr"):
        setattr(sys, name, getattr(sys, f"__{name}__", None))
    # Each namespace is marked, not held: one nothing else holds is collected with its globals intact,
    # and those something still holds (a function of theirs, say) are found by the mark and cleared.
    mark = object()
    order = []
    modules = []
    for name in [name for name in sys.modules if name not in loaded or name == "__main__"]:
        module = sys.modules.pop(name, None)
        if isinstance(module, types.ModuleType):
            module.__dict__[_MARK] = mark
            order.append(name)
            modules.append(weakref.ref(module))
    module = None
    space = vars(builtins)
    for key in [key for key in space if key not in builtin_names]:
        del space[key]
    space.update(builtin_names)
    space["__import__"] = _import_after_shutdown  # sys.meta_path is gone: an import in a __del__ fails
    # A namespace in a reference cycle (a function of it that was a signal handler) is collected with its
    # files, whose finalizers run in no set order: a file closed before its text layer loses that layer's
    # buffer. Flushed first, nothing is lost whatever the order.
    _flush_files()
    gc.collect()
    # Only the namespace of a module still alive is cleared (the interpreter keeps weak references to them);
    # one whose module is gone stays as it is, for the functions that still hold it.
    alive = {id(vars(found)) for found in (reference() for reference in modules) if found is not None}
    left = [item for item in gc.get_objects()
            if type(item) is dict and item.get(_MARK) is mark and id(item) in alive]
    left.sort(key=lambda namespace: -order.index(namespace.get("__name__")) if namespace.get("__name__") in order
              else 0)  # the last imported first, __main__ last, as the interpreter's weak list
    for namespace in left:
        del namespace[_MARK]
        _clear_namespace(namespace)
    del left
    gc.collect()
    _flush_files()
    if not _flush_std():
        status = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _clear_namespace(namespace: dict[str, Any]) -> None:
    """``_PyModule_ClearDict``: ``_name`` globals to ``None`` first, then the rest but ``__builtins__``."""
    for first in (True, False):
        for key in list(namespace):
            if not isinstance(key, str) or key == "__builtins__":
                continue
            if first and not (key.startswith("_") and not key.startswith("__")):
                continue
            try:
                namespace[key] = None
            except Exception:  # noqa: BLE001 - a __del__ that fails is reported by the interpreter
                pass


def _import_after_shutdown(*args: Any, **kwargs: Any) -> Any:
    """``__import__`` once the interpreter has set ``sys.meta_path`` to ``None``."""
    raise ImportError("sys.meta_path is None, Python is likely shutting down")


def _flush_files() -> None:
    """Flush every open file object the runner made that is still alive (text layers before their buffers)."""
    alive = [item for item in gc.get_objects() if isinstance(item, io.IOBase)]
    for layer in (io.TextIOBase, io.BufferedIOBase):
        for stream in alive:
            if isinstance(stream, layer):
                try:
                    if not stream.closed and stream.writable():
                        stream.flush()
                except Exception:  # noqa: BLE001 - CPython's close at dealloc ignores it too
                    pass


def _flush_std() -> bool:
    """``flush_std_files``: ``False`` when stdout or stderr could not be flushed (stdout's failure is shown)."""
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as error:  # noqa: BLE001 - as the interpreter: shown, status 120
            if name == "stdout":
                _unraisable(error, stream)
            ok = False
    return ok


def _unraisable(error: BaseException, where: object, tb: types.TracebackType | None = None) -> None:
    """What ``PyErr_WriteUnraisable(where)`` shows for ``error`` raised from C: ``sys.unraisablehook``."""
    captured: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, captured.append

    class _Probe:
        def __del__(self) -> None:
            raise RuntimeError

    _Probe()  # its failing __del__ hands the hook one argument of the type it takes
    sys.unraisablehook = hook
    if not captured:
        return
    arguments = type(captured[0])((type(error), error, _without_own_frames(tb), None, where))
    try:
        hook(arguments)
    except Exception:  # noqa: BLE001 - a failing hook is ignored by the interpreter too
        pass


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
    if not hasattr(sys, "excepthook"):
        return  # the runner deleted it: the interpreter says so and prints with its own
    hook = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        sys.excepthook = hook
        while tb is not None and tb.tb_frame.f_code.co_filename != entry:
            tb = tb.tb_next
        value.__traceback__ = tb
        hook(kind, value, tb)

    sys.excepthook = excepthook
