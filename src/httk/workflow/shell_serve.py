"""The bridge co-process of a Bash attempt: one interpreter answering every bridge call of one runner.

``httk_workflow_main`` starts ``python -m httk.workflow.shell_bridge --serve`` once
(a Bash ``coproc``) and sends each bridge call down its stdin instead of starting
an interpreter per call. A call runs exactly as a one-shot bridge process would:
each request carries the caller's exported environment, working directory and
umask, which are applied first; the command gets a fresh
:class:`~httk.workflow.shell_attempt.Session` (so the draft is resumed from disk,
as a new process would) and the same :func:`~httk.workflow.shell_bridge.dispatch`;
its stdout, stderr and status travel back to the caller, which prints them.

The wire format (NUL-terminated fields; Bash cannot hold a NUL, so none can be in
a field): a request is ``UMASK\\n`` then ``CWD``, ``N``, N ``NAME=VALUE`` words,
``ARGC`` and ARGC arguments. A reply is ``STATUS`` (a number, or ``redo``: run
this call as a one-shot process instead) and then stdout and stderr, each either
``i`` + the bytes, or ``f`` + the path of a file holding them (for output with a
NUL byte, or too long to read quickly in Bash). At start-up the server prints
the path of a FIFO, which the library opens as its one-token lock: whoever reads
the token owns the channel until it writes it back, and a caller that finds no
token (a concurrent call, or a holder killed mid-call) runs one-shot, so a lost
token slows calls down and never blocks or mixes them.

The server exits at end of file on its stdin: when no Bash process of the runner
holds the write end any more (a co-process's descriptors are close-on-exec, so the
programs a handler runs do not hold them). A manager forking runners from its
preloaded interpreter starts this server before the runner instead
(:func:`httk.workflow.adapters.python_zygote._exec_with_bridge`); programs the
runner starts do inherit that one's pipes, so it also dies with the runner, by
its death signal. Spec 002; docs/sdks/native_bash_api.md.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import TextIO

#: Output longer than this goes through a file: Bash reads a pipe one byte at a time.
INLINE_LIMIT = 16384
#: Commands that must own the caller's real stdin/stdout/stderr, or (``vasp_run``) supervise a program for
#: hours in a process of their own; the library never sends them.
ONE_SHOT = frozenset({"run", "batch", "describe", "vasp_run"})
#: Variables an interpreter reads at start-up (its path, encoding, locale) or once (``TMPDIR``, where
#: the lock and spills go): a call whose values differ from the co-process's own start is run one-shot,
#: in an interpreter started the way it asks.
_INTERPRETER_PREFIXES = ("PYTHON", "LC_", "LANG", "HTTK_WORKFLOW_PYTHON", "TMPDIR")


def interpreter_environment(environ: dict[str, str]) -> dict[str, str]:
    """The part of ``environ`` that must match the co-process's own start for a call to be served."""
    return {name: value for name, value in environ.items() if name.startswith(_INTERPRETER_PREFIXES)}


