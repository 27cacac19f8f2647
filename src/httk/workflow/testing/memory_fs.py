"""The in-memory filesystem double (see the package docstring for the contract).

They implement the ports in memory and pass the same contract suite as the real
adapters. The invariant they protect is honesty about POSIX: renames are atomic and
fenced, a name or a byte survives :meth:`InMemoryFilesystem.crash` only if it was
fsynced (file content at the file's fsync, names at their directory's fsync, both
halves of a cross-directory rename at the fsync of either directory), and a lagging
reader does not see a name before its lag has elapsed. They import only the
stdlib and :mod:`httk.workflow.ports`, never an adapter.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import posixpath
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from httk.workflow.ports import Clock, Entry, FileStat

from .clock import FakeClock

T = TypeVar("T")

_DIR, _FILE, _LINK = "dir", "file", "symlink"
_Resolved = tuple["_Inode | None", str, "_Inode | None"]  # (parent directory, final name, inode)
_FIRST_PAUSE = 0.01
_MAX_PAUSE = 0.5
_MAX_SYMLINK_HOPS = 40


class SimulatedCrash(Exception):
    """Raised by an armed :class:`InMemoryFilesystem` instead of performing a primitive."""


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


_UNLOCKED = frozenset({"reader", "exists", "sleep", "retry_until"})


def _serialized(cls: type[T]) -> type[T]:
    """Run every public method of ``cls`` under the shared lock: tests may race threads on one tree."""

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: InMemoryFilesystem, *args: Any, **kwargs: Any) -> Any:
            with self._state.lock:
                return method(self, *args, **kwargs)

        return wrapper

    for name, member in list(vars(cls).items()):
        if callable(member) and not name.startswith("_") and name not in _UNLOCKED:
            setattr(cls, name, locked(member))
    return cls


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
            self._inode.data += data
            self._inode.mtime = self._fs.clock.now()
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


@_serialized
class InMemoryFilesystem:
    """:class:`~httk.workflow.ports.Filesystem` in memory, with crash, crash arming and reader lag.

    Every mutating primitive (create, write, rename, append, remove, mkdir, fsync)
    counts in :attr:`operation_count`; :meth:`arm_crash` makes a later one raise
    :class:`SimulatedCrash` before it takes effect, after which every mutating primitive raises
    until :meth:`crash` restores the durable image. ``makedirs`` is not durable: sync
    set-up trees with ``sync_tree`` (or use durable operations) before testing crashes.
    Paths are absolute and normalized with ``posixpath.normpath``; symlinks are
    followed in intermediate components, and in the final one where POSIX would.
    """

    def __init__(self, clock: Clock | None = None, *, uid: int = 1000) -> None:
        self._state = _State(clock if clock is not None else FakeClock())
        self._lag = 0.0
        self.uid = uid

    @property
    def clock(self) -> Clock:
        """The clock shared by every view (mtimes, reader lag, sleep)."""
        return self._state.clock

    # -- test API --------------------------------------------------------------------------

    def reader(self, lag_seconds: float, *, uid: int | None = None) -> InMemoryFilesystem:
        """Another client's view of the same tree, blind to names linked less than ``lag_seconds`` ago.

        The lag hides names from reads (``read_*``, ``scandir``, ``lstat``, ``exists``);
        mutations act on the true tree, as a server would.
        """
        view = object.__new__(InMemoryFilesystem)
        view._state = self._state
        view._lag = lag_seconds
        view.uid = self.uid if uid is None else uid
        return view

    @property
    def operation_count(self) -> int:
        """Mutating primitives performed so far (across all views)."""
        return self._state.operation_count

    @property
    def crashed(self) -> bool:
        """Whether an armed crash has fired and :meth:`crash` has not been called yet."""
        return self._state.dead

    def arm_crash(self, after: int) -> None:
        """Make the primitive after ``after`` more primitives raise :class:`SimulatedCrash`."""
        if after < 0:
            raise ValueError("after must be >= 0")
        self._state.crash_at = self._state.operation_count + after

    def crash(self) -> None:
        """Power loss: the live tree becomes the durable image; armed crashes and open appenders end."""
        state = self._state
        for inode in state.inodes.values():
            if inode.kind == _FILE:
                if inode.durable is not None:
                    inode.data = bytearray(inode.durable)
                else:
                    del inode.data[inode.durable_length :]
                inode.durable, inode.durable_length = None, len(inode.data)
            elif inode.kind == _DIR:
                inode.entries = dict(inode.durable_entries)
                inode.born = {}
        reachable, stack = set(), [state.root.number]
        while stack:
            number = stack.pop()
            reachable.add(number)
            stack.extend(state.inodes[number].entries.values())
        state.inodes = {number: state.inodes[number] for number in reachable}
        state.dead, state.crash_at, state.pending_renames = False, None, []
        state.epoch += 1

    def symlink(self, target: str, path: str) -> None:
        """Create a symlink at ``path`` pointing at ``target`` (a create primitive)."""
        self._new_entry(path, _LINK, "create", 0o777, target)

    def chown(self, path: str, uid: int) -> None:
        """Set the owner of ``path`` (metadata only; not a counted primitive)."""
        self._existing(path, follow=False).uid = uid

    def chmod(self, path: str, mode: int) -> None:
        """Set the permission bits of ``path`` (not a counted primitive)."""
        self._existing(path, follow=True).mode = mode

    # -- resolution ------------------------------------------------------------------------

    def _child(self, directory: _Inode, name: str, lag: float) -> _Inode | None:
        number = directory.entries.get(name)
        if number is None:
            return None
        born = directory.born.get(name)
        if lag > 0 and born is not None and self.clock.monotonic() - born < lag:
            return None
        return self._state.inodes[number]

    def _resolve(self, path: str, *, follow: bool, lag: float = 0.0) -> _Resolved:
        """(parent directory, final name, inode or ``None``); intermediate symlinks are followed."""
        parts = _parts(_norm(path))
        parent: _Inode | None = None
        node, name, index, hops = self._state.root, "", 0, 0
        while index < len(parts):
            if node.kind != _DIR:
                raise _error(errno.ENOTDIR, path)
            name = parts[index]
            last = index == len(parts) - 1
            child = self._child(node, name, lag)
            if child is None:
                if last:
                    return node, name, None
                raise _error(errno.ENOENT, path)
            if child.kind == _LINK and (follow or not last):
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise _error(errno.ELOOP, path)
                base = "/" + "/".join(parts[:index])
                parts = _parts(posixpath.normpath(posixpath.join(base, child.target))) + parts[index + 1 :]
                parent, node, name, index = None, self._state.root, "", 0
                continue
            parent, node = node, child
            index += 1
        return parent, name, node

    def _existing(self, path: str, *, follow: bool, lag: float = 0.0) -> _Inode:
        node = self._resolve(path, follow=follow, lag=lag)[2]
        if node is None:
            raise _error(errno.ENOENT, path)
        return node

    def _visible(self, path: str, *, follow: bool = False, lag: float | None = None) -> _Inode | None:
        """The inode at ``path`` as this view sees it (or the true tree with ``lag=0``), else ``None``."""
        try:
            return self._resolve(path, follow=follow, lag=self._lag if lag is None else lag)[2]
        except (FileNotFoundError, NotADirectoryError):
            return None

    # -- primitives ------------------------------------------------------------------------

    def _link(self, directory: _Inode, name: str, inode: _Inode) -> None:
        directory.entries[name] = inode.number
        directory.born[name] = self.clock.monotonic()
        directory.mtime = self.clock.now()

    def _unlink(self, directory: _Inode, name: str) -> None:
        del directory.entries[name]
        directory.born.pop(name, None)
        directory.mtime = self.clock.now()

    def _new_entry(self, path: str, kind: str, operation: str, mode: int, target: str = "") -> _Inode:
        """Create and link a new inode at ``path`` (``FileExistsError`` if the name is taken)."""
        parent, name, node = self._resolve(path, follow=False)
        if node is not None or parent is None:
            raise _error(errno.EEXIST, path)
        self._state.operation(operation)
        inode = self._state.new_inode(kind, uid=self.uid, mode=mode, target=target)
        self._link(parent, name, inode)
        return inode

    def _create_file(self, path: str) -> _Inode:
        return self._new_entry(path, _FILE, "create", 0o644)

    def _write(self, inode: _Inode, data: bytes) -> None:
        self._state.operation("write")
        if inode.durable is None:
            inode.durable = bytes(inode.data[: inode.durable_length])
        inode.data = bytearray(data)
        inode.mtime = self.clock.now()

    def _mkdir(self, path: str) -> _Inode:
        return self._new_entry(path, _DIR, "mkdir", 0o755)

    def _fsync_file(self, inode: _Inode) -> None:
        self._state.operation("fsync")
        inode.durable, inode.durable_length = None, len(inode.data)

    def _fsync_dir_inode(self, directory: _Inode) -> None:
        state = self._state
        state.operation("fsync")
        directory.durable_entries = dict(directory.entries)
        # A rename is one metadata transaction (ext4, xfs, NFS servers): syncing either
        # directory makes both halves durable, so a fenced move never loses its name.
        pending = []
        for source_dir, source_name, destination_dir, destination_name, number in state.pending_renames:
            if source_dir is directory:
                destination_dir.durable_entries[destination_name] = number
            elif destination_dir is directory:
                if source_dir.durable_entries.get(source_name) == number:
                    del source_dir.durable_entries[source_name]
            else:
                pending.append((source_dir, source_name, destination_dir, destination_name, number))
        state.pending_renames = pending

    def _directory(self, path: str) -> _Inode:
        node = self._existing(path, follow=True)
        if node.kind != _DIR:
            raise _error(errno.ENOTDIR, path)
        return node

    def _ensure_dir(self, directory: str, *, durable: bool) -> list[_Inode]:
        """Create missing directories outermost first; when ``durable``, fsync each new one's parent."""
        created: list[tuple[_Inode, _Inode]] = []
        current = "/"
        for part in _parts(_norm(directory)):
            current = posixpath.join(current, part)
            parent = self._directory(posixpath.dirname(current))
            node = self._resolve(current, follow=True)[2]
            if node is None:
                created.append((parent, self._mkdir(current)))
            elif node.kind != _DIR:
                raise _error(errno.EEXIST, current)
        if durable:
            for parent, _ in created:
                self._fsync_dir_inode(parent)
        return [parent for parent, _ in created]

    def _contains(self, tree: _Inode, directory: _Inode) -> bool:
        stack = [tree]
        while stack:
            node = stack.pop()
            if node is directory:
                return True
            children = (self._state.inodes[number] for number in node.entries.values())
            stack.extend(child for child in children if child.kind == _DIR)
        return False

    def _rename_raw(self, source: str, destination: str, *, replace: bool) -> None:
        source_parent, source_name, node = self._resolve(source, follow=False)
        if node is None:
            raise _error(errno.ENOENT, source, destination)
        destination_parent, destination_name, existing = self._resolve(destination, follow=False)
        if source_parent is None or destination_parent is None:
            raise _error(errno.EBUSY, source, destination)
        if existing is not None:
            if not replace:
                raise _error(errno.EEXIST, source, destination)
            if existing is node:
                return
            if existing.kind == _DIR and node.kind != _DIR:
                raise _error(errno.EISDIR, source, destination)
            if node.kind == _DIR and existing.kind != _DIR:
                raise _error(errno.ENOTDIR, source, destination)
            if existing.kind == _DIR and existing.entries:
                raise _error(errno.ENOTEMPTY, source, destination)
        if node.kind == _DIR and self._contains(node, destination_parent):
            raise _error(errno.EINVAL, source, destination)
        self._state.operation("rename")
        self._unlink(source_parent, source_name)
        self._link(destination_parent, destination_name, node)
        if source_parent is not destination_parent:
            self._state.pending_renames.append(
                (source_parent, source_name, destination_parent, destination_name, node.number)
            )

    # -- the Filesystem port ---------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``."""
        node = self._existing(path, follow=True, lag=self._lag)
        if node.kind == _DIR:
            raise _error(errno.EISDIR, path)
        return bytes(node.data)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``; shorter at end of file."""
        if offset < 0 or length < 0:
            raise _error(errno.EINVAL, path)
        node = self._existing(path, follow=True, lag=self._lag)
        if node.kind == _DIR:
            raise _error(errno.EISDIR, path)
        return bytes(node.data[offset : offset + length])

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        """Publish ``data`` at ``path`` all-or-nothing: temp, (fsync), rename, (fsync dir)."""
        self._publish(path, data, durable=durable, replace=True)

    def write_new(self, path: str, data: bytes, *, durable: bool) -> None:
        """Like :meth:`write_atomic` but ``FileExistsError`` if ``path`` exists."""
        if self._visible(path, lag=0) is not None:
            raise _error(errno.EEXIST, path)
        self._publish(path, data, durable=durable, replace=False)

    def _publish(self, path: str, data: bytes, *, durable: bool, replace: bool) -> None:
        path = _norm(path)
        directory, name = posixpath.split(path)
        self._ensure_dir(directory, durable=durable)
        temp = posixpath.join(directory, f".{name}.tmp.{next(self._state.tokens):016x}")
        inode = self._create_file(temp)
        try:
            self._write(inode, data)
            if durable:
                self._fsync_file(inode)
            self._rename_raw(temp, path, replace=replace)
        except BaseException:
            with contextlib.suppress(OSError, SimulatedCrash):
                self.remove(temp)
            raise
        if durable:
            self._fsync_dir_inode(self._directory(directory))

    def create_empty(self, path: str, *, durable: bool) -> None:
        """Create a zero-length file; ``FileExistsError`` if it exists."""
        directory = posixpath.dirname(_norm(path))
        self._ensure_dir(directory, durable=durable)
        self._create_file(path)
        if durable:
            self._fsync_dir_inode(self._directory(directory))

    def rename(self, source: str, destination: str, *, durable: bool) -> None:
        """Rename that never overwrites; creates the destination's parents."""
        source_parent, _, node = self._resolve(source, follow=False)
        if node is None or source_parent is None:
            raise _error(errno.ENOENT, source, destination)
        destination_dir = posixpath.dirname(_norm(destination))
        self._ensure_dir(destination_dir, durable=durable)
        self._rename_raw(source, destination, replace=False)
        if durable:
            # Destination first, as the POSIX adapter does (see its rename).
            destination_parent = self._directory(destination_dir)
            self._fsync_dir_inode(destination_parent)
            if destination_parent is not source_parent:
                self._fsync_dir_inode(source_parent)

    def open_appender(self, path: str, *, create: bool = True) -> _MemoryAppender:
        """Open ``path`` for appending (creating it and its parents when ``create``)."""
        try:
            node = self._resolve(path, follow=True)[2]
        except FileNotFoundError:
            if not create:
                raise
            node = None
        if node is not None:
            if node.kind == _DIR:
                raise _error(errno.EISDIR, path)
            return _MemoryAppender(self, node, [])
        if not create:
            raise _error(errno.ENOENT, path)
        directory = posixpath.dirname(_norm(path))
        created_in = self._ensure_dir(directory, durable=False)
        node = self._create_file(path)
        return _MemoryAppender(self, node, [*created_in, self._directory(directory)])

    def scandir(self, path: str) -> Iterator[Entry]:
        """The entries of ``path`` (snapshot at call time); a missing directory yields nothing."""
        node = self._visible(path, follow=True)
        if node is None or node.kind != _DIR:
            return iter(())
        base = _norm(path)
        entries = []
        for name in list(node.entries):
            child = self._child(node, name, self._lag)
            if child is not None:
                path_of = posixpath.join(base, name)
                kind = child.kind
                entries.append(
                    Entry(name, path_of, is_dir=kind == _DIR, is_file=kind == _FILE, is_symlink=kind == _LINK)
                )
        return iter(entries)

    def lstat(self, path: str) -> FileStat | None:
        """Facts about ``path`` without following a final symlink; ``None`` if absent."""
        node = self._visible(path, follow=False)
        if node is None:
            return None
        size = len(node.data) if node.kind == _FILE else len(node.target) if node.kind == _LINK else 0
        kind = node.kind
        return FileStat(
            size=size,
            uid=node.uid,
            mtime=node.mtime,
            is_dir=kind == _DIR,
            is_file=kind == _FILE,
            is_symlink=kind == _LINK,
            mode=node.mode,
        )

    def exists(self, path: str) -> bool:
        """Whether a name exists at ``path`` (a dangling symlink counts)."""
        return self.lstat(path) is not None

    def readlink(self, path: str) -> str:
        """The target a symlink points at; ``OSError`` (EINVAL) if ``path`` is not a symlink."""
        node = self._existing(path, follow=False, lag=self._lag)
        if node.kind != _LINK:
            raise _error(errno.EINVAL, path)
        return node.target

    def makedirs(self, path: str, *, durable: bool = False) -> None:
        """Create ``path`` and its parents (durably when asked); an existing directory is fine."""
        self._ensure_dir(path, durable=durable)

    def remove(self, path: str) -> None:
        """Remove one file or symlink; ``FileNotFoundError`` if absent."""
        parent, name, node = self._resolve(path, follow=False)
        if node is None or parent is None:
            raise _error(errno.ENOENT, path)
        if node.kind == _DIR:
            raise _error(errno.EISDIR, path)
        self._state.operation("remove")
        self._unlink(parent, name)

    def rmdir(self, path: str) -> None:
        """Remove one empty directory."""
        parent, name, node = self._resolve(path, follow=False)
        if node is None:
            raise _error(errno.ENOENT, path)
        if node.kind != _DIR:
            raise _error(errno.ENOTDIR, path)
        if parent is None:
            raise _error(errno.EBUSY, path)
        if node.entries:
            raise _error(errno.ENOTEMPTY, path)
        self._state.operation("remove")
        self._unlink(parent, name)

    def rmtree(self, path: str) -> None:
        """Remove a file, symlink or tree, one primitive per entry; a missing one is fine."""
        node = self._visible(path, lag=0)
        if node is None:
            return
        if node.kind != _DIR:
            self.remove(path)
            return
        for name in list(node.entries):
            self.rmtree(posixpath.join(_norm(path), name))
        self.rmdir(path)

    def copy_tree(self, source: str, destination: str, *, durable: bool) -> None:
        """Copy a file, symlink or tree to ``destination``, which must not exist; appears all at once."""
        destination = _norm(destination)
        if self._visible(destination, lag=0) is not None:
            raise _error(errno.EEXIST, destination)
        node = self._existing(source, follow=False)
        directory, name = posixpath.split(destination)
        self._ensure_dir(directory, durable=durable)
        temp = posixpath.join(directory, f".{name}.tmp.{next(self._state.tokens):016x}")
        try:
            self._copy(node, temp)
            if durable:
                self.sync_tree(temp)
            self._rename_raw(temp, destination, replace=False)
        except BaseException:
            with contextlib.suppress(OSError, SimulatedCrash):
                self.rmtree(temp)
            raise
        if durable:
            self._fsync_dir_inode(self._directory(directory))

    def _copy(self, node: _Inode, path: str) -> None:
        if node.kind == _LINK:
            self.symlink(node.target, path)
            return
        if node.kind == _FILE:
            copy = self._create_file(path)
            self._write(copy, bytes(node.data))
        else:
            copy = self._mkdir(path)
            for name, number in list(node.entries.items()):
                self._copy(self._state.inodes[number], posixpath.join(path, name))
        copy.mode, copy.mtime = node.mode, node.mtime  # as shutil.copy2 / copytree keep them

    def sync_tree(self, path: str) -> None:
        """fsync every file and directory below ``path`` (and ``path`` itself), children first."""
        self._sync_inode(self._existing(path, follow=False))

    def _sync_inode(self, node: _Inode) -> None:
        if node.kind == _FILE:
            self._fsync_file(node)
        elif node.kind == _DIR:
            for number in list(node.entries.values()):
                self._sync_inode(self._state.inodes[number])
            self._fsync_dir_inode(node)

    def fsync_dir(self, path: str) -> None:
        """Make the directory's current set of names durable."""
        self._fsync_dir_inode(self._directory(path))

    def sleep(self, seconds: float) -> None:
        """Advance the shared fake clock."""
        self.clock.sleep(seconds)

    def retry_until(self, probe: Callable[[], T | None], deadline_seconds: float) -> T | None:
        """Call ``probe`` until non-``None`` or the deadline passes; backoff 10 ms doubling to 0.5 s."""
        deadline = self.clock.monotonic() + deadline_seconds
        pause = _FIRST_PAUSE
        while True:
            result = probe()
            if result is not None:
                return result
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return None
            self.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_PAUSE)
