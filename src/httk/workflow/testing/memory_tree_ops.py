"""Whole-tree operations of the in-memory filesystem: remove, copy and sync a tree.

Split from :mod:`.memory_fs` (the port's primitives) to keep both short. Each operation
is built from those primitives, one counted primitive per entry, so a crash armed
during a copy, a removal or a sync can fall between any two of them, as on disk.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .memory_tree import _DIR, _FIFO, _FILE, _LINK, SimulatedCrash, _error, _Inode, _norm

if TYPE_CHECKING:
    from .memory_fs import InMemoryFilesystem


class TreeOperations:
    """``rmtree``, ``copy_tree``, ``sync_tree``, ``sync_trees`` and ``fsync_dirs`` over the primitives."""

    def rmtree(self: InMemoryFilesystem, path: str) -> None:
        """Remove a file, symlink or tree, one primitive per entry; a missing one is fine."""
        node = self._visible(path, view=False)
        if node is None:
            return
        if node.kind != _DIR:
            self.remove(path)
            return
        for name in list(node.entries):
            self.rmtree(posixpath.join(_norm(path), name))
        self.rmdir(path)

    def copy_tree(self: InMemoryFilesystem, source: str, destination: str, *, durable: bool,
                  staged: bool = False) -> None:
        """Copy a file, symlink or tree to ``destination``, which must not exist; appears all at once.

        ``staged``: copied at ``destination`` itself, the way the POSIX adapter does.
        """
        destination = _norm(destination)
        if self._visible(destination, view=False) is not None:
            raise _error(errno.EEXIST, destination)
        node = self._existing(source, follow=False)
        directory, name = posixpath.split(destination)
        self._ensure_dir(directory, durable=durable)
        target = destination if staged else posixpath.join(directory, f".{name}.tmp.{next(self._state.tokens):016x}")
        try:
            self._copy(node, target, source)
            if durable:
                self.sync_tree(target)
            if not staged:
                self._rename_raw(target, destination, replace=False)
        except BaseException:
            with contextlib.suppress(OSError, SimulatedCrash):
                self.rmtree(target)
            raise
        if durable and not staged:
            self._fsync_dir_inode(self._directory(directory))

    def _copy(self: InMemoryFilesystem, node: _Inode, path: str, source: str, top: bool = True) -> None:
        if node.kind == _FIFO:
            # As shutil.copy2 (a file) and copytree (inside a tree) refuse it: never opened, never copied.
            problem = f"`{source}` is a named pipe"
            raise shutil.SpecialFileError(problem) if top else shutil.Error([(source, path, problem)])
        if node.kind == _LINK:
            self._new_entry(path, node.kind, "create", node.mode, node.target)
            return
        if node.kind == _FILE:
            copy = self._create_file(path)
            self._write(copy, bytes(node.data))
        else:
            copy = self._mkdir(path)
            for name, number in list(node.entries.items()):
                self._copy(self._state.inodes[number], posixpath.join(path, name), posixpath.join(source, name),
                           False)
        copy.mode, copy.mtime = node.mode, node.mtime  # as shutil.copy2 / copytree keep them

    def sync_tree(self: InMemoryFilesystem, path: str) -> None:
        """fsync every file and directory below ``path`` (and ``path`` itself), children first."""
        self._sync_inode(self._existing(path, follow=False))

    def _sync_inode(self: InMemoryFilesystem, node: _Inode) -> None:
        if node.kind == _FILE:
            self._fsync_file(node)
        elif node.kind == _DIR:
            for number in list(node.entries.values()):
                self._sync_inode(self._state.inodes[number])
            self._fsync_dir_inode(node)

    def sync_trees(self: InMemoryFilesystem, paths: Sequence[str]) -> None:
        """``sync_tree`` of each path in order (one primitive each fsync, so a crash can fall between)."""
        for path in paths:
            self.sync_tree(path)

    def fsync_dirs(self: InMemoryFilesystem, paths: Sequence[str]) -> None:
        """``fsync_dir`` of each directory in order."""
        for path in paths:
            self.fsync_dir(path)
