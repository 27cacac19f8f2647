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
