"""The advisory lock that serialises the read-modify-writes of one attempt's documents.

A Bash handler may run bridge calls concurrently (``httk_workflow_spawn ... &`` then
``wait``), and every call is a process of its own that reads the attempt's draft
(``children/spawn.json``, ``transaction/manifest.json``) or the job's
``.httk-job/state.json``, changes it and replaces it. Without a lock two of them read
the same version and one update is lost. :class:`AttemptLock` is taken around each
such read-modify-write by :class:`~httk.workflow.outcome.OutcomeDraft` and
:class:`~httk.workflow.runtime.JobState`, which both the Python SDK and the Bash bridge
drive, so there is one lock discipline for both languages.

The lock file is host-local, never in the workspace: the operator guide promises that
the protocol takes no POSIX lock on the workspace filesystem (``nolock`` is fine), and on
an NFS mount with locking on Linux turns ``flock`` into a network lock that can fail
(``ENOLCK``) or hang while lockd is unreachable. A host-local file suffices because the
only processes that ever contend for it are those of one attempt (the runner and the
bridge calls its handler starts), and an attempt runs on one host; two hosts never run
the same attempt, which the manager's marker renames guarantee, not this lock. The file
lives in ``httk-workflow-locks-<uid>`` under ``$XDG_RUNTIME_DIR`` (when set and
writable) or else the temporary directory, named by the sha256 of the attempt control
directory's absolute path, and removed by the holder that releases it (none accumulate).
The state file lives in the payload, but the lock for it is
the attempt's too: only one attempt of a job runs at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import weakref
from collections.abc import Iterator

try:  # the built-in SHA-256: each Bash bridge call is a process, and hashlib would load OpenSSL into it
    from _sha256 import sha256
except ImportError:  # pragma: no cover - Python 3.12 renamed the module; hashlib is the portable fallback
    try:
        from _sha2 import sha256  # type: ignore[import-not-found, no-redef]
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment]

#: The per-user directory (under the runtime or temporary directory) that holds the lock files.
LOCK_DIRECTORY_PREFIX = "httk-workflow-locks-"


def _own_private_directory(path: str) -> bool:
    """Make ``path`` a 0700 directory of this user, or report that it is someone else's (or not a directory)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return False  # a symlink or another user's directory: never put our lock files there
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return True


def _temporary_root() -> str:
    """``$TMPDIR`` (or ``$TEMP``, ``$TMP``) when usable, else ``/tmp``: tempfile's choice, without its import.

    ``tempfile`` pulls in shutil and random, several milliseconds for every runner and
    bridge call that takes the lock, and probes by writing a file, which this does not need.
    """
    for variable in ("TMPDIR", "TEMP", "TMP"):
        root = os.environ.get(variable)
        if root and os.path.isabs(root) and os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK):
            return root
    return "/tmp"


def lock_directory() -> str:
    """The host-local directory of this user's attempt lock files, created 0700 on first use."""
    name = f"{LOCK_DIRECTORY_PREFIX}{os.getuid()}"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
        candidate = os.path.join(runtime, name)
        if _own_private_directory(candidate):
            return candidate
    candidate = os.path.join(_temporary_root(), name)
    if _own_private_directory(candidate):
        return candidate
    raise PermissionError(
        f"no private lock directory for the attempt lock: {candidate} is not a directory owned by this user; "
        "remove it or set XDG_RUNTIME_DIR to a private writable directory"
    )


def lock_path_for(control: str | os.PathLike[str]) -> str:
    """The host-local lock file of the attempt whose control directory is ``control``."""
    digest = sha256(os.path.abspath(os.fspath(control)).encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(lock_directory(), f"{digest}.lock")


#: Every live lock, so a forked child can drop the state it inherited (see ``_after_fork_in_child``).
_LOCKS: weakref.WeakSet[AttemptLock] = weakref.WeakSet()


class AttemptLock:
    """An exclusive ``flock`` on one file, re-entrant within the process (and shared by its threads).

    The file is opened at the outermost :meth:`held` and closed when it is left, so a
    long-lived process (the Bash bridge's co-process) keeps no descriptor between calls.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._mutex = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._generation = 0  # bumped in a forked child: a block entered before the fork owns nothing there
        _LOCKS.add(self)

    @classmethod
    def for_control(cls, control: str | os.PathLike[str]) -> AttemptLock:
        """The lock of the attempt whose control directory is ``control`` (its file is host-local)."""
        return cls(lock_path_for(control))

    @property
    def path(self) -> str:
        return self._path

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for the block; blocks while another process holds it."""
        with self._mutex:
            generation = self._generation
            if self._depth == 0:
                self._fd = self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                # A block entered before a fork owns nothing in the child: its reset dropped it.
                if generation == self._generation:
                    self._depth -= 1
                    if self._depth == 0 and self._fd is not None:
                        fd, self._fd = self._fd, None
                        # Unlinked while still held, so no file is left per attempt; a waiter that
                        # opened it meanwhile sees it gone and opens afresh (``_acquire``).
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(self._path)
                        os.close(fd)  # closing the descriptor releases the lock

    def _acquire(self) -> int:
        """Open and ``flock`` the lock file, again when the file locked was unlinked by its last holder."""
        while True:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                locked = os.fstat(fd)
                try:
                    current = os.stat(self._path)
                except FileNotFoundError:
                    current = None
            except BaseException:
                os.close(fd)
                raise
            if current is not None and (current.st_dev, current.st_ino) == (locked.st_dev, locked.st_ino):
                return fd
            os.close(fd)

    def _reset_after_fork(self) -> None:
        # A thread of the parent may have held the mutex at the fork; that thread does not exist
        # in the child, so the copied mutex would never be released. The inherited descriptor
        # shares the parent's open file description: closing it here leaves the parent's lock
        # alone, and the child takes the lock afresh (and waits for the parent) when it needs it.
        self._mutex = threading.RLock()
        self._depth = 0
        self._generation += 1
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _after_fork_in_child() -> None:
    for lock in list(_LOCKS):
        lock._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
