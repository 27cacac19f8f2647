"""``renameat2`` for the POSIX filesystem adapter: the no-replace rename's flag and the atomic exchange.

``renameat2`` is loaded from libc with ctypes on its first use (:func:`renameat2`,
so a command that renames nothing, such as ``workspace status``, never imports
ctypes); :mod:`.fs_posix` uses it for ``RENAME_NOREPLACE`` (its fenced rename) and
:func:`exchange_names` for ``RENAME_EXCHANGE``. Where the kernel or the filesystem
refuses a flag as unsupported, each falls back to plain calls, as their docstrings say.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
# Errors meaning "this kernel or filesystem cannot do this flag", not "the rename failed".
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


@functools.cache
def renameat2() -> Callable[..., int] | None:
    """The libc ``renameat2`` function, or ``None`` where libc does not export it (loaded once, when first asked)."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def last_errno() -> int:
    """The ``errno`` the last :func:`renameat2` call of this thread left (ctypes' private copy)."""
    import ctypes  # already imported by renameat2(), whose call this follows

    return ctypes.get_errno()


def _temp_sibling(path: str) -> str:
    """``<dir>/.<basename>.tmp.<random hex>``: hidden, unique, in the same directory as ``path``."""
    directory, name = os.path.split(path)
    # os.urandom, not secrets: the same kernel randomness without importing hmac and random at runner start-up.
    return os.path.join(directory, f".{name}.tmp.{os.urandom(8).hex()}")


def _os_error(code: int, path: str, other: str | None = None) -> OSError:
    """An ``OSError`` of the subclass Python maps ``code`` to (FileExistsError, ...)."""
    return OSError(code, os.strerror(code), path, None, other)


def exchange_names(renameat2: Callable[..., int] | None, first: str, second: str) -> None:
    """Swap two existing names with ``renameat2(RENAME_EXCHANGE)``; ``FileNotFoundError`` if one is missing.

    Where ``renameat2`` is missing or the kernel or filesystem refuses the flag as
    unsupported (EINVAL, ENOSYS, EOPNOTSUPP: old kernels, NFS, some FUSE
    filesystems) it falls back to three renames through a hidden temporary name,
    which is NOT atomic: a reader can find ``first`` missing for an instant, and a
    crash can leave it so.
    """
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
            return
        code = last_errno()
        if code not in _UNSUPPORTED:
            raise _os_error(code, first, second)
    for path in (first, second):
        if not os.path.lexists(path):
            raise _os_error(errno.ENOENT, path)
    parked = _temp_sibling(first)
    os.rename(first, parked)
    try:
        os.rename(second, first)
    except BaseException:
        os.rename(parked, first)
        raise
    os.rename(parked, second)
