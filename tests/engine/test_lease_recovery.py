"""Lease recovery of attempts whose manager died."""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations import inspection
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner
from memory_support import frame_of, kinds


def two_step_runner(ports, hang_in_second=True):
    calls = {"second": 0}
    advance = outcome_document("advance", next_step="second")
    publish_advance = scripted_runner(ports.fs, lambda launch: {"outcome.json": advance})
    publish_succeed = scripted_runner(ports.fs)

    def behaviour(launch):
        if launch.env["HTTK_WORKFLOW_STEP"] == "main":
            return publish_advance(launch)
        calls["second"] += 1
        if hang_in_second and calls["second"] == 1:
            return None  # still running when its manager dies
        return publish_succeed(launch)

    return behaviour


def run_until(m, handle, wanted, ticks=20):
    m.publish_manifest()
    m.heartbeat(force=True)
    for _ in range(ticks):
        m.tick()
        if kinds(handle) == wanted:
            return
    raise AssertionError(kinds(handle))


@pytest.mark.parametrize("workdir_mode", ["persistent", "isolated"])
def test_a_first_attempt_killed_with_its_manager_is_retried(workdir_mode):
    ports, handle, _ = memory_workspace(workdir_mode=workdir_mode)
    first = memory_manager(handle, lambda launch: None, manager_id="m-a", lease_seconds=10.0)
    run_until(first, handle, {"running": 1})
    ports.clock.advance(1000.0)
    memory_manager(handle, manager_id="m-b", lease_seconds=10.0, unsafe_isolated_takeover=True).run()
    assert kinds(handle) == {"succeeded": 1}


def test_a_later_activation_attempt_killed_with_its_manager_is_retried():
    ports, handle, _ = memory_workspace()
    behaviour = two_step_runner(ports)
    first = memory_manager(handle, behaviour, manager_id="m-a", lease_seconds=10.0)
    run_until(first, handle, {"running": 1})
    assert frame_of(handle, StateKind.RUNNING).step == "second"
    ports.clock.advance(1000.0)
    memory_manager(handle, behaviour, manager_id="m-b", lease_seconds=10.0).run()
    state = kinds(handle)
    failure = frame_of(handle, StateKind.FAILED).failure if "failed" in state else None
    assert state == {"succeeded": 1}, failure


def test_a_committing_job_whose_manager_died_is_committed_once_by_the_next():
    ports, handle, _ = memory_workspace()
    first = memory_manager(handle, manager_id="m-a", lease_seconds=10.0)
    proc = first.proc
    first.committer.commit = lambda *args, **kwargs: None  # dies between PUBLISH and the commit
    first.run()
    assert kinds(handle) == {"committing": 1}
    first.heartbeat(force=True)  # the owner looks alive again (its lease is not expired)
    second = memory_manager(handle, process=proc, manager_id="m-b", lease_seconds=10.0)
    second.on_iteration = lambda: first.heartbeat(force=True)  # ... and keeps renewing it
    started = ports.clock.now()
    second.run()  # a live owner's job is left alone, and waiting for it would be waiting forever
    assert kinds(handle) == {"committing": 1}
    assert ports.clock.now() - started < 10.0
    # Silent from now on: the next manager stays until the lease ends, then commits the outcome once.
    first.heartbeat(force=True)
    started = ports.clock.now()
    memory_manager(handle, process=proc, manager_id="m-c", lease_seconds=10.0).run()
    assert kinds(handle) == {"succeeded": 1}
    assert ports.clock.now() - started >= 10.0
    assert len(proc.processes) == 1


def test_two_managers_alternating_ticks_never_double_claim():
    ports, handle, _ = memory_workspace(jobs=6)
    launches = []

    def behaviour(launch):
        launches.append(launch.env["HTTK_WORKFLOW_JOB_ID"])
        return scripted_runner(ports.fs, lambda _launch: {"outcome.json": outcome_document()})(launch)

    a = memory_manager(handle, behaviour, manager_id="m-a", workers=2, lease_seconds=30.0)
    b = memory_manager(handle, behaviour, manager_id="m-b", workers=2, lease_seconds=30.0)
    for m in (a, b):
        m.publish_manifest()
        m.heartbeat(force=True)
    for _ in range(30):
        a.tick()
        b.tick()
        if kinds(handle) == {"succeeded": 6}:
            break
    assert kinds(handle) == {"succeeded": 6}
    assert sorted(launches) == sorted(set(launches)) and len(launches) == 6


def test_a_claim_whose_manager_died_before_the_launch_is_released_with_its_attempt_given_back():
    ports, handle, _ = memory_workspace(maximum_attempts_per_activation=1, maximum_total_attempts=1)
    first = memory_manager(handle, manager_id="m-a", lease_seconds=10.0, workers=0)
    first.publish_manifest()
    first.heartbeat(force=True)
    first.tick()  # registers: submitted -> ready
    [ready] = list(handle.store.iter_markers(StateKind.READY))
    frame = handle.store.read_frame(ready)
    # The claim as the launcher makes it; then the manager dies before it launches anything.
    handle.store.transition(ready, frame, Event.CLAIM, owner=first.ctx.owner_record(), attempt_id=ports.ids.new_id(),
                            attempt_ordinal=frame.attempt_ordinal + 1, total_attempts=frame.total_attempts + 1,
                            activation_id=frame.activation_id, activation_ordinal=max(frame.activation_ordinal, 1))
    ports.clock.advance(1000.0)
    second = memory_manager(handle, manager_id="m-b", lease_seconds=10.0)
    assert second.run() == 0
    # A one-attempt budget still runs the job: the released claim consumed nothing.
    assert kinds(handle) == {"succeeded": 1}, frame_of(handle, StateKind.FAILED)
    done = frame_of(handle, StateKind.SUCCEEDED)
    assert (done.attempt_ordinal, done.total_attempts) == (1, 1)
    marker = inspection.resolve_job(handle, ready.job_id)
    released = [entry for entry in inspection.job_log(handle, marker) if entry.get("event") == "lease_recovery"]
    assert [entry["takeover"]["rule"] for entry in released] == ["claim_expired"]
    assert (released[0]["attempt_ordinal"], released[0]["total_attempts"]) == (0, 0)
