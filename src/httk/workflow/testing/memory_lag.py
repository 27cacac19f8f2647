"""The reader-lag model of the in-memory filesystem: what a lagging NFS client sees.

A lagging view is one client with two windows. Within ``lag`` seconds of being
linked a name is hidden (a negative lookup cache). Within ``stale`` seconds of
being unlinked — renamed away, removed, or replaced by a rename over it — a name
the view could have seen (it had been linked for ``lag`` seconds) is still seen,
with the inode it named (a positive lookup cache), and a file that grew within
``stale`` seconds shows the size it had then (an attribute cache). A client sees
its own changes at once (close-to-open consistency), so neither window applies to
what the view itself linked, unlinked or appended. Every effect ends when its
window has passed, so a reader that waits out the visibility deadline sees the
truth. Mutations never lag. Only the stdlib is imported.
"""

from __future__ import annotations

import bisect

#: (inode it named, time linked, time unlinked, client that unlinked it)
_Gone = tuple[int, float, float, int]
_PER_NAME = 4


class LagHistory:
    """What every view of one tree shares: recently unlinked names and recent file growth.

    Records are kept for the longest stale window of any view (``window``) and
    dropped after it; with no stale view nothing is recorded at all. Times are
    the clock's monotonic seconds; clients are small integers (0: the first view).
    """

    def __init__(self) -> None:
        self.window = 0.0
        # directory inode -> name -> the inodes it named lately (newest last), names oldest first
        self._gone: dict[int, dict[str, list[_Gone]]] = {}
        # file inode -> (times of appends, size before each, size after each, client of each), oldest first
        self._growth: dict[int, tuple[list[float], list[int], list[int], list[int]]] = {}

    def widen(self, stale: float) -> None:
        """A view with this stale window exists: keep records at least that long."""
        self.window = max(self.window, stale)

    def clear(self) -> None:
        """After a crash no client has a cache of the lost tree."""
        self._gone.clear()
        self._growth.clear()

    # -- recording (called by mutations of the true tree) ------------------------------------
    def unlinked(self, directory: int, name: str, inode: int, born: float | None, now: float, client: int) -> None:
        """``name`` of ``directory`` (linked at ``born``; ``None``: long ago) stopped naming ``inode``."""
        if self.window <= 0:
            return
        gone = self._gone.setdefault(directory, {})
        # Re-insert at the end, so the dict stays in time order. A few inodes per name: one that
        # lived shorter than a view's lag was never seen by it, which then still shows the one before.
        records = gone.pop(name, [])[-(_PER_NAME - 1) :]
        records.append((inode, float("-inf") if born is None else born, now, client))
        gone[name] = records
        while gone:
            oldest = next(iter(gone))
            if now - gone[oldest][-1][2] <= self.window:
                break
            del gone[oldest]

    def grew(self, inode: int, before: int, after: int, now: float, client: int) -> None:
        """``client`` appended to ``inode``, from ``before`` to ``after`` bytes."""
        if self.window <= 0:
            return
        times, befores, afters, clients = self._growth.setdefault(inode, ([], [], [], []))
        times.append(now)
        befores.append(before)
        afters.append(after)
        clients.append(client)
        expired = bisect.bisect_left(times, now - self.window)
        if expired > 64:  # drop in batches: the lists stay short without a pop per append
            for column in (times, befores, afters, clients):
                del column[:expired]

    # -- what a view sees --------------------------------------------------------------------
    @staticmethod
    def _seen(record: _Gone, now: float, lag: float, stale: float, client: int) -> bool:
        """Whether a client still shows an unlinked name: it had been visible, went recently, and not by its hand."""
        _, born, unlinked, by = record
        return by != client and unlinked - born >= lag and now - unlinked < stale

    def ghost(self, directory: int, name: str, now: float, lag: float, stale: float, client: int) -> int | None:
        """The inode an unlinked name still shows to a view, else ``None``."""
        if stale <= 0:
            return None
        for record in reversed(self._gone.get(directory, {}).get(name, [])):
            if self._seen(record, now, lag, stale, client):
                return record[0]
        return None

    def ghost_names(self, directory: int, now: float, lag: float, stale: float, client: int) -> list[str]:
        """Names of ``directory`` a view still shows although they are unlinked."""
        if stale <= 0:
            return []
        gone = self._gone.get(directory, {})
        return [name for name, records in gone.items() if any(self._seen(r, now, lag, stale, client) for r in records)]

    def length(self, inode: int, current: int, now: float, stale: float, client: int) -> int:
        """The size a view sees: before the first append by another client in the last ``stale`` seconds.

        The view's own appends since then are seen whole, as far as they reach.
        """
        record = self._growth.get(inode)
        if record is None or stale <= 0:
            return current
        times, befores, afters, clients = record
        other: int | None = None
        own = 0
        for index in range(bisect.bisect_right(times, now - stale), len(times)):
            if clients[index] == client:
                own = max(own, afters[index])
            elif other is None:
                other = befores[index]
        return min(current, max(current if other is None else other, own))
