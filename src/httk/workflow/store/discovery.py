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

import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import attrs

from ..domain.lifecycle import StateKind
from ..domain.placement import may_contain_matches, placement_matches
from ..ports import Filesystem
from .layout import Layout
from .markers import UNDECODABLE_PLACEMENT, Marker, MarkerNameError, undecodable

HEARTBEAT_EVERY = 512
#: The marker names the store writes: a tag of ``[a-z0-9._-]`` (checked for ``--`` apart), a lowercase
#: uuid, a canonical decimal priority short enough to be in range, a canonical base-36 generation short
#: enough to fit 63 bits, and a record reference of ``[0-9A-Za-z_~-]``. Every name it matches parses
#: (:meth:`Marker.parse`); a name it does not match is given to the parser, which has the last word.
_STORE_NAME = re.compile(
    r"(?:(?P<tag>[a-z0-9][a-z0-9._-]{0,47})--)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"\.p(?:0|-?[1-9][0-9]{0,17})\.g(?:0|[1-9a-z][0-9a-z]{0,11})\.[0-9A-Za-z_~-]+"
)
#: ``on_damage(code, path, message)``, as :meth:`.store.Store.iter_markers` calls it.
OnDamage = Callable[[str, str, str], None]


@attrs.frozen
class PassResult:
    markers: list[Marker]
    entries: int
    cycle_complete: bool


#: Parsed marker names a cursor remembers between passes. A short queue is walked again by
#: every tick; remembering its names spares re-parsing them (markers are immutable values).
#: Bounded, so a manager's memory follows its window, not the size of the queue.
PARSED_NAMES_KEPT = 4096


class _RootWalk:
    """A resumable sorted depth-first walk of one placement root."""

    def __init__(self, fs: Filesystem, kind: StateKind, base: str, root: str, prefixes: tuple[str, ...],
                 parsed: dict[tuple[str, str], Marker | None] | None = None) -> None:
        self._parsed = {} if parsed is None else parsed
        self._iter = self._walk(fs, kind, f"{base}/{root}", root, prefixes)

    def _marker(self, kind: StateKind, placement: str, name: str) -> Marker | None:
        """``Marker.parse`` of one name (``None``: not a marker name), remembered while the cache has room."""
        key = (placement, name)
        try:
            return self._parsed[key]
        except KeyError:
            pass
        try:
            marker: Marker | None = Marker.parse(kind, placement, name)
        except MarkerNameError:
            marker = None
        if len(self._parsed) >= PARSED_NAMES_KEPT:
            self._parsed.clear()
        self._parsed[key] = marker
        return marker

    def _walk(
        self, fs: Filesystem, kind: StateKind, directory: str, placement: str, prefixes: tuple[str, ...]
    ) -> Iterator[tuple[str, Marker | None]]:
        for name, is_dir in _listing(fs, directory, ordered=True):
            if is_dir:
                child = f"{placement}/{name}"
                if prefixes and not may_contain_matches(child, prefixes):
                    yield name, None
                    continue
                yield name, None
                yield from self._walk(fs, kind, f"{directory}/{name}", child, prefixes)
            elif not prefixes or placement_matches(placement, prefixes):
                yield name, self._marker(kind, placement, name)
            else:
                yield name, None

    def next(self) -> tuple[str, Marker | None] | None:
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
        self._parsed: dict[tuple[str, str], Marker | None] = {}

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
                walk = self._walks[root] = _RootWalk(self._fs, self._kind, self._base, root, self._prefixes,
                                                        self._parsed)
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

    @property
    def names_held(self) -> int:
        """How many parsed marker names this cursor keeps between passes (bounded by PARSED_NAMES_KEPT)."""
        return len(self._parsed)


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

    def names_held(self, kind: StateKind) -> int:
        """How many parsed marker names the cursor of ``kind`` keeps: what a manager's memory holds per kind."""
        return self._cursors[kind].names_held


def marker_name_problem(kind: StateKind, placement: str, name: str) -> str | None:
    """Why ``name`` is not a marker name (the parser's message), or ``None`` when it is one.

    The names the store writes are recognised without building a :class:`Marker`, which
    is what makes counting a million markers cheap; any other name is parsed.
    """
    match = _STORE_NAME.fullmatch(name)
    if match is not None and "--" not in (match["tag"] or ""):
        return None
    try:
        Marker.parse(kind, placement, name)
    except MarkerNameError as error:
        return str(error)
    return None


def walk_names(fs: Filesystem, layout: Layout, kind: StateKind, on_damage: OnDamage | None = None, *,
               prefixes: Sequence[str] = (), ordered: bool = True) -> Iterator[tuple[str, str]]:
    """``(placement, name)`` of every marker of one kind, exhaustively, in the sorted order of ``Store.iter_markers``.

    What ``iter_markers`` reports as damage is reported the same way and at the same
    point of the walk (``unparseable_name``: a name that does not parse, a file directly
    below the kind directory), but no :class:`Marker` is built: a caller that only
    counts, or parses the few it reads (:meth:`Marker.parse` of a name yielded here
    cannot fail), pays one listing per directory and one pattern match per marker.
    ``prefixes`` keeps the placements a manager serves (each marker once, however the
    prefixes nest). Not ``ordered``, each directory is streamed in the order it is
    listed, so the walk holds one open listing per level and no names at all: what a
    count that does not need the order uses.
    """
    clean = tuple(prefix.strip("/") for prefix in prefixes)
    yield from _walk_names(fs, kind, layout.kind_dir(kind), "", on_damage, clean, ordered)


def _walk_names(fs: Filesystem, kind: StateKind, directory: str, placement: str, on_damage: OnDamage | None,
                prefixes: tuple[str, ...], ordered: bool) -> Iterator[tuple[str, str]]:
    for name, is_dir in _listing(fs, directory, ordered=ordered):
        if is_dir:
            child = f"{placement}/{name}" if placement else name
            if undecodable(name):
                if on_damage is not None and (not prefixes or may_contain_matches(child, prefixes)):
                    on_damage("unparseable_name", f"{directory}/{name}", UNDECODABLE_PLACEMENT)
            elif may_contain_matches(child, prefixes):
                yield from _walk_names(fs, kind, f"{directory}/{name}", child, on_damage, prefixes, ordered)
        elif prefixes and not placement_matches(placement, prefixes):
            continue  # outside what the caller serves, damage included
        elif not placement:
            if on_damage is not None:
                on_damage("unparseable_name", f"{directory}/{name}", "a file directly below a kind directory")
        else:
            problem = marker_name_problem(kind, placement, name)
            if problem is None:
                yield placement, name
            elif on_damage is not None:
                on_damage("unparseable_name", f"{directory}/{name}", problem)


def _listing(fs: Filesystem, directory: str, *, ordered: bool) -> Iterator[tuple[str, bool]]:
    """``(name, is_dir)`` of every entry of ``directory``: as listed, or (``ordered``) sorted by name.

    Sorting needs the whole listing; only the names are kept while it is consumed, not the
    listing's entries with their paths (a flat placement of 100,000 ready markers held 39 MB
    of entries, its names about a third of that).
    """
    if not ordered:
        for entry in fs.scandir(directory):
            yield entry.name, entry.is_dir
        return
    names: list[str] = []
    subdirectories: set[str] = set()
    for entry in fs.scandir(directory):
        names.append(entry.name)
        if entry.is_dir:
            subdirectories.add(entry.name)
    names.sort()
    for name in names:
        yield name, name in subdirectories
