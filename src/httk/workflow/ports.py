"""Ports: what the services need from the world, as ``typing.Protocol`` classes.

Adapters in ``httk.workflow.adapters`` implement these against the real system;
``httk.workflow.testing`` implements them in memory. Services receive ports by
constructor injection and never import an adapter. Paths are plain ``str``
absolute POSIX paths at this boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import attrs

if TYPE_CHECKING:  # an annotation only: a runner imports this module and never needs the limits
    from .domain.submit_limits import SubmitLimits

T = TypeVar("T")

#: The size bound of one document read (job.json, an outcome, a spawn or transaction manifest,
#: error.json, a request, a context): documents are small, so anything larger is refused
#: rather than read into memory.
DOCUMENT_LIMIT = 16 * 1024 * 1024


class UnreadableDocument(OSError):
    """A document that is refused before its bytes are read; the message is one line naming it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path} {self.problem}"


class NotRegularFile(UnreadableDocument):
    """The name is a directory, symlink, FIFO, socket or device, not a regular file."""


class DocumentTooLarge(UnreadableDocument):
    """A regular file larger than the read's size bound."""


def unreadable(path: str, error: OSError) -> str:
    """Why the file at ``path`` could not be read, as one line naming it once."""
    if isinstance(error, UnreadableDocument):
        return str(error)
    return f"{path} cannot be read: {error.strerror or error}"


@attrs.frozen
class Entry:
    """One directory entry as a streaming scan yields it (no extra stat for the kind)."""

    name: str
    path: str
    is_dir: bool
    is_file: bool
    is_symlink: bool


@attrs.frozen
class FileStat:
    """The ``lstat`` facts the protocol needs: kind, owner, size and device."""

    size: int
    uid: int
    mtime: float
    is_dir: bool
    is_file: bool
    is_symlink: bool
    mode: int = 0o644
    #: ``st_dev``: two names on different devices cannot be renamed into each other.
    device: int = 0
    #: ``st_ctime``: when the name's data or metadata last changed, which a copy that keeps its
    #: source's times (``utime``) cannot set back: the age of something made recently out of old files.
    changed: float = 0.0


class Appender(Protocol):
    """An open append-only file (one journal segment of one writer)."""

    @property
    def size(self) -> int: ...

    def append(self, data: bytes) -> int:
        """Append ``data`` and return the offset it starts at."""

    def sync(self) -> None:
        """Make everything appended so far durable (fsync)."""

    def close(self) -> None: ...


