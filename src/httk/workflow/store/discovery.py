"""Bounded streaming discovery: one active kind's tree at a time, under budgets.

Each kind keeps, in memory only, a rotation of its top-level placement roots and
a resumable depth-first walk per root. A directory is listed once per cycle
(``scandir``, sorted) and consumed across passes, so a pass touches at most
``discovery_budget`` entries and yields at most ``maximum_pass_markers``
markers; the next pass continues where this one stopped, and a big root can
never starve a small sibling. A marker renamed away under the walk becomes a
miss. Spec: 000 "Scheduling".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

import attrs

from ..domain.lifecycle import StateKind
from ..domain.scheduling import may_contain_matches, placement_matches
from ..ports import Entry, Filesystem
from .layout import Layout
from .markers import Marker, MarkerNameError

HEARTBEAT_EVERY = 512


@attrs.frozen
class PassResult:
    markers: list[Marker]
    entries: int
    cycle_complete: bool


class _RootWalk:
    """A resumable sorted depth-first walk of one placement root."""

    def __init__(self, fs: Filesystem, kind: StateKind, base: str, root: str, prefixes: tuple[str, ...]) -> None:
        self._iter = self._walk(fs, kind, f"{base}/{root}", root, prefixes)

    @staticmethod
    def _walk(
        fs: Filesystem, kind: StateKind, directory: str, placement: str, prefixes: tuple[str, ...]
    ) -> Iterator[tuple[Entry, Marker | None]]:
        entries = sorted(fs.scandir(directory), key=lambda entry: entry.name)
        for entry in entries:
            if entry.is_dir:
                child = f"{placement}/{entry.name}"
                if prefixes and not may_contain_matches(child, prefixes):
                    yield entry, None
                    continue
                yield entry, None
                yield from _RootWalk._walk(fs, kind, entry.path, child, prefixes)
            elif not prefixes or placement_matches(placement, prefixes):
                try:
                    yield entry, Marker.parse(kind, placement, entry.name)
                except MarkerNameError:
                    yield entry, None
            else:
                yield entry, None

    def next(self) -> tuple[Entry, Marker | None] | None:
        return next(self._iter, None)


class KindCursor:
    """The in-memory resume state of one kind: root rotation and per-root walks."""

    def __init__(self, fs: Filesystem, layout: Layout, kind: StateKind, prefixes: tuple[str, ...]) -> None:
        self._fs = fs
        self._kind = kind
        self._base = layout.kind_dir(kind)
        self._prefixes = tuple(prefix.strip("/") for prefix in prefixes)
        self._roots: deque[str] = deque()
        self._walks: dict[str, _RootWalk] = {}
        self._cycle_roots_left = 0

    def _refresh_roots(self) -> None:
        names = sorted(entry.name for entry in self._fs.scandir(self._base) if entry.is_dir)
        if self._prefixes:
            names = [name for name in names if may_contain_matches(name, self._prefixes)]
        self._roots = deque(names)
        self._walks = {}
        self._cycle_roots_left = len(names)

    def scan(
        self, *, entry_budget: int, marker_budget: int, heartbeat: Callable[[], None] | None = None
    ) -> PassResult:
        """One bounded pass; ``cycle_complete`` when every root was walked to its end."""
        markers: list[Marker] = []
        entries = 0
        cycle_complete = False
        if not self._roots:
            self._refresh_roots()
            if not self._roots:
                return PassResult(markers, entries, True)
        while entries < entry_budget and len(markers) < marker_budget:
            root = self._roots[0]
            walk = self._walks.get(root)
            if walk is None:
                walk = self._walks[root] = _RootWalk(self._fs, self._kind, self._base, root, self._prefixes)
            step = walk.next()
            if step is None:
                # This root is done for the cycle; rotate it out.
                self._roots.popleft()
                del self._walks[root]
                self._cycle_roots_left -= 1
                if not self._roots:
                    cycle_complete = True
                    break
                continue
            entries += 1
            if heartbeat is not None and entries % HEARTBEAT_EVERY == 0:
                heartbeat()
            _entry, marker = step
            if marker is not None:
                markers.append(marker)
                # Round robin: after each marker give the next root its turn, so a
                # huge root shares the window with its siblings.
                if len(self._roots) > 1:
                    self._roots.rotate(-1)
        return PassResult(markers, entries, cycle_complete)

    def reset(self) -> None:
        self._roots = deque()
        self._walks = {}


class Discovery:
    """Per-kind cursors of one manager."""

    def __init__(self, fs: Filesystem, layout: Layout, prefixes: tuple[str, ...] = ()) -> None:
        self._cursors = {kind: KindCursor(fs, layout, kind, prefixes) for kind in StateKind}

    def scan(
        self,
        kind: StateKind,
        *,
        entry_budget: int = 4096,
        marker_budget: int = 256,
        heartbeat: Callable[[], None] | None = None,
    ) -> PassResult:
        return self._cursors[kind].scan(entry_budget=entry_budget, marker_budget=marker_budget, heartbeat=heartbeat)

    def reset(self, kind: StateKind) -> None:
        self._cursors[kind].reset()
