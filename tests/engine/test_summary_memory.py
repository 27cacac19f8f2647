"""The closing summary classifies every active job without holding a listing of the queue.

It walks each active kind once, at exit; the walk streams each directory as it is
listed, so its memory is bounded by one job's definition, not by the largest
placement directory (a sorted walk held every entry: 39 MB for 100,000 ready jobs in
one placement). Spec: 000 "One banner, then one summary".
"""

from __future__ import annotations

import os
import tracemalloc

from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.operations.submission import submit
from httk.workflow.testing import memory_manager, memory_workspace
from httk.workflow.testing.manager import PAYLOAD_SOURCE
from httk.workflow.workspace import Workspace


def _ready_markers(ws: Workspace, placement: str, start: int, count: int) -> None:
    """``count`` ready marker names (no payloads: the summary counts them unreadable) in one directory."""
    directory = f"{ws.handle.layout.kind_dir(StateKind.READY)}/{placement}"
    os.makedirs(directory, exist_ok=True)
    for index in range(start, start + count):
        name = f"bench--{index:08x}-0000-4000-8000-000000000000.p0.g1.abcdef012345~1~16~787~d8f70b08"
        os.close(os.open(f"{directory}/{name}", os.O_CREAT | os.O_WRONLY))


def _summary_peak(manager) -> tuple[int, str]:
    """Bytes the summary allocated at its peak, beyond what was allocated when it started; the line."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        line = manager.summary()
        return tracemalloc.get_traced_memory()[1] - base, line
    finally:
        tracemalloc.stop()


def test_the_summary_s_memory_does_not_grow_with_the_ready_queue(tmp_path):
    ws = Workspace.init(tmp_path / "ws", durable=False)
    manager = build_manager(default_container(), ws.handle, ManagerConfig(workers=0))
    _ready_markers(ws, "bench/a", 0, 2000)
    manager.summary()  # warm-up: whatever is built once per process is not the walk's
    small, line = _summary_peak(manager)
    assert "2000 with an unreadable definition" in line and "2000 ready" in line
    _ready_markers(ws, "bench/a", 2000, 18000)
    large, line = _summary_peak(manager)
    assert "20000 ready" in line
    # Ten times the queue in the same directory: a sorted walk grew by ≈ 390 bytes a marker (7 MB here).
    assert large - small < 18000 * 20, f"{(large - small) / 18000:.0f} bytes more per ready marker"


def test_nested_placement_prefixes_count_each_job_once():
    _ports, handle, _ = memory_workspace(placement="a", pool="vasp")
    submit(handle, PAYLOAD_SOURCE, "a/b")
    submit(handle, PAYLOAD_SOURCE, "c")  # outside both prefixes: not this manager's
    manager = memory_manager(handle, placement_prefixes=["a", "a/b"])
    assert "not claimable here: 2 need pool vasp;" in manager.summary()
