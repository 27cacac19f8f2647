"""The in-memory filesystem double (see the package docstring for the contract).

They implement the ports in memory and pass the same contract suite as the real
adapters. The invariant they protect is honesty about POSIX: renames are atomic and
fenced, a name or a byte survives :meth:`InMemoryFilesystem.crash` only if it was
fsynced (file content at the file's fsync, names at their directory's fsync, both
halves of a cross-directory rename at the fsync of either directory), and a lagging
reader does not see a name before its lag has elapsed, still sees an unlinked name
and an older size of a grown file within its stale window (:mod:`.memory_lag`).
They import only the stdlib and :mod:`httk.workflow.ports`, never an adapter.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import posixpath
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from httk.workflow.ports import DOCUMENT_LIMIT, Clock, DocumentTooLarge, Entry, FileStat, NotRegularFile

from .clock import FakeClock
from .memory_tree import (
    _DIR,
    _FIFO,
    _FILE,
    _KIND_WORDS,
    _LINK,
    SimulatedCrash,
    SimulatedHang,
    _error,
    _Inode,
    _MemoryAppender,
    _norm,
    _parts,
    _State,
)
from .memory_tree_ops import TreeOperations

T = TypeVar("T")

_Resolved = tuple["_Inode | None", str, "_Inode | None"]  # (parent directory, final name, inode)
_FIRST_PAUSE = 0.01
_MAX_PAUSE = 0.5
_MAX_SYMLINK_HOPS = 40


_UNLOCKED = frozenset({"reader", "exists", "sleep", "retry_until"})


def _serialized(cls: type[T]) -> type[T]:
    """Run every public method of ``cls`` under the shared lock: tests may race threads on one tree."""

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: InMemoryFilesystem, *args: Any, **kwargs: Any) -> Any:
            with self._state.lock:
                return method(self, *args, **kwargs)

        return wrapper

    # The class's own methods and those it inherits from the tree operations (memory_tree_ops).
    seen: set[str] = set()
    for klass in cls.__mro__[:-1]:
        for name, member in list(vars(klass).items()):
            if name in seen or not callable(member) or name.startswith("_") or name in _UNLOCKED:
                continue
            seen.add(name)
            setattr(cls, name, locked(member))
    return cls


@_serialized
class InMemoryFilesystem(TreeOperations):
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
        self._stale = 0.0
        self._client = 0
        self.uid = uid

    @property
    def clock(self) -> Clock:
        """The clock shared by every view (mtimes, reader lag, sleep)."""
        return self._state.clock

    # -- test API --------------------------------------------------------------------------

    def reader(
        self, lag_seconds: float, *, uid: int | None = None, stale_seconds: float | None = None
    ) -> InMemoryFilesystem:
        """Another client's view of the same tree, lagging as an NFS client does.

        Blind to names linked less than ``lag_seconds`` ago; still seeing names unlinked
        (renamed away, removed, replaced) less than ``stale_seconds`` ago, with their old
        inode, and the older size of a file appended to within that window.
        ``stale_seconds`` defaults to ``lag_seconds``. The view sees its own changes at
        once, as an NFS client does (close-to-open). The lag affects reads
        (``read_*``, ``scandir``, ``lstat``, ``exists``); mutations act on the true
        tree, as a server would.
        """
        view = object.__new__(InMemoryFilesystem)
        view._state = self._state
        view._lag = lag_seconds
        view._stale = lag_seconds if stale_seconds is None else stale_seconds
        view._client = next(self._state.clients)
        view.uid = self.uid if uid is None else uid
        self._state.history.widen(view._stale)
        return view

    def before_scandir(self, path: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, the next time any view lists ``path``, before the listing is taken.

        A deterministic hook for tests that need another actor to move something
        between two directory listings of one walk (``fsck`` racing a transition).
        """
        self._state.scandir_hooks.setdefault(_norm(path), []).append(action)

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
                inode.born, inode.linked_by = {}, {}
        reachable, stack = set(), [state.root.number]
        while stack:
            number = stack.pop()
            reachable.add(number)
            stack.extend(state.inodes[number].entries.values())
        state.inodes = {number: state.inodes[number] for number in reachable}
        state.dead, state.crash_at, state.pending_renames = False, None, []
        state.history.clear()
        state.epoch += 1

    def symlink(self, target: str, path: str) -> None:
        """Create a symlink at ``path`` pointing at ``target`` (a create primitive)."""
        self._new_entry(path, _LINK, "create", 0o777, target)

    def mkfifo(self, path: str) -> None:
        """Create a FIFO at ``path`` (a create primitive); reading it blocking raises :class:`SimulatedHang`."""
        self._new_entry(path, _FIFO, "create", 0o644)

    def chown(self, path: str, uid: int) -> None:
        """Set the owner of ``path`` (metadata only; not a counted primitive)."""
        self._existing(path, follow=False).uid = uid

    def chmod(self, path: str, mode: int) -> None:
        """Set the permission bits of ``path`` (not a counted primitive)."""
        self._existing(path, follow=True).mode = mode

    # -- resolution ------------------------------------------------------------------------

    def _child(self, directory: _Inode, name: str, view: bool) -> _Inode | None:
        """The inode ``name`` names: in the true tree, or (``view``) as this lagging view sees it."""
        number = directory.entries.get(name)
        if not view:
            return None if number is None else self._state.inodes[number]
        now = self.clock.monotonic()
        if number is not None:
            born = directory.born.get(name)
            if born is None or now - born >= self._lag or directory.linked_by.get(name) == self._client:
                return self._state.inodes[number]
        ghost = self._state.history.ghost(directory.number, name, now, self._lag, self._stale, self._client)
        return None if ghost is None else self._state.inodes.get(ghost)

    def _length(self, node: _Inode) -> int:
        """The size of a file as this view sees it (older within the stale window)."""
        now = self.clock.monotonic()
        return self._state.history.length(node.number, len(node.data), now, self._stale, self._client)

    def _resolve(self, path: str, *, follow: bool, view: bool = False) -> _Resolved:
        """(parent directory, final name, inode or ``None``); intermediate symlinks are followed."""
        parts = _parts(_norm(path))
        parent: _Inode | None = None
        node, name, index, hops = self._state.root, "", 0, 0
        while index < len(parts):
            if node.kind != _DIR:
                raise _error(errno.ENOTDIR, path)
            name = parts[index]
            last = index == len(parts) - 1
            child = self._child(node, name, view)
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

    def _existing(self, path: str, *, follow: bool, view: bool = False) -> _Inode:
        node = self._resolve(path, follow=follow, view=view)[2]
        if node is None:
            raise _error(errno.ENOENT, path)
        return node

    def _visible(self, path: str, *, follow: bool = False, view: bool = True) -> _Inode | None:
        """The inode at ``path`` as this view sees it (or the true tree with ``view=False``), else ``None``."""
        try:
            return self._resolve(path, follow=follow, view=view)[2]
        except (FileNotFoundError, NotADirectoryError):
            return None

    # -- primitives ------------------------------------------------------------------------

    def _link(self, directory: _Inode, name: str, inode: _Inode) -> None:
        replaced = directory.entries.get(name)
        if replaced is not None and replaced != inode.number:
            self._state.history.unlinked(
                directory.number, name, replaced, directory.born.get(name), self.clock.monotonic(), self._client
            )
        directory.entries[name] = inode.number
        directory.linked_by[name] = self._client
        directory.born[name] = self.clock.monotonic()
        directory.mtime = directory.changed = self.clock.now()

    def _unlink(self, directory: _Inode, name: str) -> None:
        number, born = directory.entries[name], directory.born.get(name)
        self._state.history.unlinked(directory.number, name, number, born, self.clock.monotonic(), self._client)
        del directory.entries[name]
        directory.linked_by.pop(name, None)
        directory.born.pop(name, None)
        directory.mtime = directory.changed = self.clock.now()

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
        inode.mtime = inode.changed = self.clock.now()

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
        node = self._existing(path, follow=True, view=True)
        if node.kind == _DIR:
            raise _error(errno.EISDIR, path)
        if node.kind == _FIFO:
            raise SimulatedHang(f"a blocking read of the FIFO {path} never returns")
        return bytes(node.data[: self._length(node)])

    def read_document(self, path: str, limit: int | None = DOCUMENT_LIMIT) -> bytes:
        """A regular file's bytes (final symlink refused, a FIFO refused unread), at most ``limit``."""
        node = self._existing(path, follow=False, view=True)
        if node.kind != _FILE:
            raise NotRegularFile(path, f"is {_KIND_WORDS[node.kind]}, not a regular file")
        size = self._length(node)
        if limit is not None and size > limit:
            raise DocumentTooLarge(path, f"is {size} bytes, more than the {limit}-byte bound of a document")
        return bytes(node.data[:size])

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` of a regular file; shorter at end of file."""
        if offset < 0 or length < 0:
            raise _error(errno.EINVAL, path)
        node = self._existing(path, follow=True, view=True)
        if node.kind != _FILE:
            raise NotRegularFile(path, f"is {_KIND_WORDS[node.kind]}, not a regular file")
        return bytes(node.data[offset : min(offset + length, self._length(node))])

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        """Publish ``data`` at ``path`` all-or-nothing: temp, (fsync), rename, (fsync dir)."""
        self._publish(path, data, durable=durable, replace=True)

    def write_new(self, path: str, data: bytes, *, durable: bool) -> None:
        """Like :meth:`write_atomic` but ``FileExistsError`` if ``path`` exists."""
        if self._visible(path, view=False) is not None:
            raise _error(errno.EEXIST, path)
        self._publish(path, data, durable=durable, replace=False)

    def write_staged(self, path: str, data: bytes, *, durable: bool) -> None:
        """Create ``path`` holding ``data`` in place: a crash between the two leaves it empty."""
        path = _norm(path)
        self._directory(posixpath.dirname(path))
        inode = self._create_file(path)
        try:
            self._write(inode, data)
            if durable:
                self._fsync_file(inode)
        except BaseException:
            with contextlib.suppress(OSError, SimulatedCrash):
                self.remove(path)
            raise

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

    def exchange(self, first: str, second: str, *, durable: bool) -> None:
        """Swap two existing names in one step; unsynced, a crash undoes it like a rename."""
        first_parent, first_name, first_node = self._resolve(first, follow=False)
        second_parent, second_name, second_node = self._resolve(second, follow=False)
        if first_node is None or second_node is None:
            raise _error(errno.ENOENT, first if first_node is None else second, second)
        if first_parent is None or second_parent is None:
            raise _error(errno.EBUSY, first, second)
        if first_node is second_node:
            return
        for node, parent in ((first_node, second_parent), (second_node, first_parent)):
            if node.kind == _DIR and self._contains(node, parent):
                raise _error(errno.EINVAL, first, second)
        self._state.operation("exchange")
        self._link(first_parent, first_name, second_node)
        self._link(second_parent, second_name, first_node)
        if first_parent is not second_parent:
            # Two crossing moves, one transaction: syncing either directory keeps both.
            self._state.pending_renames.append((first_parent, first_name, second_parent, second_name,
                                                first_node.number))
            self._state.pending_renames.append((second_parent, second_name, first_parent, first_name,
                                                second_node.number))
        if durable:
            self._fsync_dir_inode(first_parent)
            if second_parent is not first_parent:
                self._fsync_dir_inode(second_parent)

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
        base = _norm(path)
        for action in self._state.scandir_hooks.pop(base, []):
            action()
        node = self._visible(path, follow=True)
        if node is None or node.kind != _DIR:
            return iter(())
        entries = []
        now = self.clock.monotonic()
        ghosts = self._state.history.ghost_names(node.number, now, self._lag, self._stale, self._client)
        for name in dict.fromkeys([*node.entries, *ghosts]):
            child = self._child(node, name, True)
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
        size = self._length(node) if node.kind == _FILE else len(node.target) if node.kind == _LINK else 0
        kind = node.kind
        return FileStat(
            size=size,
            uid=node.uid,
            mtime=node.mtime,
            is_dir=kind == _DIR,
            is_file=kind == _FILE,
            is_symlink=kind == _LINK,
            mode=node.mode,
            changed=node.changed,
        )

    def exists(self, path: str) -> bool:
        """Whether a name exists at ``path`` (a dangling symlink counts)."""
        return self.lstat(path) is not None

    def readlink(self, path: str) -> str:
        """The target a symlink points at; ``OSError`` (EINVAL) if ``path`` is not a symlink."""
        node = self._existing(path, follow=False, view=True)
        if node.kind != _LINK:
            raise _error(errno.EINVAL, path)
        return node.target

    def find_symlink(self, root: str, path: str) -> str | None:
        """The first link on the way from ``root`` (followed) to ``path`` (nothing below ``root`` followed)."""
        base = _norm(root).rstrip("/")
        if path.rstrip("/") != base and not path.startswith(f"{base}/"):
            raise ValueError(f"{path} is not below {root}")
        parts = [part for part in path[len(base) :].split("/") if part not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"{path}: '..' is not allowed below {root}")
        node = self._visible(root, follow=True)
        current = base
        for part in parts:
            if node is None or node.kind != _DIR:
                return None
            current = f"{current}/{part}"
            node = self._child(node, part, True)
            if node is not None and node.kind == _LINK:
                return current
        return None

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
