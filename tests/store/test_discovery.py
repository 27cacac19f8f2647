"""Discovery with placement prefixes that are prefixes of each other, and a root removed mid-walk."""

from __future__ import annotations

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.submission import submit
from httk.workflow.store.discovery import Discovery
from httk.workflow.testing import memory_workspace


def placements(handle, prefixes, **budget):
    discovery = Discovery(handle.fs, handle.layout, prefixes)
    found = []
    for _ in range(50):
        result = discovery.scan(StateKind.SUBMITTED, **budget)
        found += [marker.placement for marker in result.markers]
        if result.cycle_complete:
            break
    return sorted(found)


def test_prefix_a_does_not_match_ab_but_matches_a_slash_b():
    _ports, handle, _ = memory_workspace(placement="a")
    for placement in ("ab", "a/b", "a/bc", "b/a", "a b/ü"):
        submit(handle, "/src/p", placement)
    assert placements(handle, ("a",)) == ["a", "a/b", "a/bc"]
    assert placements(handle, ("a/b",)) == ["a/b"]
    assert placements(handle, ("a/b", "a")) == ["a", "a/b", "a/bc"]
    assert placements(handle, ("a b",), entry_budget=1, marker_budget=1) == ["a b/ü"]
    assert len(placements(handle, ())) == 6


def test_a_root_removed_in_the_middle_of_a_walk_is_a_miss_not_an_error():
    ports, handle, _ = memory_workspace(jobs=3, placement="x/y")
    submit(handle, "/src/p", "z")
    discovery = Discovery(handle.fs, handle.layout)
    first = discovery.scan(StateKind.SUBMITTED, entry_budget=2, marker_budget=1)
    assert len(first.markers) == 1
    ports.fs.rmtree(f"{handle.layout.kind_dir(StateKind.SUBMITTED)}/x")
    seen = []
    for _ in range(10):
        result = discovery.scan(StateKind.SUBMITTED, entry_budget=2, marker_budget=1)
        seen += result.markers
        if result.cycle_complete:
            break
    assert result.cycle_complete
    assert {marker.placement for marker in seen} <= {"x/y", "z"}


def test_repeated_cycles_see_new_names_and_the_parse_memory_stays_bounded(monkeypatch):
    # The cursor remembers parsed names between cycles (a short ready queue is walked by every
    # tick); a renamed marker is a new name, seen as such, and the memory never outgrows its bound.
    from httk.workflow.store import discovery as module

    monkeypatch.setattr(module, "PARSED_NAMES_KEPT", 3)
    ports, handle, markers = memory_workspace(jobs=5, placement="q")
    discovery = Discovery(handle.fs, handle.layout)

    def cycle():
        found = []
        while True:
            result = discovery.scan(StateKind.SUBMITTED)
            found += result.markers
            if result.cycle_complete:
                return found

    assert set(cycle()) == set(markers)
    assert discovery.names_held(StateKind.SUBMITTED) <= 3
    old = markers[0]
    new = type(old)(old.kind, old.placement, old.key, 7, old.generation, old.ref)
    ports.fs.rename(handle.store.marker_path(old), handle.store.marker_path(new), durable=False)
    again = cycle()
    assert new in again and old not in again and len(again) == 5
    assert discovery.names_held(StateKind.SUBMITTED) <= 3


def test_a_flat_placement_costs_its_names_not_its_listing(tmp_path):
    # A pass keeps the rest of a big directory for the next passes: only the names, not the
    # listing's entries with their paths (100,000 ready markers in one placement held 39 MB).
    import os
    import tracemalloc

    from httk.workflow.workspace import Workspace

    ws = Workspace.init(tmp_path / "ws", durable=False)
    directory = f"{ws.handle.layout.kind_dir(StateKind.READY)}/bench/a"
    os.makedirs(directory)
    count = 20000
    for index in range(count):
        name = f"bench--{index:08x}-0000-4000-8000-000000000000.p0.g1.abcdef012345~1~16~787~d8f70b08"
        os.close(os.open(f"{directory}/{name}", os.O_CREAT | os.O_WRONLY))
    discovery = Discovery(ws.handle.fs, ws.handle.layout)
    tracemalloc.start()
    try:
        first = discovery.scan(StateKind.READY)
        kept, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(first.markers) == 256 and not first.cycle_complete
    assert kept < count * 250, f"{kept / count:.0f} bytes kept per name"


def test_an_unordered_walk_yields_what_the_sorted_one_does_once_under_nested_prefixes():
    from httk.workflow.store.discovery import walk_names

    _ports, handle, _ = memory_workspace(jobs=2, placement="a")
    for placement in ("a/b", "a/b", "ab", "c/a"):
        submit(handle, "/src/p", placement)
    fs, layout = handle.fs, handle.layout
    everything = list(walk_names(fs, layout, StateKind.SUBMITTED))
    assert [placement for placement, _ in everything] == ["a", "a", "a/b", "a/b", "ab", "c/a"]
    assert sorted(walk_names(fs, layout, StateKind.SUBMITTED, ordered=False)) == sorted(everything)
    served = list(walk_names(fs, layout, StateKind.SUBMITTED, prefixes=("a/b", "/a/"), ordered=False))
    assert sorted(served) == sorted(item for item in everything if item[0] in ("a", "a/b"))
