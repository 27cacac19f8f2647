"""The one place progress is drawn: a one-line live status on stderr, only when stderr is a terminal.

Every long command (``collect``, ``workspace fsck``, ``workspace gc``, ``transfer``,
``workspace report``, ``manager run``, a bulk ``job submit``) asks :func:`progress`
for a :class:`Progress` and reports to it; when stderr is not a terminal, or the
command prints ``--json``, it gets a :class:`Progress` that draws nothing, so a
piped or scripted run sees exactly the output it saw before. The bar is tqdm's
(imported only once a bar is really drawn, so start-up of other commands never pays
for it); the line is cleared when the work ends, so what the command prints after it
starts on a clean line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO


def enabled(*, as_json: bool = False, stream: TextIO | None = None) -> bool:
    """Whether progress is drawn: never with ``--json``, and only on a terminal that is not ``TERM=dumb``."""
    stream = sys.stderr if stream is None else stream
    if as_json or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _columns(stream: TextIO) -> int:
    """The width the terminal behind ``stream`` reports (0 when it reports none)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


class Progress:
    """What a long operation reports to: steps done, and a short status text beside them."""

    def __init__(self, bar: Any = None) -> None:
        self._bar = bar

    @property
    def drawn(self) -> bool:
        """Whether anything reaches the terminal (the no-op progress draws nothing)."""
        return self._bar is not None

    def update(self, steps: int = 1) -> None:
        """Count ``steps`` more done."""
        if self._bar is not None and steps:
            self._bar.update(steps)

    def total(self, total: int | None) -> None:
        """Set (or correct) how many steps there are, once it is known."""
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def label(self, text: str) -> None:
        """Replace the label in front (the phase the work is in)."""
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)

    def clear(self) -> None:
        """Take the line off the screen so a line printed now starts clean (the next update redraws it)."""
        if self._bar is not None:
            self._bar.clear()

    def status(self, text: str) -> None:
        """Replace the status text after the count (``running 2 · ready 10 · done 5``)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)


@contextlib.contextmanager
def progress(
    label: str, *, total: int | None = None, unit: str = "it", as_json: bool = False, stream: TextIO | None = None,
    status_only: bool = False,
) -> Iterator[Progress]:
    """A :class:`Progress` drawing on ``stream`` (stderr) while the block runs, or a silent one.

    ``status_only`` draws just the label and the status text (``manager run``'s live
    line), without a count or a rate of its own.
    """
    stream = sys.stderr if stream is None else stream
    if not enabled(as_json=as_json, stream=stream):
        yield Progress()
        return
    from tqdm import tqdm  # only once a bar is drawn: other commands never import it

    bar_format = "{desc}{postfix}" if status_only else None
    # A terminal that reports no size (a fresh pty, some batch consoles) would make tqdm
    # hide every line (0 rows) or cut it to nothing (0 columns): draw 80x24 there instead.
    sized = _columns(stream) > 0
    bar = tqdm(total=total, desc=label, unit=unit, file=stream, leave=False, dynamic_ncols=sized,
               ncols=None if sized else 80, nrows=None if sized else 24, bar_format=bar_format, mininterval=0.2)
    try:
        yield Progress(bar)
    finally:
        bar.refresh()  # the final count, which the redraw interval may have skipped, before the line is cleared
        bar.close()


class Rate:
    """Completions per minute over a sliding window, for a status line's throughput."""

    def __init__(self, window_seconds: float = 60.0) -> None:
        self._window = window_seconds
        self._samples: list[tuple[float, int]] = []

    def observe(self, done: int, now: float | None = None) -> float:
        """Record the running total ``done`` and return the rate per minute over the window."""
        now = time.monotonic() if now is None else now
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window:
            self._samples.pop(0)
        first_time, first_done = self._samples[0]
        span = now - first_time
        return 0.0 if span <= 0 else (done - first_done) * 60.0 / span


class StatusLine:
    """A status line shown on demand and ended explicitly, for work that reports events (``transfer``).

    The same line :func:`progress` draws with ``status_only``; it is opened at the first
    :meth:`show` and drawn only when :func:`enabled`.
    """

    def __init__(self, label: str, *, as_json: bool = False, stream: TextIO | None = None) -> None:
        self._label = label
        self._stream = sys.stderr if stream is None else stream
        self._active = enabled(as_json=as_json, stream=self._stream)
        self._context: contextlib.ExitStack | None = None
        self._progress: Progress | None = None

    def show(self, text: str) -> None:
        """Replace the status text (opening the line first)."""
        if not self._active:
            return
        if self._progress is None:
            self._context = contextlib.ExitStack()
            self._progress = self._context.enter_context(
                progress(self._label, stream=self._stream, status_only=True))
        self._progress.status(text)

    def end(self) -> None:
        """Clear the line; a later :meth:`show` opens it again."""
        if self._context is not None:
            self._context.close()
        self._context = self._progress = None


#: How often the manager's line is redrawn, and how often it recounts the ready jobs (a walk of that tree).
MANAGER_REDRAW_SECONDS = 0.5
MANAGER_RECOUNT_SECONDS = 5.0


@contextlib.contextmanager
def manager_line(manager: Any, *, as_json: bool = False, stream: TextIO | None = None) -> Iterator[None]:
    """``manager run``'s live line while ``manager`` runs: running, ready, done and jobs finished per minute.

    Running and done are the manager's own (its attempts, the jobs it made terminal);
    ready is recounted from the ready tree every few seconds. Its banner and summary
    lines are printed with the line taken off the screen first. ``as_json``
    (``--json-logs``) keeps the console a stream of JSON lines: no live line.
    """
    stream = sys.stderr if stream is None else stream
    if not enabled(as_json=as_json, stream=stream):
        yield
        return
    from ..domain.lifecycle import StateKind

    previous_hook, previous_out = manager.on_iteration, manager.out
    rate = Rate()
    clock = {"drawn": 0.0, "counted": 0.0, "ready": 0}
    with progress(f"manager {manager.id}", stream=stream, status_only=True) as line:

        def draw() -> None:
            now = time.monotonic()
            if now - clock["counted"] >= MANAGER_RECOUNT_SECONDS:
                clock["ready"] = sum(1 for _ in manager.handle.store.iter_markers(StateKind.READY))
                clock["counted"] = now
            if now - clock["drawn"] >= MANAGER_REDRAW_SECONDS:
                finished = manager.ctx.finished
                done = sum(finished.values())
                parts = [f"running {len(manager.running)}", f"ready {clock['ready']}", f"done {done}"]
                parts += [f"{kind} {count}" for kind, count in sorted(finished.items())]
                line.status(" · ".join(parts) + f" · {rate.observe(done, now):.1f} jobs/min")
                clock["drawn"] = now
            if previous_hook is not None:
                previous_hook()

        def out(text: str) -> None:
            line.clear()
            previous_out(text)

        manager.on_iteration, manager.out = draw, out
        try:
            yield
        finally:
            manager.on_iteration, manager.out = previous_hook, previous_out