class _Reader:
    """NUL-terminated fields (and one newline-terminated line) from a file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def until(self, end: bytes) -> bytes | None:
        """The bytes before the next ``end``; ``None`` at end of file."""
        while True:
            index = self.buffer.find(end)
            if index >= 0:
                field = bytes(self.buffer[:index])
                del self.buffer[: index + 1]
                return field
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


class _Closed(Exception):
    """The request stream ended (possibly mid-request): the runner is gone."""


def _field(reader: _Reader, end: bytes = b"\0") -> bytes:
    field = reader.until(end)
    if field is None:
        raise _Closed
    return field


def _count(reader: _Reader) -> int:
    text = _field(reader)
    if not text.isdigit():
        raise _Closed  # not a request of this library: stop rather than guess
    return int(text)


def _request(reader: _Reader) -> tuple[int, str, dict[str, str], list[str]]:
    line = _field(reader, b"\n").strip()
    if line == b"stop":  # httk_workflow_main is about to exit
        raise _Closed
    try:
        umask = int(line, 8)
    except ValueError:
        raise _Closed from None  # not a request of this library: stop rather than guess
    cwd = os.fsdecode(_field(reader))
    environ: dict[str, str] = {}
    for _ in range(_count(reader)):
        name, _equals, value = os.fsdecode(_field(reader)).partition("=")
        environ[name] = value
    args = [os.fsdecode(_field(reader)) for _ in range(_count(reader))]
    return umask, cwd, environ, args


class Server:
    """The loop of one co-process: read a request, run it like a fresh process would, reply."""

    def __init__(
        self,
        dispatch: Callable[..., int],
        session_factory: Callable[[TextIO], object],
        command_name: Callable[[str], str],
        started: dict[str, str] | None = None,
    ) -> None:
        import tempfile

        self.dispatch = dispatch
        self.session_factory = session_factory
        self.command_name = command_name
        self.directory = tempfile.mkdtemp(prefix="httk-bridge-")
        self.lock = os.path.join(self.directory, "lock")
        os.mkfifo(self.lock, 0o600)
        self.spills: list[str] = []
        self.encoding = sys.stdout.encoding
        self.errors = sys.stdout.errors or "strict"
        self.error_errors = sys.stderr.errors or "backslashreplace"
        #: What the first call (``begin``, sent from where this process was started) said; not this
        #: process's own environment, which Python may have changed (PEP 538 locale coercion). A server
        #: started before the runner is given the environment it was started with instead.
        self.started: dict[str, str] | None = started

    def serve(self, reader: _Reader) -> int:
        _write_all(os.fsencode(self.lock) + b"\0")
        try:
            while True:
                try:
                    umask, cwd, environ, args = _request(reader)
                except _Closed:
                    return 0
                self._tidy()
                reply = self.answer(umask, cwd, environ, args)
                try:
                    _write_all(reply)
                except OSError:
                    return 0  # no Bash process of the runner is reading any more
        finally:
            self._tidy()

    def _tidy(self) -> None:
        """Remove the lock's name and directory (the library holds the FIFO open) and the last reply's spills."""
        for path in [self.lock, *self.spills]:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.spills.clear()
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    def answer(self, umask: int, cwd: str, environ: dict[str, str], args: list[str]) -> bytes:
        """Run one call in the caller's environment, directory and umask; the reply's bytes."""
        interpreter = interpreter_environment(environ)
        if self.started is None:
            self.started = interpreter
        if not args or self.command_name(args[0]) in ONE_SHOT or interpreter != self.started:
            return b"redo\0i\0i\0"
        try:
            os.chdir(cwd)
        except OSError:
            return b"redo\0i\0i\0"  # a vanished working directory: let a real process meet it
        os.umask(umask)
        os.environ.clear()
        os.environ.update(environ)
        out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
        out = io.TextIOWrapper(out_bytes, encoding=self.encoding, errors=self.errors, write_through=True)
        err = io.TextIOWrapper(err_bytes, encoding=self.encoding, errors=self.error_errors, write_through=True)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            status = self.dispatch(self.session_factory(out), args)
        except BaseException as error:  # noqa: BLE001 - SystemExit and the like end this call, not the runner
            err.write(f"httk.workflow.shell_bridge: {type(error).__name__}: {error}\n")
            status = 2
        finally:
            sys.stdout, sys.stderr = saved
        return b"%d\0" % status + self._stream(out_bytes.getvalue()) + self._stream(err_bytes.getvalue())

    def _stream(self, data: bytes) -> bytes:
        if len(data) <= INLINE_LIMIT and b"\0" not in data:
            return b"i" + data + b"\0"
        import tempfile

        descriptor, path = tempfile.mkstemp(prefix="httk-bridge-spill-")
        with open(descriptor, "wb") as handle:
            handle.write(data)
        self.spills.append(path)
        return b"f" + os.fsencode(path) + b"\0"


def serve(
    dispatch: Callable[..., int], session_factory: Callable[[TextIO], object], command_name: Callable[[str], str],
    started: dict[str, str] | None = None,
) -> int:
    """Entry point of ``--serve``: the library started this process with its real stderr as fd 3.

    ``started``: the start-up part of the environment this server was started with
    (:func:`interpreter_environment`), when that is not what the first call sends.
    """
    try:
        os.dup2(3, 2)  # start-up is silent (a failure falls back to one-shot calls); now errors may show
    except OSError:
        pass
    # Hold none of the runner's other descriptors: a pipe someone waits on must not outlive its writer.
    os.closerange(3, 1024)
    sys.stdin = open(os.devnull)  # the protocol owns fd 0; no command may read it
    return Server(dispatch, session_factory, command_name, started).serve(_Reader(0))
