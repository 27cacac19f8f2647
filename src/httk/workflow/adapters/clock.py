"""The system clock adapter: wall time, monotonic time and sleeping on the real host.

It owns the one import of :mod:`time` outside the POSIX filesystem adapter, so every
other module receives time through the :class:`~httk.workflow.ports.Clock` port and
tests can substitute :class:`httk.workflow.testing.FakeClock`.
"""

from __future__ import annotations

import time


def local_time_text(epoch: float, format: str) -> str:
    """``epoch`` as this host's local time in ``time.strftime``'s ``format`` (a v1 run's name)."""
    return time.strftime(format, time.localtime(epoch))


class SystemClock:
    """:class:`~httk.workflow.ports.Clock` backed by :mod:`time`."""

    def now(self) -> float:
        """Seconds since the epoch (``time.time``)."""
        return time.time()

    def monotonic(self) -> float:
        """A clock that never goes backwards (``time.monotonic``)."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        time.sleep(seconds)
