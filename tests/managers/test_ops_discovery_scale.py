"""Bounded streaming discovery at scale (spec 000 "Scheduling", "Long scans").

20,000 zero-length markers in one flat placement directory: a pass visits at
most ``discovery_budget`` entries and heartbeats every 512 entries inside the
walk, the next pass resumes exactly where the last one stopped, and a cycle
takes ceil(N / budget) passes. Top-level roots are served round-robin, so a
huge root cannot starve a small sibling.
"""

from __future__ import annotations

import math
import os
import uuid

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.store.discovery import HEARTBEAT_EVERY, Discovery

N = 20_000
BUDGET = 4096


def _markers(ops, placement: str, count: int) -> list[str]:
    directory = os.path.join(ops.handle.layout.kind_dir(StateKind.READY), placement)
    os.makedirs(directory, exist_ok=True)
    names = [f"{uuid.uuid4()}.p0.g1.ref" for _ in range(count)]
    for name in names:
        os.close(os.open(os.path.join(directory, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    return sorted(names)


class Beats:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_one_flat_placement_is_scanned_in_bounded_resumable_passes(ops):
    names = _markers(ops, "big", N)
    discovery = Discovery(ops.handle.fs, ops.handle.layout)
    seen: list[str] = []
    passes = 0
    beats_per_pass = []
    while True:
        beats = Beats()
        result = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=100_000, heartbeat=beats)
        passes += 1
        beats_per_pass.append(beats.count)
        assert result.entries <= BUDGET
        assert all(marker.placement == "big" for marker in result.markers)
        seen.extend(marker.name for marker in result.markers)
        if result.cycle_complete:
            break
        assert passes < 20, "the cycle never completed"
    assert passes == math.ceil(N / BUDGET)
    # Inside ONE pass over one directory the walk heartbeats every 512 entries.
    assert beats_per_pass[0] >= BUDGET // HEARTBEAT_EVERY == 8
    # Each pass resumed where the previous stopped: the cycle saw every marker once, in sorted order.
    assert seen == names

    # The next cycle starts over from the beginning.
    result = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=100_000)
    assert [marker.name for marker in result.markers] == names[:BUDGET]


def test_the_marker_budget_also_bounds_a_pass(ops):
    names = _markers(ops, "big", 1000)
    discovery = Discovery(ops.handle.fs, ops.handle.layout)
    first = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=256)
    second = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=256)
    assert [marker.name for marker in first.markers] == names[:256]
    assert [marker.name for marker in second.markers] == names[256:512]
    assert not first.cycle_complete and not second.cycle_complete


def test_a_big_root_does_not_starve_a_small_sibling(ops):
    big = _markers(ops, "aaa-big", 10_000)
    small = _markers(ops, "zzz-small", 10)
    discovery = Discovery(ops.handle.fs, ops.handle.layout)
    result = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=256)
    by_root = {"aaa-big": [], "zzz-small": []}
    for marker in result.markers:
        by_root[marker.placement].append(marker.name)
    # The small root, sorted after the big one, is served within the very first pass, interleaved.
    assert by_root["zzz-small"] == small
    assert by_root["aaa-big"] == big[: len(by_root["aaa-big"])]
    positions = [index for index, marker in enumerate(result.markers) if marker.placement == "zzz-small"]
    assert positions[-1] < 2 * len(small)

    # With the small root done, later passes resume the big one where it stopped, until the cycle ends.
    seen_big = list(by_root["aaa-big"])
    for _ in range(100):
        if result.cycle_complete:
            break
        result = discovery.scan(StateKind.READY, entry_budget=BUDGET, marker_budget=256)
        assert all(marker.placement == "aaa-big" for marker in result.markers)
        seen_big.extend(marker.name for marker in result.markers)
    assert result.cycle_complete
    assert seen_big == big

