"""A whole manager in memory: in-memory filesystem, fake clock, fake process control.

No process is started and no time passes for real, so lease arithmetic is exact. The
harness is the public one of :mod:`httk.workflow.testing` (``memory_manager``).
"""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.testing import memory_manager, memory_workspace
from memory_support import fsck_problems, kinds


def test_smoke_two_jobs_succeed_and_fsck_finds_nothing():
    _ports, handle, _ = memory_workspace(jobs=2)
    assert memory_manager(handle).run() == 0
    assert kinds(handle) == {"succeeded": 2}
    assert fsck_problems(handle) == []


def test_jobs_run_to_success_without_a_process_or_a_clock():
    _ports, handle, _ = memory_workspace(jobs=5)
    manager = memory_manager(handle, workers=2)
    proc = manager.proc
    assert manager.run() == 0
    assert kinds(handle) == {"succeeded": 5}
    assert len(proc.processes) == 5 and all(process.released for process in proc.processes)
    launch = proc.processes[0].launch
    assert launch.argv[0] == "/bin/sh" or launch.argv[-1].endswith("/runner/run.sh")
    assert launch.env["HTTK_WORKFLOW_STEP"] == "main" and launch.env["PATH"] == "/bin"


def start_running(workdir_mode):
    ports, handle, [_marker] = memory_workspace(workdir_mode=workdir_mode)
    first = memory_manager(handle, lambda launch: None, manager_id="m-a", lease_seconds=100.0)
    first.publish_manifest()
    first.heartbeat(force=True)
    first.tick()
    assert kinds(handle) == {"running": 1}
    return ports, handle, first.proc


def last_frame(handle, kind):
    [marker] = list(handle.store.iter_markers(kind))
    return handle.store.read_frame(marker)


def test_persistent_attempt_alive_on_this_host_is_adopted_then_relaunched_when_gone():
    ports, handle, proc = start_running("persistent")
    ports.clock.advance(100.0)
    second = memory_manager(handle, process=proc, manager_id="m-b", lease_seconds=100.0)
    second.tick()  # lease exactly at its limit: still live
    assert kinds(handle) == {"running": 1}
    ports.clock.advance(1.0)
    second.tick()  # expired, but the process provably lives here: left alone
    assert kinds(handle) == {"running": 1} and len(proc.processes) == 1
    proc.processes[0].exit(-9)
    second.tick()
    frame = last_frame(handle, StateKind.RUNNING)  # relaunched as a new attempt
    assert frame.attempt_ordinal == 2 and len(proc.processes) == 2
    log = [handle.store.reader.read(ref) for ref in _refs(handle, frame)]
    takeover = next(entry["takeover"] for entry in log if entry["event"] == "publish")
    assert takeover["rule"] == "process_gone" and takeover["heartbeat_age"] == pytest.approx(101.0)
    assert takeover["by"] == "m-b" and takeover["previous_owner"] == "m-a"


def test_isolated_attempt_on_another_host_waits_out_the_grace_factor():
    ports, handle, proc = start_running("isolated")
    second = memory_manager(handle, lambda launch: None, manager_id="m-b", host="otherhost", lease_seconds=100.0,
                            takeover_grace_factor=2.0)
    elsewhere = second.proc
    ports.clock.advance(199.0)
    second.tick()
    assert kinds(handle) == {"running": 1}
    ports.clock.advance(1.0)
    second.tick()
    assert "running" in kinds(handle) and len(elsewhere.processes) == 1
    frame = last_frame(handle, StateKind.RUNNING)
    assert frame.attempt_ordinal == 2


def test_persistent_attempt_on_another_host_is_never_taken_over():
    ports, handle, proc = start_running("persistent")
    second = memory_manager(handle, lambda launch: None, manager_id="m-b", host="otherhost", lease_seconds=100.0)
    elsewhere = second.proc
    ports.clock.advance(10_000.0)
    second.tick()
    assert kinds(handle) == {"running": 1} and elsewhere.processes == []
    unsafe = memory_manager(handle, process=elsewhere, manager_id="m-c", lease_seconds=100.0,
                            unsafe_persistent_takeover=True)
    unsafe.tick()
    assert len(elsewhere.processes) == 1


def _refs(handle, frame):
    """Record references of a job's history, newest first, starting at ``frame``'s predecessor."""
    refs = []
    ref = frame.previous_record_ref
    while ref:
        refs.append(ref)
        ref = handle.store.reader.read(ref).get("previous_record_ref")
    return refs
