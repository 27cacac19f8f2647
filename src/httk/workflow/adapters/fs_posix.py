"""The POSIX filesystem adapter: :class:`~httk.workflow.ports.Filesystem` on the real OS.

It owns every publication primitive the protocol relies on and protects two
invariants: a reader sees a published file or tree all-or-nothing (temp sibling,
fsync, rename, fsync of the directory), and :meth:`PosixFilesystem.rename` never
overwrites, so exactly one actor can move a given source name (the marker fence).
The no-overwrite rename is ``renameat2(RENAME_NOREPLACE)``; where the kernel or the
filesystem lacks it (old kernels, NFS) it falls back to ``link`` + ``unlink`` for
files and a checked ``rename`` for directories. :meth:`PosixFilesystem.exchange` is
``renameat2(RENAME_EXCHANGE)``; only where that is refused as unsupported does it fall
back to three plain renames, which are not atomic.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from httk.workflow.ports import DOCUMENT_LIMIT, DocumentTooLarge, Entry, FileStat, NotRegularFile

from .renames import (
    _AT_FDCWD,
    _RENAME_NOREPLACE,
    _UNSUPPORTED,
    _os_error,
    _temp_sibling,
    exchange_names,
    last_errno,
    renameat2,
)
from .tree_copy import copy_entry
from .tree_copy import fsync_dir as _fsync_dir
from .tree_copy import fsync_file as _fsync_file
from .tree_copy import sync_dir_tree as _sync_dir_tree

T = TypeVar("T")

_FIRST_PAUSE = 0.01
_MAX_PAUSE = 0.5


#: Open one name of a walk: a link itself is opened, not followed (``O_PATH`` where Linux has it, so
#: neither read permission nor a FIFO's open can get in the way).
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC


def _components_below(root: str, path: str) -> list[str]:
    """The names leading from ``root`` to ``path``; ``ValueError`` when ``path`` is not below ``root``."""
    base = os.path.normpath(root).rstrip("/")
    if path.rstrip("/") == base:
        return []
    if not path.startswith(f"{base}/"):
        raise ValueError(f"{path} is not below {root}")
    parts = [part for part in path[len(base) + 1 :].split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path}: '..' is not allowed below {root}")
    return parts


def _kind_of(mode: int) -> str:
    """What a non-regular file is, in the words of a refusal."""
    for test, word in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def _open_regular(path: str, *, follow: bool) -> tuple[int, int]:
    """(descriptor, size) of a regular file, opened without blocking; else :class:`NotRegularFile`.

    ``O_NONBLOCK`` makes the open of a FIFO return at once (and is harmless on a
    regular file); ``fstat`` on the descriptor then judges the very file opened.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow:
            raise NotRegularFile(path, "is a symbolic link, not a regular file") from None
        if error.errno == errno.ENXIO:  # opening a socket (or a FIFO without a writer, for O_WRONLY)
            raise NotRegularFile(path, f"is {_kind_of(os.lstat(path).st_mode)}, not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, f"is {_kind_of(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _read_at(fd: int, offset: int, length: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` (``pread`` until end of file or ``length``)."""
    chunks: list[bytes] = []
    remaining = length
    while remaining > 0:
        chunk = os.pread(fd, min(remaining, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _fill(fd: int, data: bytes, *, durable: bool) -> None:
    """Write ``data`` to the new file ``fd`` (fsynced when ``durable``) and close it, whatever happens."""
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _PosixAppender:
    """An append-only descriptor that knows the offset of each record it writes."""

    def __init__(self, path: str, fd: int, pending_dirs: list[str]) -> None:
        self._path = path
        self._fd: int | None = fd
        self._size = os.fstat(fd).st_size
        # A freshly created file (and any directory created for it) is only durable once
        # the directory entries naming it are synced too; that happens at the first sync.
        self._pending_dirs = pending_dirs

    @property
    def size(self) -> int:
        """Bytes in the file: its size at open plus everything appended since."""
        return self._size

    def _open_fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"appender for {self._path} is closed")
        return self._fd

    def append(self, data: bytes) -> int:
        """Append ``data`` and return the offset it starts at."""
        offset = self._size
        _write_all(self._open_fd(), data)
        self._size += len(data)
        return offset

    def sync(self) -> None:
        """fsync the file, and the directories naming it the first time after creating it."""
        os.fsync(self._open_fd())
        while self._pending_dirs:
            _fsync_dir(self._pending_dirs[0])
            self._pending_dirs.pop(0)

    def close(self) -> None:
        """Close the descriptor; closing twice is harmless."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


#: fsyncs in flight at once in a group commit: ext4 and xfs then commit many in one journal
#: transaction (about 4x fewer milliseconds per file than one at a time on the reference machine).
_SYNC_THREADS = 16
#: Fewer paths than this are synced one after another: starting (and joining) a thread pool
#: costs more than overlapping a handful of fsyncs saves, and every first attempt syncs two.
_OVERLAP_FROM = 8


def _overlapped(function: Callable[[str], None], paths: Sequence[str]) -> None:
    """Call ``function`` on every path, up to ``_SYNC_THREADS`` at once (fsync releases the GIL).

    Below :data:`_OVERLAP_FROM` paths, one at a time in order, without threads.
    """
    if len(paths) < _OVERLAP_FROM:
        for path in paths:
            function(path)
        return
    # Imported on use: a runner, which loads this module at start-up, never group-commits.
    from concurrent.futures import ThreadPoolExecutor

    # One task per thread, each taking the next path from one shared iterator (a list iterator's
    # next() is atomic under the GIL): a task per path cost a queue hand-off, and its futex calls, per path.
    pending = iter(paths)

    def drain() -> None:
        for path in pending:
            function(path)

    workers = min(_SYNC_THREADS, len(paths))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(drain) for _ in range(workers)]:
            future.result()  # re-raises the first failure (the other threads go on with the rest)


class PosixFilesystem:
    """:class:`~httk.workflow.ports.Filesystem` on the local POSIX filesystem."""

    def __init__(self, *, use_renameat2: bool = True) -> None:
        """``use_renameat2=False`` forces the link/unlink fallback (for tests and odd filesystems)."""
        self._use_renameat2 = use_renameat2

    @property
    def _renameat2(self) -> Callable[..., int] | None:
        # Loaded on the first rename, not at construction: a read command never renames.
        return renameat2() if self._use_renameat2 else None

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``."""
        with open(path, "rb") as handle:
            return handle.read()

    def read_document(self, path: str, limit: int | None = DOCUMENT_LIMIT) -> bytes:
        """The bytes of a regular file at ``path`` (final symlink refused, never blocking), at most ``limit``."""
        fd, size = _open_regular(path, follow=False)
        try:
            if limit is not None and size > limit:
                raise DocumentTooLarge(path, f"is {size} bytes, more than the {limit}-byte bound of a document")
            # One byte past the bound tells a file that grew since fstat from one that did not.
            data = _read_at(fd, 0, sys.maxsize if limit is None else limit + 1)
            if limit is not None and len(data) > limit:
                raise DocumentTooLarge(path, f"grew past the {limit}-byte bound of a document while being read")
            return data
        finally:
            os.close(fd)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` of a regular file; shorter at end of file."""
        if offset < 0 or length < 0:
            raise _os_error(errno.EINVAL, path)
        fd, size = _open_regular(path, follow=True)
        try:
            # Never ask for more than the file holds: a bogus length must not allocate its size.
            return _read_at(fd, offset, max(0, min(length, size - offset)))
        finally:
            os.close(fd)

    def scandir(self, path: str) -> Iterator[Entry]:
        """Stream the entries of ``path``; a missing (or vanishing, or non-) directory yields nothing."""
        try:
            iterator = os.scandir(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        with iterator:
            while True:
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                except (FileNotFoundError, NotADirectoryError):
                    return
                yield Entry(
                    name=item.name,
                    path=item.path,
                    is_dir=item.is_dir(follow_symlinks=False),
                    is_file=item.is_file(follow_symlinks=False),
                    is_symlink=item.is_symlink(),
                )

    def lstat(self, path: str) -> FileStat | None:
        """Facts about ``path`` without following a final symlink; ``None`` if absent."""
        try:
            result = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileStat(
            size=result.st_size,
            uid=result.st_uid,
            mtime=result.st_mtime,
            is_dir=stat.S_ISDIR(result.st_mode),
            is_file=stat.S_ISREG(result.st_mode),
            is_symlink=stat.S_ISLNK(result.st_mode),
            mode=stat.S_IMODE(result.st_mode),
            device=result.st_dev,
            changed=result.st_ctime,
        )

    def exists(self, path: str) -> bool:
        """Whether a name exists at ``path`` (a dangling symlink counts)."""
        return os.path.lexists(path)

    def readlink(self, path: str) -> str:
        """The target a symlink points at; ``OSError`` (EINVAL) if ``path`` is not a symlink."""
        return os.readlink(path)

    def find_symlink(self, root: str, path: str) -> str | None:
        """The first link on the way from ``root`` to ``path``; each name is opened at its parent, never followed."""
        parts = _components_below(root, path)
        try:
            fd = os.open(root, (_WALK_FLAGS & ~os.O_NOFOLLOW) | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        current = os.path.normpath(root).rstrip("/")
        try:
            for part in parts:
                current = f"{current}/{part}"
                try:
                    child = os.open(part, _WALK_FLAGS, dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError):
                    return None
                except OSError as error:
                    if error.errno == errno.ELOOP:  # no O_PATH: the open refused the link itself
                        return current
                    raise
                os.close(fd)
                fd = child
                # fstat judges the very name opened, so a swap after the open cannot mislead it.
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    return current
                if not stat.S_ISDIR(mode):
                    return None
            return None
        finally:
            os.close(fd)

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        """Publish ``data`` at ``path`` all-or-nothing, replacing any previous file."""
        self._publish(path, data, durable=durable, replace=True)

    def write_new(self, path: str, data: bytes, *, durable: bool) -> None:
        """Publish ``data`` at ``path``; ``FileExistsError`` if the name exists, even if created meanwhile.

        No look first: the no-replace rename refuses an existing name by itself, and a
        name nearly always is new (an id reservation, a request), so a check would be a
        call per publication spent on the rare clash.
        """
        self._publish(path, data, durable=durable, replace=False)

    def write_staged(self, path: str, data: bytes, *, durable: bool) -> None:
        """Create ``path`` holding ``data`` in place (see the port: only for a name nobody reads yet)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            _fill(fd, data, durable=durable)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise

    def _publish(self, path: str, data: bytes, *, durable: bool, replace: bool) -> None:
        directory = os.path.dirname(path)
        temp = _temp_sibling(path)
        fd = self._create(temp, directory, durable=durable)
        try:
            _fill(fd, data, durable=durable)
            if replace:
                os.rename(temp, path)
            else:
                try:
                    self._rename_noreplace(temp, path)
                except FileExistsError:
                    raise _os_error(errno.EEXIST, path) from None  # the name the caller gave, not the temp
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        if durable:
            _fsync_dir(directory)

    def create_empty(self, path: str, *, durable: bool) -> None:
        """Create a zero-length file; ``FileExistsError`` if the name exists."""
        directory = os.path.dirname(path)
        os.close(self._create(path, directory, durable=durable))
        if durable:
            _fsync_dir(directory)

    def _create(self, path: str, directory: str, *, durable: bool) -> int:
        """A descriptor of the new file ``path`` in ``directory``, which is made (as ``_ensure_dir``) if missing.

        The open comes first: the directory nearly always exists, and a missing one is the
        open's own ENOENT (ENOTDIR: a file in the way, which ``_ensure_dir`` then refuses).
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(path, flags, 0o666)
        except (FileNotFoundError, NotADirectoryError):
            self._ensure_dir(directory, durable=durable)
        return os.open(path, flags, 0o666)

    def rename(self, source: str, destination: str, *, durable: bool) -> None:
        """Move ``source`` to ``destination`` without ever overwriting; see the port for errors."""
        try:
            self._rename_noreplace(source, destination)
        except FileNotFoundError:
            # ENOENT means the source is gone (the fence was lost) or the destination's
            # parent is missing; only the second is ours to repair.
            if not os.path.lexists(source):
                raise
            self._ensure_dir(os.path.dirname(destination), durable=durable)
            self._rename_noreplace(source, destination)
        if durable:
            # Destination first: where a filesystem makes the two directories durable
            # separately, a crash in between leaves the name in both places, never in none.
            source_dir, destination_dir = os.path.dirname(source), os.path.dirname(destination)
            _fsync_dir(destination_dir)
            if destination_dir != source_dir:
                _fsync_dir(source_dir)

    def _rename_noreplace(self, source: str, destination: str) -> None:
        if self._renameat2 is not None:
            result = self._renameat2(
                _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(destination), _RENAME_NOREPLACE
            )
            if result == 0:
                return
            code = last_errno()
            if code not in _UNSUPPORTED:
                raise _os_error(code, source, destination)
        self._rename_fallback(source, destination)

    def _rename_fallback(self, source: str, destination: str) -> None:
        if stat.S_ISDIR(os.lstat(source).st_mode):
            # Race: a directory created at ``destination`` between this check and the
            # rename is replaced if it is empty. Only directory renames take this path,
            # and markers (the fenced names) are files.
            if os.path.lexists(destination):
                raise _os_error(errno.EEXIST, source, destination)
            try:
                os.rename(source, destination)
            except OSError as error:
                if error.errno in (errno.ENOTEMPTY, errno.ENOTDIR, errno.EEXIST):
                    raise _os_error(errno.EEXIST, source, destination) from error
                raise
            return
        # link() refuses an existing destination atomically, even on NFS; the symlink
        # itself is linked, never its target.
        os.link(source, destination, follow_symlinks=False)
        try:
            os.unlink(source)
        except FileNotFoundError:
            # Between our link and unlink another actor renamed the source: it won the
            # fence. Withdraw our copy of the name and report the loss.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(destination)
            raise _os_error(errno.ENOENT, source, destination) from None

    def exchange(self, first: str, second: str, *, durable: bool) -> None:
        """Swap two existing names (``renameat2(RENAME_EXCHANGE)``; see :func:`.renames.exchange_names`)."""
        exchange_names(self._renameat2, first, second)
        if durable:
            first_dir, second_dir = os.path.dirname(first), os.path.dirname(second)
            _fsync_dir(first_dir)
            if second_dir != first_dir:
                _fsync_dir(second_dir)

    def open_appender(self, path: str, *, create: bool = True) -> _PosixAppender:
        """Open ``path`` for appending (creating it and its parents when ``create``)."""
        flags = os.O_WRONLY | os.O_APPEND
        try:
            return _PosixAppender(path, os.open(path, flags), pending_dirs=[])
        except FileNotFoundError:
            if not create:
                raise
        directory = os.path.dirname(path)
        created = self._ensure_dir(directory, durable=False)
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            # Someone created it between our two opens; it is theirs to make durable.
            return _PosixAppender(path, os.open(path, flags), pending_dirs=[])
        return _PosixAppender(path, fd, pending_dirs=[os.path.dirname(d) for d in created] + [directory])

    def makedirs(self, path: str, *, durable: bool = False) -> None:
        """Create ``path`` and its parents; an existing directory is fine.

        With ``durable`` every created directory's name is synced into its parent.
        """
        if durable:
            self._ensure_dir(path, durable=True)
            return
        # The parent nearly always exists (a staging directory, a placement): one mkdir, where
        # os.makedirs first looks at the parent.
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
        except FileNotFoundError:
            os.makedirs(path, exist_ok=True)

    def _ensure_dir(self, directory: str, *, durable: bool) -> list[str]:
        """Create ``directory`` as needed, outermost first, and return the directories created.

        When ``durable``, the parent of every created directory is fsynced, so the new
        chain of names survives a crash once the caller syncs ``directory`` itself.
        """
        if os.path.isdir(directory):
            return []
        missing: list[str] = []
        current = directory
        while not os.path.isdir(current) and os.path.dirname(current) != current:
            missing.append(current)
            current = os.path.dirname(current)
        missing.reverse()  # outermost first
        for created in missing:
            try:
                os.mkdir(created)
            except FileExistsError:
                # A concurrent creator is fine; a file in the way is not.
                if not os.path.isdir(created):
                    raise
        if durable:
            for created in missing:
                _fsync_dir(os.path.dirname(created))
        return missing

    def remove(self, path: str) -> None:
        """Remove one file or symlink; ``FileNotFoundError`` if absent."""
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        """Remove one empty directory."""
        os.rmdir(path)

    def rmtree(self, path: str) -> None:
        """Remove a file, symlink or tree; a missing one (or entries vanishing meanwhile) is fine."""
        info = self.lstat(path)
        if info is None:
            return
        if not info.is_dir:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return

        def tolerate_vanished(function: object, failed: str, error: BaseException) -> None:
            # A concurrent remover got there first: the goal (nothing left) still holds.
            if not isinstance(error, FileNotFoundError):
                raise error

        import shutil  # here, not at the top: shutil (bz2, lzma, fnmatch) is a cost every read command would pay

        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=tolerate_vanished)
        else:
            shutil.rmtree(path, onerror=lambda fn, failed, info: tolerate_vanished(fn, failed, info[1]))

    def symlink(self, target: str, path: str) -> None:
        """Create the link ``path`` -> ``target`` (the parent must exist); ``FileExistsError`` if taken."""
        os.symlink(target, path)

    def copy_tree(self, source: str, destination: str, *, durable: bool, staged: bool = False) -> None:
        """Copy a file, symlink or tree to ``destination``, which must not exist; appears all at once.

        The copy is what ``shutil.copytree(symlinks=True)`` makes (:func:`.tree_copy.copy_entry`:
        bytes, modes, times, extended attributes; a FIFO, socket or device refused).
        ``staged``: made at ``destination`` itself (see the port).
        """
        info = os.lstat(source)
        parent = os.path.dirname(destination)
        self._ensure_dir(parent, durable=durable)
        if staged:
            self._copy_staged(source, destination, info, durable=durable)
            return
        if os.path.lexists(destination):
            raise _os_error(errno.EEXIST, destination)
        temp = _temp_sibling(destination)
        try:
            copy_entry(source, temp, info)
            if durable:
                self.sync_tree(temp)
            self._rename_noreplace(temp, destination)
        except BaseException as error:
            self._remove_partial(temp, error)
            raise
        if durable:
            _fsync_dir(parent)

    def _copy_staged(self, source: str, destination: str, info: os.stat_result, *, durable: bool) -> None:
        """:func:`.tree_copy.copy_entry` straight to ``destination``; what it made is removed if it fails.

        Only what this copy created is removed: a copy that fails before its first creation
        (an existing name refused, a source gone or unreadable) leaves ``destination`` as it was.
        """
        made: list[str] = []
        try:
            copy_entry(source, destination, info, made)
            if durable:
                self.sync_tree(destination)
        except BaseException as error:
            if made:
                self._remove_partial(destination, error)
            raise

    def _remove_partial(self, path: str, error: BaseException) -> None:
        try:
            self.rmtree(path)
        except OSError as cleanup:  # the copy's own error is the one the caller must see
            error.add_note(f"the partial copy `{path}` could not be removed: {cleanup}")

    def sync_tree(self, path: str) -> None:
        """fsync every regular file and directory below ``path`` (and ``path`` itself), children first.

        Symlinks are skipped; a FIFO, socket or device has no data to sync and is never
        opened (the open of a FIFO would block).
        """
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            _sync_dir_tree(path)
        elif stat.S_ISREG(mode):
            _fsync_file(path)

    def fsync_dir(self, path: str) -> None:
        """fsync the directory ``path`` so its entries (creations, renames) are durable."""
        _fsync_dir(path)

    def sync_trees(self, paths: Sequence[str]) -> None:
        """``sync_tree`` of every path, a few at a time: concurrent fsyncs share the filesystem's journal commits."""
        _overlapped(self.sync_tree, paths)

    def fsync_dirs(self, paths: Sequence[str]) -> None:
        """``fsync_dir`` of every directory, overlapped like :meth:`sync_trees`."""
        _overlapped(_fsync_dir, paths)

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        time.sleep(seconds)

    def retry_until(self, probe: Callable[[], T | None], deadline_seconds: float) -> T | None:
        """Call ``probe`` until non-``None`` or the deadline passes (10 ms doubling to 0.5 s, final probe)."""
        deadline = time.monotonic() + deadline_seconds
        pause = _FIRST_PAUSE
        while True:
            result = probe()
            if result is not None:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sleep(min(pause, remaining))
            pause = min(pause * 2, _MAX_PAUSE)
