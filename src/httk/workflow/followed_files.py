"""Following a file another program writes: the new complete lines since the last look.

Owns :class:`FollowedFile` (``ProcessSupervisor(follow=...)``, Bash ``httk_workflow_run
--follow``). Invariants: a file that exists when following starts is read from its
end at that moment, one created later from its beginning; a file replaced (new
inode) or truncated is read again from its beginning; one poll reads at most
:data:`CHUNK` bytes, so a fast writer cannot starve the supervision loop.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from httk.workflow.line_splitter import LineSplitter

CHUNK = 1 << 22
"""Most bytes one :meth:`FollowedFile.poll` reads."""


class FollowedFile:
    """The tail of one followed file; ``name`` is how its lines are labelled (the path as given)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path, self.lines = name, path, LineSplitter()
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        with contextlib.suppress(OSError):
            stat = path.stat()
            self.identity, self.offset = (stat.st_dev, stat.st_ino), stat.st_size

    def poll(self) -> tuple[bool, list[str]]:
        """(whether the file grew, the complete new lines)."""
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                lines: list[str] = []
                if (stat.st_dev, stat.st_ino) != self.identity or stat.st_size < self.offset:
                    # Replaced or truncated (a restarted program): everything in it is new.
                    lines, self.identity, self.offset = self.lines.flush(), (stat.st_dev, stat.st_ino), 0
                if stat.st_size <= self.offset:
                    return False, lines
                handle.seek(self.offset)
                data = handle.read(CHUNK)
        except OSError:
            return False, []
        self.offset += len(data)
        return bool(data), lines + self.lines.feed(data)
