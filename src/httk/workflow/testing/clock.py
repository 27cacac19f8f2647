"""A fake clock for tests: time moves only when told to."""

from __future__ import annotations


class FakeClock:
    """A :class:`~httk.workflow.ports.Clock` that moves only when told (``sleep`` or ``advance``)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        # Monotonic time starts elsewhere, so code that mixes the two clocks shows up in tests.
        self._monotonic = 1_000.0

    def now(self) -> float:
        """Fake seconds since the epoch."""
        return self._now

    def monotonic(self) -> float:
        """Fake monotonic seconds; advances together with :meth:`now`."""
        return self._monotonic

    def sleep(self, seconds: float) -> None:
        """Advance time by ``seconds`` instead of waiting."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``."""
        if seconds < 0:
            raise ValueError("time cannot go backwards")
        self._now += seconds
        self._monotonic += seconds
