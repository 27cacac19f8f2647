"""The POSIX adapter's tree copy and tree sync, in few system calls.

:func:`copy_entry` makes what ``shutil.copytree(symlinks=True)`` (``copy2`` per file)
makes: the same names and bytes, and for every file, directory and link the
source's permission bits (setuid, setgid and sticky included; a link has none of its
own on Linux), modification time and extended attributes; a link is copied as a
link, never followed. A regular file costs ten calls (open, fstat, open of the copy,
one ``sendfile`` (to the size it had when opened), ``flistxattr``, ``futimens``, ``fchmod``, two closes)
where ``copy2`` makes about twenty-five and much more Python around them; a
directory a ``mkdir``, its listing, ``utimensat`` and ``listxattr`` after its entries
(whose creation would change its time), and its ``chmod`` once the whole copy is made:
every directory stays private and writable while the copy fills, so a copy that fails
half-way (a source directory may be read-only) can still be removed.

Two differences from shutil, both refusals: a name that is neither a regular file, a
directory nor a link (a FIFO, socket or device) is refused before it is opened
(``shutil`` opens a device and reads it, and ``/dev/zero`` never ends), and the first
error ends the copy, so the caller removes one partial copy. Access times are the
source's before it is read (the read itself may move the source's).
"""

from __future__ import annotations

import errno
import os
import stat

#: A source file is opened without following a link (a name swapped for one since the listing is
#: refused) and without blocking (a name swapped for a FIFO is seen by fstat, never waited on).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The copy: a new name only. Created private; its mode is set to the source's once it is written.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: What ``sendfile`` is asked for at once (as shutil does: large, so one call copies a small file).
_BLOCK = 1 << 23
#: Extended attributes that cannot be copied are skipped, as shutil skips them.
_XATTR_SKIPPED = (errno.EPERM, errno.ENOTSUP, errno.ENODATA, errno.EINVAL, errno.EACCES)


def copy_entry(source: str, target: str, info: os.stat_result, made: list[str] | None = None) -> None:
    """Copy the file, link or tree ``source`` (whose ``lstat`` is ``info``) to the new name ``target``.

    ``target`` is appended to ``made`` once this copy has created it: a copy that fails
    before then (a source that vanished, a FIFO, a name already taken) made nothing there.
    """
    if stat.S_ISDIR(info.st_mode):
        modes: list[tuple[str, int]] = []
        _copy_dir(source, target, info, modes, made)
        # Children before parents (the order they were finished in): a parent made read-only
        # or untraversable first would refuse the chmod of what is below it.
        for path, mode in modes:
            os.chmod(path, mode)
    elif stat.S_ISLNK(info.st_mode):
        _copy_link(source, target, info, made)
    elif stat.S_ISREG(info.st_mode):
        _copy_file(source, target, made)
    else:
        raise _special(source, info.st_mode)


def _copy_dir(source: str, target: str, info: os.stat_result, modes: list[tuple[str, int]],
              made: list[str] | None = None) -> None:
    """Copy the tree ``source`` to ``target``; its directories' modes are appended to ``modes``, deepest first."""
    os.mkdir(target, 0o700)  # private while the copy fills; the caller sets the source's mode at the end
    if made is not None:
        made.append(target)
    with os.scandir(source) as entries:
        for entry in entries:
            into = f"{target}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                _copy_dir(entry.path, into, entry.stat(follow_symlinks=False), modes)
            elif entry.is_symlink():
                _copy_link(entry.path, into, entry.stat(follow_symlinks=False))
            elif entry.is_file(follow_symlinks=False):
                _copy_file(entry.path, into)
            else:
                raise _special(entry.path, entry.stat(follow_symlinks=False).st_mode)
    # As shutil.copystat: times, then attributes, then the mode (which may take the write bit
    # away, so it waits for the whole copy; a chmod does not move a directory's times).
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    _copy_xattrs(source, target, follow=True)
    modes.append((target, stat.S_IMODE(info.st_mode)))


def _copy_link(source: str, target: str, info: os.stat_result, made: list[str] | None = None) -> None:
    os.symlink(os.readlink(source), target)
    if made is not None:
        made.append(target)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)
    _copy_xattrs(source, target, follow=False)


def _copy_file(source: str, target: str, made: list[str] | None = None) -> None:
    src = os.open(source, _READ)
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode):
            raise _special(source, info.st_mode)
        dst = os.open(target, _CREATE, 0o600)
        if made is not None:
            made.append(target)
        try:
            _copy_bytes(src, dst, info.st_size)
            os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))
            _copy_xattrs(src, dst, follow=True)
            os.chmod(dst, stat.S_IMODE(info.st_mode))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_bytes(src: int, dst: int, size: int) -> None:
    """Every byte of ``src`` (``size`` long when opened) to ``dst``: in the kernel (``sendfile``), else read and write.

    The copy ends at end of file, or once ``size`` bytes are copied: the copy of a file
    is the file as it was opened, and a small one then costs one ``sendfile``, not a
    second that finds the end.
    """
    offset = 0
    try:
        while True:
            sent = os.sendfile(dst, src, offset, _BLOCK)
            if sent == 0:
                return
            offset += sent
            if offset >= size > 0:
                return
    except OSError as error:
        # A filesystem that cannot sendfile says so on the first call; copy by hand from there.
        if offset or error.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    while chunk := os.pread(src, 1 << 20, offset):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        offset += len(chunk)


def _copy_xattrs(source: str | int, target: str | int, *, follow: bool) -> None:
    """The extended attributes of ``source`` onto ``target`` (paths or descriptors), those shutil copies."""
    try:
        names = os.listxattr(source, follow_symlinks=follow)
    except OSError as error:
        if error.errno not in (errno.ENOTSUP, errno.ENODATA, errno.EINVAL):
            raise
        return
    for name in names:
        try:
            os.setxattr(target, name, os.getxattr(source, name, follow_symlinks=follow), follow_symlinks=follow)
        except OSError as error:
            if error.errno not in _XATTR_SKIPPED:
                raise


def _special(path: str, mode: int) -> OSError:
    """The refusal of a name a copy never opens, in shutil's words for a FIFO."""
    import shutil  # only on this path: shutil is a cost every command would pay at import

    kind = next((word for test, word in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"),
                                         (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
                 if test(mode)), "special file")
    return shutil.SpecialFileError(f"`{path}` is a {kind}")


def fsync_file(path: str) -> None:
    """fsync the regular file ``path`` (opened without following a link or blocking)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir_tree(path: str) -> None:
    """fsync every regular file and directory below the directory ``path``, then ``path``: one listing each."""
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                sync_dir_tree(entry.path)
            elif entry.is_file(follow_symlinks=False):
                fsync_file(entry.path)
    fsync_dir(path)


def fsync_dir(path: str) -> None:
    """fsync the directory ``path`` so its entries (creations, renames) are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as error:
        # Some filesystems (several network and FUSE ones) refuse fsync on a directory;
        # their rename is already as durable as they can make it.
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)
