"""The advisory lock that serialises the read-modify-writes of one attempt's documents.

A Bash handler may run bridge calls concurrently (``httk_workflow_spawn ... &`` then
``wait``), and every call is a process of its own that reads the attempt's draft
(``children/spawn.json``, ``transaction/manifest.json``) or the job's
``.httk-job/state.json``, changes it and replaces it. Without a lock two of them read
the same version and one update is lost. :class:`AttemptLock` is taken around each
such read-modify-write by :class:`~httk.workflow.outcome.OutcomeDraft` and
:class:`~httk.workflow.runtime.JobState`, which both the Python SDK and the Bash bridge
drive, so there is one lock discipline for both languages.

Why ``flock`` on a file in the attempt control directory is sound even when the
workspace is on NFS: the only processes that ever contend for it are the processes of
one attempt (the runner and the bridge calls its handler starts), and an attempt runs
on one host. The lock therefore only has to exclude processes of that one host, which
``flock`` does on a local filesystem and on NFS alike (Linux emulates it there with a
byte-range lock, or keeps it host-local with ``local_lock=flock``). It never has to
exclude another host: two hosts never run the same attempt, which the manager's marker
renames guarantee, not this lock. The state file lives in the payload, but the lock
for it is the attempt's too: only one attempt of a job runs at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator

#: The lock file's name in the attempt control directory (empty; only its lock matters).
LOCK_FILE = "attempt.lock"


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

    @property
    def path(self) -> str:
        return self._path

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for the block; blocks while another process holds it."""
        with self._mutex:
            if self._depth == 0:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fd, self._fd = self._fd, None
                    os.close(fd)  # closing the descriptor releases the lock
