"""Crash at every mutating filesystem operation of a submission and of a transition.

After each simulated crash (unsynced writes dropped) the workspace must read back
either as before the operation or as after it, never between.
"""

from __future__ import annotations

from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.submission import submit
from httk.workflow.store.store import JobDamage
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import SimulatedCrash, memory_ports
from memory_support import ROOT, write_payload


def jobs(handle):
    """Every job as (kind, generation, step) after a fresh attach, reading each fully."""
    fresh = WorkspaceService(handle.ports).open(ROOT)
    out = []
    for kind in StateKind:
        for marker in fresh.store.iter_markers(kind):
            view = fresh.store.read_job(marker)
            assert view.spec is not None, view.spec_error
            out.append((kind, marker.generation, view.frame.step))
    return out


def fresh_workspace():
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT)
    write_payload(ports.fs, "/src/payload")
    ports.fs.sync_tree("/")
    return ports, handle


def test_submission_is_all_or_nothing_at_every_crash_point():
    points = 0
    while True:
        ports, handle = fresh_workspace()
        ports.fs.arm_crash(points)
        try:
            submit(handle, "/src/payload", "p/a")
        except SimulatedCrash:
            ports.fs.crash()
            state = jobs(handle)
            assert state in ([], [(StateKind.SUBMITTED, 0, "main")]), (points, state)
            points += 1
            continue
        ports.fs.crash()
        assert jobs(handle) == [(StateKind.SUBMITTED, 0, "main")]
        break
    assert points > 5  # the loop really crashed inside the submission


def test_transition_is_before_or_after_at_every_crash_point():
    points = 0
    while True:
        ports, handle = fresh_workspace()
        marker = submit(handle, "/src/payload", "p/a").marker
        frame = handle.store.read_job(marker).frame
        ready, frame = handle.store.transition(marker, frame, Event.REGISTER, step="main")
        ports.fs.arm_crash(points)
        try:
            handle.store.transition(ready, frame, Event.OPERATOR_PAUSE, reason="look")
        except SimulatedCrash:
            ports.fs.crash()
            state = jobs(handle)
            assert state in ([(StateKind.READY, 1, "main")], [(StateKind.PAUSED, 2, "main")]), (points, state)
            points += 1
            continue
        ports.fs.crash()
        assert jobs(handle) == [(StateKind.PAUSED, 2, "main")]
        break
    assert points >= 2


def test_no_durable_can_lose_a_frame_and_says_so():
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT, durable=False)
    write_payload(ports.fs, "/src/payload")
    ports.fs.sync_tree("/")
    marker = submit(handle, "/src/payload", "p/a").marker
    ports.fs.sync_tree("/")  # the submission itself reached the disk
    frame = handle.store.read_job(marker).frame
    ready, _ = handle.store.transition(marker, frame, Event.REGISTER)
    # The marker rename reaches the disk but the frame does not (the documented no-durable risk).
    ports.fs.sync_tree(f"{ROOT}/.httk-workflow/state")
    ports.fs.crash()
    fresh = WorkspaceService(ports).open(ROOT)
    markers = list(fresh.store.iter_markers(StateKind.READY))
    assert len(markers) == 1
    try:
        fresh.store.read_frame(markers[0])
    except JobDamage as damage:
        assert damage.code in ("missing_segment", "short_read")
    else:
        raise AssertionError("an unsynced frame survived a crash")
