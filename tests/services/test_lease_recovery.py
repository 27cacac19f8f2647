"""Lease recovery of attempts whose manager died."""

from __future__ import annotations

import pytest
from review_support import fake_proc, frame_of, kinds, manager, outcome, publisher, workspace

from httk.workflow.domain.lifecycle import StateKind


def two_step_runner(ports, hang_in_second=True):
    calls = {"second": 0}
    publish_advance = publisher(ports.fs, lambda launch: {"outcome.json": outcome("advance", next_step="second")})
    publish_succeed = publisher(ports.fs, lambda launch: {"outcome.json": outcome()})

    def behaviour(launch):
        if launch.env["HTTK_WORKFLOW_STEP"] == "main":
            return publish_advance(launch)
        calls["second"] += 1
        if hang_in_second and calls["second"] == 1:
            return None  # still running when its manager dies
        return publish_succeed(launch)

    return behaviour


def run_until(m, handle, wanted, ticks=20):
    m._publish_manifest()
    m.heartbeat(force=True)
    for _ in range(ticks):
        m.tick()
        if kinds(handle) == wanted:
            return
    raise AssertionError(kinds(handle))


@pytest.mark.parametrize("workdir_mode", ["persistent", "isolated"])
def test_a_first_attempt_killed_with_its_manager_is_retried(workdir_mode):
    ports, handle, _ = workspace(workdir_mode=workdir_mode)
    first = manager(handle, fake_proc(ports, lambda launch: None), "m-a", lease_seconds=10.0)
    run_until(first, handle, {"running": 1})
    ports.clock.advance(1000.0)
    second_proc = fake_proc(ports, publisher(ports.fs, lambda launch: {"outcome.json": outcome()}))
    manager(handle, second_proc, "m-b", lease_seconds=10.0, unsafe_isolated_takeover=True).run()
    assert kinds(handle) == {"succeeded": 1}


def test_a_later_activation_attempt_killed_with_its_manager_is_retried():
    ports, handle, _ = workspace()
    behaviour = two_step_runner(ports)
    first = manager(handle, fake_proc(ports, behaviour), "m-a", lease_seconds=10.0)
    run_until(first, handle, {"running": 1})
    assert frame_of(handle, StateKind.RUNNING).step == "second"
    ports.clock.advance(1000.0)
    manager(handle, fake_proc(ports, behaviour), "m-b", lease_seconds=10.0).run()
    state = kinds(handle)
    failure = frame_of(handle, StateKind.FAILED).failure if "failed" in state else None
    assert state == {"succeeded": 1}, failure


def test_a_committing_job_whose_manager_died_is_committed_once_by_the_next():
    ports, handle, _ = workspace()
    proc = fake_proc(ports, publisher(ports.fs, lambda launch: {"outcome.json": outcome()}))
    first = manager(handle, proc, "m-a", lease_seconds=10.0)
    first.commit = lambda *args, **kwargs: None  # dies between PUBLISH and the commit
    first.run()
    assert kinds(handle) == {"committing": 1}
    first.heartbeat(force=True)  # the owner looks alive again (its lease is not expired)
    second = manager(handle, proc, "m-b", lease_seconds=10.0)
    second.on_iteration = lambda: first.heartbeat(force=True)  # ... and keeps renewing it
    started = ports.clock.now()
    second.run()  # a live owner's job is left alone, and waiting for it would be waiting forever
    assert kinds(handle) == {"committing": 1}
    assert ports.clock.now() - started < 10.0
    # Silent from now on: the next manager stays until the lease ends, then commits the outcome once.
    first.heartbeat(force=True)
    started = ports.clock.now()
    manager(handle, proc, "m-c", lease_seconds=10.0).run()
    assert kinds(handle) == {"succeeded": 1}
    assert ports.clock.now() - started >= 10.0
    assert len(proc.processes) == 1


def test_two_managers_alternating_ticks_never_double_claim():
    ports, handle, _ = workspace(jobs=6)
    launches = []

    def behaviour(launch):
        launches.append(launch.env["HTTK_WORKFLOW_JOB_ID"])
        return publisher(ports.fs, lambda _launch: {"outcome.json": outcome()})(launch)

    a = manager(handle, fake_proc(ports, behaviour), "m-a", workers=2, lease_seconds=30.0)
    b = manager(handle, fake_proc(ports, behaviour), "m-b", workers=2, lease_seconds=30.0)
    for m in (a, b):
        m._publish_manifest()
        m.heartbeat(force=True)
    for _ in range(30):
        a.tick()
        b.tick()
        if kinds(handle) == {"succeeded": 6}:
            break
    assert kinds(handle) == {"succeeded": 6}
    assert sorted(launches) == sorted(set(launches)) and len(launches) == 6
