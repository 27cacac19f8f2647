"""Two actors on one in-memory filesystem, interleaved deterministically, one filesystem call at a time.

A :class:`Turnstile` runs each actor in its own thread and lets exactly one of
them make its next filesystem call, following a schedule ``[(actor, calls),
...]``: "A makes 7 calls, then B makes 3, then A runs to its end, then B". An
actor that ends early passes its turn on. Every actor reaches the filesystem
through its own :class:`StepFs`, so a schedule is the whole interleaving, and
sweeping the first two counts over every value reaches every moment at which
one applier can be overtaken by another (the races of a mistaken lease expiry).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from httk.workflow.store.workspaces import Ports
from httk.workflow.testing import InMemoryFilesystem

#: Calls enough for "the rest" of any actor here.
REST = 10**9


class Turnstile:
    """Grants filesystem calls to one actor at a time, as a schedule says."""

    def __init__(self, schedule: Sequence[tuple[str, int]]) -> None:
        self._schedule = list(schedule)
        self._cond = threading.Condition()
        self._done: set[str] = set()
        self._phase = -1
        self._left = 0
        self.calls: dict[str, int] = {}
        with self._cond:
            self._advance()

    def _advance(self) -> None:
        self._phase += 1
        while self._phase < len(self._schedule) and (
                self._schedule[self._phase][0] in self._done or self._schedule[self._phase][1] <= 0):
            self._phase += 1
        self._left = self._schedule[self._phase][1] if self._phase < len(self._schedule) else REST
        self._cond.notify_all()

    def _turn(self) -> str | None:
        return self._schedule[self._phase][0] if self._phase < len(self._schedule) else None

    def step(self, actor: str) -> None:
        """Wait for ``actor``'s turn, then count one call."""
        with self._cond:
            while self._turn() not in (actor, None):
                if not self._cond.wait(timeout=10):
                    raise AssertionError(f"{actor} waited 10 s for its turn: the schedule is stuck")
            self.calls[actor] = self.calls.get(actor, 0) + 1
            if self._turn() == actor:
                self._left -= 1
                if self._left == 0:
                    self._advance()

    def finished(self, actor: str) -> None:
        with self._cond:
            self._done.add(actor)
            if self._turn() == actor:
                self._advance()

    def run(self, actors: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run every actor to its end; each one's return value, or the exception it raised."""
        results: dict[str, Any] = {}

        def body(name: str, call: Callable[[], Any]) -> None:
            try:
                results[name] = call()
            except BaseException as error:  # reported to the test, never lost in the thread
                results[name] = error
            finally:
                self.finished(name)

        threads = [threading.Thread(target=body, args=item, daemon=True) for item in actors.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "an actor did not finish"
        return results


class StepFs:
    """One actor's view of a shared in-memory filesystem: every call waits for that actor's turn."""

    def __init__(self, fs: InMemoryFilesystem, turnstile: Turnstile | None, actor: str) -> None:
        self._fs, self._actor = fs, actor
        self.turnstile = turnstile
        #: Called with the method name and arguments before each call (a test's way in mid-operation).
        self.hook: Callable[[str, tuple[Any, ...]], None] | None = None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._fs, name)
        if not callable(target) or name.startswith("_"):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.turnstile is not None:
                self.turnstile.step(self._actor)
            if self.hook is not None:
                self.hook(name, args)
            result = target(*args, **kwargs)
            if name == "scandir":  # a lazy listing is read in full inside the turn it was granted
                result = iter(list(result))
            return result

        return call


def actor_ports(ports: Ports, actor: str) -> tuple[Ports, StepFs]:
    """Ports whose filesystem is ``actor``'s :class:`StepFs` (no turnstile until one is set)."""
    step = StepFs(ports.fs, None, actor)
    return Ports(fs=step, clock=ports.clock, ids=ports.ids), step  # type: ignore[arg-type]