@runtime_checkable
class Filesystem(Protocol):
    """The filesystem as the protocol uses it: atomic publication, fenced renames, streaming scans."""

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``, following symlinks; a FIFO blocks.

        For files this process or the operator controls; a document a runner or
        another host may have written is read with :meth:`read_document`.
        """

    def read_document(self, path: str, limit: int | None = DOCUMENT_LIMIT) -> bytes:
        """The bytes of one small document that another actor may have written, read safely.

        The final name is opened without following a symlink and without blocking
        (a FIFO never stalls the reader), checked to be a regular file, and read up
        to ``limit`` bytes (``None``: no bound, for the manager's own journal).
        Raises :class:`NotRegularFile`, :class:`DocumentTooLarge`, or the
        ``OSError`` of the open (``FileNotFoundError`` when absent).
        """

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset`` of a regular file; shorter at end of file.

        Opened without blocking; a name that is not a regular file (after following
        symlinks) raises :class:`NotRegularFile`.
        """

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        """Publish ``data`` at ``path`` all-or-nothing: temp, fsync, rename, fsync dir.

        With ``durable=False`` the two fsyncs are skipped; the rename stays atomic.
        """

    def write_new(self, path: str, data: bytes, *, durable: bool) -> None:
        """Like ``write_atomic`` but fail with ``FileExistsError`` if ``path`` exists."""

    def write_staged(self, path: str, data: bytes, *, durable: bool) -> None:
        """Create the new file ``path`` holding ``data`` in place: no temp sibling, no rename.

        Only for a name nobody reads until the caller renames it, or the directory
        holding it, into place (a private temp, a file of a staged copy): a crash may
        leave it partly written, and it is never seen so. ``FileExistsError`` if the name
        exists, ``FileNotFoundError`` if its directory does not; a failed write removes
        the file. With ``durable`` the file is fsynced, not its directory: the caller's
        rename makes the name durable.
        """

    def create_empty(self, path: str, *, durable: bool) -> None:
        """Create a zero-length file; ``FileExistsError`` if it exists."""

    def rename(self, source: str, destination: str, *, durable: bool) -> None:
        """Rename that refuses to overwrite.

        ``FileNotFoundError`` when ``source`` is gone (someone else won the fence),
        ``FileExistsError`` when ``destination`` exists. Creates the destination's
        parent directories. With ``durable`` the affected directories are synced.
        """

    def exchange(self, first: str, second: str, *, durable: bool) -> None:
        """Swap the two existing names atomically: a reader sees either both old or both new.

        ``FileNotFoundError`` when either name is missing. With ``durable`` the
        affected directories are synced; an unsynced exchange may be undone by a crash.
        """

    def open_appender(self, path: str, *, create: bool = True) -> Appender: ...

    def scandir(self, path: str) -> Iterator[Entry]:
        """Stream the entries of one directory; a missing directory yields nothing."""

    def lstat(self, path: str) -> FileStat | None:
        """Facts about ``path`` without following a final symlink; ``None`` if absent."""

    def exists(self, path: str) -> bool: ...

    def readlink(self, path: str) -> str: ...

    def find_symlink(self, root: str, path: str) -> str | None:
        """The first name on the way from ``root`` to ``path`` that is a symbolic link, else ``None``.

        ``root`` is trusted (a link there is followed); every component below it,
        ``path`` itself included, is opened relative to its parent without
        following links, so nothing on the way is resolved through a link. The
        walk ends at a missing name or a non-directory (``None``: nothing below
        it exists). ``ValueError`` when ``path`` is not below ``root`` or has a
        ``..`` component.
        """

    def makedirs(self, path: str, *, durable: bool = False) -> None:
        """Create ``path`` and its parents; an existing directory is fine.

        With ``durable`` the created names are synced into their parents, so a
        directory a later durable publication lands in survives a crash.
        """

    def remove(self, path: str) -> None:
        """Remove one file or symlink; ``FileNotFoundError`` if absent."""

    def rmdir(self, path: str) -> None:
        """Remove one empty directory."""

    def rmtree(self, path: str) -> None:
        """Remove a tree; a missing tree is fine."""

    def copy_tree(self, source: str, destination: str, *, durable: bool, staged: bool = False) -> None:
        """Copy a file or a directory tree to a destination that must not exist; it appears all at once.

        ``staged``: ``destination`` is a name nobody reads until the caller renames it
        into place (as for :meth:`write_staged`), so the copy is made there directly,
        without a temp sibling; a failed copy is still removed, and with ``durable`` the
        copy is synced but not its directory.
        """

    def symlink(self, target: str, path: str) -> None:
        """Create the symbolic link ``path`` pointing at ``target``; ``FileExistsError`` if ``path`` exists.

        Only a transfer creates links: it rebuilds a job's tree, links included, at
        the far end of a transport that moves regular files.
        """

    def sync_tree(self, path: str) -> None:
        """fsync every file and directory below ``path`` (used before a durable rename)."""

    def sync_trees(self, paths: Sequence[str]) -> None:
        """``sync_tree`` of every path, as one group commit: everything below them is durable on return.

        The adapter may overlap the syncs (the POSIX one runs them on a few threads, so the
        filesystem commits many in one journal transaction); no order among them is promised.
        """

    def fsync_dir(self, path: str) -> None: ...

    def fsync_dirs(self, paths: Sequence[str]) -> None:
        """``fsync_dir`` of every directory, overlapped like :meth:`sync_trees`; all durable on return."""

    def sleep(self, seconds: float) -> None:
        """Wait; the in-memory filesystem advances its fake clock instead."""

    def retry_until(self, probe: Callable[[], T | None], deadline_seconds: float) -> T | None:
        """The visibility wait: call ``probe`` until it returns non-``None`` or the deadline passes.

        The first retry comes after 10 ms and the pause doubles up to 0.5 s, so a
        healthy filesystem pays one probe and a lying one is waited out.
        """


def walk_tree(
    fs: Filesystem, root: str, keep: Callable[[str, Entry], bool] | None = None
) -> Iterator[tuple[str, Entry]]:
    """Every entry below ``root`` as ``(name relative to root, entry)``; links are listed, never followed.

    An entry ``keep`` refuses is neither yielded nor, for a directory, entered.
    """
    pending = [""]
    while pending:
        relative = pending.pop()
        for entry in fs.scandir(f"{root}/{relative}" if relative else root):
            name = f"{relative}/{entry.name}" if relative else entry.name
            if keep is not None and not keep(name, entry):
                continue
            yield name, entry
            if entry.is_dir and not entry.is_symlink:
                pending.append(name)


class Ids(Protocol):
    """Fresh identifiers (lowercase uuid4 strings in production)."""

    def new_id(self) -> str: ...

    def new_hex(self, digits: int) -> str:
        """Random lowercase hex of ``digits`` digits (writer ids, temp names)."""


class Signer(Protocol):
    """Signs canonical bytes; returns the detached signature document."""

    def sign(self, data: bytes) -> dict[str, Any]: ...


class Verifier(Protocol):
    """Verifies a detached signature; returns the signing key's id or raises ``ValueError``."""

    def verify(self, data: bytes, signature: Any) -> str: ...


class Clock(Protocol):
    """Wall and monotonic time."""

    def now(self) -> float:
        """Seconds since the epoch (wall clock, compared across hosts)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@attrs.frozen
class ProcessIdentity:
    """Enough to tell later whether this exact process still exists on its host."""

    host: str
    pid: int
    start_ticks: int | None
    pgid: int


class LaunchedProcess(Protocol):
    """A child started by :class:`ProcessControl`, behind its launch gate."""

    @property
    def identity(self) -> ProcessIdentity: ...

    def release(self) -> None:
        """Open the one-byte launch gate: the runner may now execute."""

    def poll(self) -> int | None:
        """The exit status once the process has ended, else ``None``."""

    def wait(self, timeout: float | None = None) -> int | None: ...

    def fileno(self) -> int:
        """A descriptor that becomes readable when the process ends (for ``select``)."""

    def abandon(self) -> None:
        """Close the gate without releasing it: the runner never executes."""

    def close(self) -> None:
        """Release the descriptors (abandoning an unreleased gate)."""


class ProcessControl(Protocol):
    """Start, signal and identify processes on this host."""

    def hostname(self) -> str: ...

    def pid(self) -> int: ...

    def uid(self) -> int: ...

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdout_path: str,
        stderr_path: str,
    ) -> LaunchedProcess:
        """Start ``argv`` in a new process group behind a closed launch gate."""

    def is_alive(self, identity: ProcessIdentity) -> bool | None:
        """``True``/``False`` when provable on this host; ``None`` when it cannot be told."""

    def signal_group(self, pgid: int, signum: int) -> bool:
        """Signal a process group; ``False`` when it no longer exists."""

    def terminate_group(self, pgid: int) -> bool:
        """SIGTERM a process group; ``False`` when it no longer exists."""

    def kill_group(self, pgid: int) -> bool:
        """SIGKILL a process group; ``False`` when it no longer exists."""

    def group_alive(self, pgid: int) -> bool:
        """Whether any non-zombie member of the process group still exists."""

    def wait_any(self, processes: Sequence[LaunchedProcess], timeout: float) -> None:
        """Block until one of ``processes`` exits or ``timeout`` seconds pass."""

    def on_terminate(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(signum)`` when the process is asked to terminate (SIGTERM, SIGINT)."""

    def close(self) -> None:
        """Release what launching holds (a preloaded interpreter); launched processes are not touched.

        Idempotent, and a later :meth:`launch` works again.
        """


class TransportError(Exception):
    """A transport could not reach its machine or run a command there; the message is one line."""


class BatchSystemError(Exception):
    """A batch scheduler refused or misunderstood a request; the message is one line."""


class BatchCommandMissing(BatchSystemError):
    """A command the batch system declares is not installed where it runs (the shell's exit 127)."""


@attrs.frozen
class BatchJobStatus:
    """One batch job as its scheduler reports it.

    ``state`` is the scheduler's own word (``PENDING``, ``RUNNING``, ``COMPLETED``...;
    ``UNKNOWN`` when it no longer lists the job); ``finished`` says it will not run
    again; ``succeeded`` is known only when the scheduler tells it.
    """

    state: str
    finished: bool
    succeeded: bool | None = None


class BatchSystem(Protocol):
    """A batch scheduler (Slurm, or the local shell) that starts managers."""

    name: str
    #: Whether a job id is the manager's pid on the submitting machine (the local shell); a scheduler's is not.
    job_ids_are_pids: bool

    def compose_script(
        self,
        workspace_path: str,
        settings: Mapping[str, Any],
        manager_args: Sequence[str],
        httk_command: Sequence[str],
        *,
        workers: int | None = None,
    ) -> str:
        """The batch script that runs one manager on ``workspace_path``.

        Scheduler directives come from the workspace's application ``settings``;
        ``workers`` defaults to the ``manager.workers`` setting, then 1.
        """

    def submit(self, script: str, *, workdir: str) -> str:
        """Submit a batch script to run in ``workdir`` (created first) and return the scheduler's job id."""

    def status(self, job_ids: Sequence[str]) -> Mapping[str, BatchJobStatus]:
        """The status of every id asked for (``UNKNOWN`` for an id the scheduler does not list)."""

    def cancel(self, job_ids: Sequence[str]) -> None: ...

    def submit_limits(self, settings: Mapping[str, Any]) -> SubmitLimits:
        """What the site lets this user still submit for managers of these ``settings`` (never raises for a
        report it cannot read: that becomes one of the limits' notes)."""


#: Where a streamed command's output goes, chunk by chunk as it arrives.
OutputSink = Callable[[bytes], None]


@attrs.frozen
class CommandResult:
    """What running one argv on a transport produced (127: the command was not found)."""

    returncode: int
    stdout: str
    stderr: str


class RemoteTransport(Protocol):
    """Run commands and move single files on another machine (or this one).

    Failing to reach the machine raises :class:`TransportError`; a command that
    runs and fails is a :class:`CommandResult` with its exit status.
    """

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` there, with ``input`` on its stdin (else an empty stdin)."""

    def stream(self, argv: Sequence[str], *, out: OutputSink, err: OutputSink, timeout: float | None = None) -> int:
        """Run ``argv`` there with an empty stdin, handing its output to ``out``/``err`` as it arrives.

        Returns the exit status; the same connection as ``run`` and ``put`` is used.
        """

    def put(self, local: str, remote: str) -> None:
        """Copy the local file ``local`` to the path ``remote`` there."""

    def get(self, remote: str, local: str) -> None:
        """Copy the file ``remote`` there to the local path ``local``."""

    def close(self) -> None:
        """Release the connection (a later call reconnects)."""
