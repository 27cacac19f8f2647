"""The tree every view of one in-memory filesystem shares: inodes, crash state, append handles.

Split from :mod:`.memory_fs` (which holds the port's primitives) to keep both short;
only the stdlib and :mod:`httk.workflow.ports` are imported, never an adapter.
"""

from __future__ import annotations

import errno
import itertools
import posixpath
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from httk.workflow.ports import Clock

from .memory_lag import LagHistory

if TYPE_CHECKING:
    from .memory_fs import InMemoryFilesystem

_DIR, _FILE, _LINK, _FIFO = "dir", "file", "symlink", "fifo"
_KIND_WORDS = {_DIR: "a directory", _LINK: "a symbolic link", _FIFO: "a FIFO"}


class SimulatedCrash(BaseException):
    """Raised by an armed :class:`InMemoryFilesystem` instead of performing a primitive.

    A ``BaseException``: power loss ends the whole process, so the manager's per-job
    containment (``except Exception``) must not survive it.
    """


class SimulatedHang(BaseException):
    """A blocking read of a FIFO, which on a real system never returns.

    A ``BaseException``, like the hang it stands for: no ``except Exception`` can
    contain it, so a test exposes every reader that should have used ``read_document``.
    """


def _error(code: int, path: str, other: str | None = None) -> OSError:
    """The ``OSError`` subclass the OS would raise for ``code`` (FileNotFoundError, ...)."""
    return OSError(code, errno.errorcode.get(code, "error"), path, None, other)


def _norm(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    normalized = posixpath.normpath(path)
    return "/" + normalized.lstrip("/")


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


class _Inode:
    """A file, directory or symlink, with its live state and its durable (last fsynced) state."""

    def __init__(self, number: int, kind: str, uid: int, mtime: float, mode: int, target: str = "") -> None:
        self.number = number
        self.kind = kind
        self.uid = uid
        self.mtime = mtime
        #: The clock at the last change of data or metadata (ctime): a copy's kept mtime never moves it back.
        self.changed = mtime
        self.mode = mode
        self.target = target
        self.data = bytearray()
        # Durable content is ``durable`` when set, else the first ``durable_length`` live bytes:
        # appends after a sync leave the synced prefix intact, so a sync need not copy the file.
        self.durable: bytes | None = None
        self.durable_length = 0
        self.entries: dict[str, int] = {}
        self.durable_entries: dict[str, int] = {}
        self.born: dict[str, float] = {}  # name -> monotonic time it was linked, for reader lag
        self.linked_by: dict[str, int] = {}  # name -> the client (view) that linked it: it sees it at once


class _State:
    """What every view of one in-memory filesystem shares."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.numbers = itertools.count(1)
        self.tokens = itertools.count(1)
        self.inodes: dict[int, _Inode] = {}
        self.root = self.new_inode(_DIR, uid=0, mode=0o755)
        self.operation_count = 0
        self.crash_at: int | None = None
        self.dead = False
        self.epoch = 0
        # Cross-directory renames whose two halves are not durable yet:
        # (source dir, source name, destination dir, destination name, inode number).
        self.pending_renames: list[tuple[_Inode, str, _Inode, str, int]] = []
        self.history = LagHistory()
        self.clients = itertools.count(1)  # one per reader view; the first view is client 0
        # Directory path -> actions run once by the next scandir of it (see before_scandir).
        self.scandir_hooks: dict[str, list[Callable[[], None]]] = {}

    def new_inode(self, kind: str, *, uid: int, mode: int, target: str = "") -> _Inode:
        inode = _Inode(next(self.numbers), kind, uid, self.clock.now(), mode, target)
        self.inodes[inode.number] = inode
        return inode

    def operation(self, kind: str) -> None:
        """Count one mutating primitive, or raise :class:`SimulatedCrash` before it takes effect."""
        if self.dead:
            raise SimulatedCrash(f"{kind} after a simulated crash; call crash() to recover")
        if self.crash_at is not None and self.operation_count >= self.crash_at:
            self.dead = True
            self.crash_at = None
            raise SimulatedCrash(f"simulated crash before {kind} (operation {self.operation_count})")
        self.operation_count += 1


class _MemoryAppender:
    """An append-only handle on one in-memory inode, valid until the next crash."""

    def __init__(self, fs: InMemoryFilesystem, inode: _Inode, pending_dirs: list[_Inode]) -> None:
        self._fs = fs
        self._inode = inode
        self._pending_dirs = pending_dirs  # directories naming a new file, synced at the first sync
        self._epoch = fs._state.epoch
        self._closed = False

    def _check(self) -> None:
        if self._closed or self._epoch != self._fs._state.epoch:
            raise _error(errno.EBADF, "<appender>")

    @property
    def size(self) -> int:
        """Bytes in the file."""
        return len(self._inode.data)

    def append(self, data: bytes) -> int:
        """Append ``data`` and return the offset it starts at."""
        with self._fs._state.lock:
            self._check()
            self._fs._state.operation("append")
            offset = len(self._inode.data)
            self._fs._state.history.grew(
                self._inode.number, offset, offset + len(data), self._fs.clock.monotonic(), self._fs._client
            )
            self._inode.data += data
            self._inode.mtime = self._inode.changed = self._fs.clock.now()
            return offset

    def sync(self) -> None:
        """Make the content durable, and the file's name the first time after creating it."""
        with self._fs._state.lock:
            self._check()
            self._fs._fsync_file(self._inode)
            while self._pending_dirs:
                self._fs._fsync_dir_inode(self._pending_dirs[0])
                self._pending_dirs.pop(0)

    def close(self) -> None:
        """Close the handle; closing twice is harmless."""
        self._closed = True
