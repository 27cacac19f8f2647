"""gc: stopped managers' directories under ``retention.manager_days``, and the pruned placement mirrors' report.

Spec 000 "Freeing disk on a quota'd filesystem": a workspace accumulates a manager
directory per process start; a manager that is still heartbeating keeps its own
directory. Empty placement mirrors are collected on every run and said so.
"""

from __future__ import annotations

import errno
import os

import pytest

from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.diagnosis import managers
from httk.workflow.operations.gc import DAY, GarbageCollector
from httk.workflow.operations.submission import submit
from httk.workflow.store.policy import PolicyError
from httk.workflow.testing import FakeProcessControl, memory_manager, scripted_runner
from memory_support import write_payload


class LivePids(FakeProcessControl):
    """Every process on this host is alive (a manager that hangs without heartbeating, or a reused pid)."""

    def is_alive(self, identity):
        return None if identity.host != self.host else True


def here(handle, cls=FakeProcessControl):
    return cls(handle.ports.clock, scripted_runner(handle.fs), uid=handle.fs.uid)


def started(handle, manager_id, *, host="fakehost", stopped=False):
    """A manager that published its manifest and heartbeat and then did nothing more."""
    manager = memory_manager(handle, manager_id=manager_id, host=host)
    manager.publish_manifest()
    manager.heartbeat(force=True, stopped=stopped)
    return f"{handle.layout.managers}/{manager_id}"


def collected(handle, process=None, **options):
    report = GarbageCollector(handle, process=process, **options).run()
    return sorted(item["path"] for item in report["removed"] if item["category"] == "manager")


def test_a_manager_is_collected_only_when_aged_and_provably_not_live(handle, ports):
    handle.set_policy("retention.manager_days", 7)
    crashed, away = started(handle, "m-crashed"), started(handle, "m-away", host="elsewhere")
    hung = started(handle, "m-hung")
    ports.clock.advance(6 * DAY)
    assert collected(handle, here(handle)) == []  # silent beyond the lease, but not for manager_days
    fresh = started(handle, "m-fresh")  # still heartbeating
    ports.clock.advance(2 * DAY)
    started(handle, "m-fresh")
    # Without a process port this host cannot be told from another: only a clean stop would count.
    assert collected(handle, None, dry_run=True) == []
    # A pid alive on this host (a hung manager, or the pid reused) keeps it; elsewhere the heartbeat is all there is.
    assert collected(handle, here(handle, LivePids), dry_run=True) == [away]
    assert handle.fs.exists(away)  # a dry run removes nothing
    # Their pids gone from this host, the silent managers here go too.
    assert collected(handle, here(handle)) == [away, crashed, hung]
    assert not handle.fs.exists(crashed) and not handle.fs.exists(hung) and handle.fs.exists(fresh)


def test_a_cleanly_stopped_manager_is_collected_without_a_process_check(handle, ports):
    handle.set_policy("retention.manager_days", 1)
    stopped = started(handle, "m-stopped", stopped=True)
    ports.clock.advance(2 * DAY)
    assert collected(handle, None) == [stopped]


def test_no_limit_keeps_every_manager(handle, ports):
    gone = started(handle, "m-gone", stopped=True)
    ports.clock.advance(365 * DAY)
    assert collected(handle, here(handle)) == [] and handle.fs.exists(gone)


def test_empty_claims_of_collected_managers_go_with_them_and_held_claims_stay(handle, ports):
    handle.set_policy("retention.manager_days", 1)
    claimed = f"{handle.layout.requests}/claimed"
    gone = started(handle, "m-gone", stopped=True)
    handle.fs.makedirs(f"{claimed}/m-gone")
    handle.fs.makedirs(f"{claimed}/m-earlier")  # its manager directory was collected before
    handle.fs.write_atomic(f"{claimed}/m-held/r.json", b"{}", durable=False)  # a live manager returns it
    handle.fs.makedirs(f"{claimed}/m-live")
    ports.clock.advance(2 * DAY)
    started(handle, "m-live")
    assert collected(handle, here(handle)) == [gone, f"{claimed}/m-earlier", f"{claimed}/m-gone"]
    assert sorted(entry.name for entry in handle.fs.scandir(claimed)) == ["m-held", "m-live"]


def test_collecting_a_manager_keeps_its_journal_and_the_jobs_it_wrote(handle, ports):
    handle.set_policy("retention.manager_days", 1)
    manager = memory_manager(handle, manager_id="m-ran")
    marker = submit(handle, write_payload(handle.fs, "/src/j"), "p/a").marker
    assert manager.run() == 0
    [done] = list(handle.store.iter_markers(StateKind.SUCCEEDED))
    writers = sorted(entry.name for entry in handle.fs.scandir(handle.layout.journal))
    ports.clock.advance(2 * DAY)
    assert collected(handle, here(handle)) == [f"{handle.layout.managers}/m-ran"]
    assert sorted(entry.name for entry in handle.fs.scandir(handle.layout.journal)) == writers
    assert handle.store.read_job(done).frame.job_id == marker.job_id


def test_manager_days_is_a_retention_key(handle):
    assert handle.set_policy("retention.manager_days", 30)["retention"] == {"manager_days": 30}
    with pytest.raises(PolicyError, match=r"retention.manager_days: expected a number of days >= 0"):
        handle.set_policy("retention.manager_days", -1)
    with pytest.raises(PolicyError, match=r"known: .*manager_days"):
        handle.set_policy("retention.managers_days", 1)


def test_pruned_placement_mirrors_are_reported_apart_and_a_dry_run_prunes_none(handle):
    marker = submit(handle, write_payload(handle.fs, "/src/j"), "deep/er").marker
    handle.store.transition(marker, handle.store.read_job(marker).frame, Event.REGISTER)
    submitted = handle.layout.kind_dir(StateKind.SUBMITTED)
    mirrors = [f"{submitted}/deep/er", f"{submitted}/deep"]
    dry = GarbageCollector(handle, dry_run=True).run()
    assert dry["removed"] == [] and dry["count"] == 0
    assert [item["path"] for item in dry["pruned"]] == mirrors and dry["pruned_count"] == 2
    assert {item["category"] for item in dry["pruned"]} == {"placement_mirror"}
    assert handle.fs.exists(mirrors[0])
    report = GarbageCollector(handle).run()
    assert [item["path"] for item in report["pruned"]] == mirrors and report["count"] == 0
    assert not handle.fs.exists(mirrors[1])
    assert GarbageCollector(handle).run()["pruned"] == []


def test_a_managers_own_gc_pass_collects_a_crashed_manager_of_its_host(handle, ports):
    """The ``--gc-interval`` hook is wired with the manager's process control, so a crash is provable."""
    handle.set_policy("retention.manager_days", 1)
    crashed = started(handle, "m-crashed")  # its pid is no process of the fake host
    ports.clock.advance(2 * DAY)
    submit(handle, write_payload(handle.fs, "/src/j"), "p/a")  # a job keeps the manager past its first pass
    manager = memory_manager(handle, process=here(handle), gc_interval=1.0)
    manager.on_iteration = lambda: ports.clock.advance(2.0)
    assert manager.run() == 0
    assert not handle.fs.exists(crashed)


def test_a_manager_resumed_after_its_directory_was_collected_publishes_its_manifest_again(handle, ports):
    """SIGSTOPped past ``manager_days`` and its lease: collected; on resuming it must list as serving again."""
    handle.set_policy("retention.manager_days", 1)
    manager = memory_manager(handle, manager_id="m-frozen", host="elsewhere")
    manager.publish_manifest()
    manager.heartbeat(force=True)
    ports.clock.advance(2 * DAY)
    assert collected(handle, here(handle)) == [f"{handle.layout.managers}/m-frozen"]
    manager.heartbeat()  # it resumes: the next beat recreates the directory
    assert handle.fs.exists(f"{handle.layout.managers}/m-frozen/manager.json")
    [listed] = managers(handle)
    assert (listed["manager_id"], listed["live"]) == ("m-frozen", True)
    ports.clock.advance(2 * DAY)
    assert collected(handle, None, dry_run=True) == []  # a manifest of another host: only a clean stop counts


def test_the_heartbeat_checks_the_manifest_once_per_beat_and_never_between_beats(handle, ports, monkeypatch):
    manager = memory_manager(handle, manager_id="m-counted")
    manager.publish_manifest()
    manager.heartbeat(force=True)
    checks = []
    real_exists = handle.fs.exists
    monkeypatch.setattr(handle.fs, "exists", lambda path: checks.append(path) or real_exists(path))
    before = ports.fs.operation_count
    for _ in range(50):
        manager.heartbeat()  # rate-limited: the ticks between two beats touch nothing
    assert (checks, ports.fs.operation_count) == ([], before)
    ports.clock.advance(1.0)
    manager.heartbeat()
    assert checks == [f"{handle.layout.managers}/m-counted/manager.json"]


def test_a_directory_with_a_heartbeat_and_no_manifest_is_judged_by_silence_alone(handle, ports):
    handle.set_policy("retention.manager_days", 1)
    path = started(handle, "m-orphan")
    handle.fs.remove(f"{path}/manager.json")  # e.g. left by a manager that resumed before the fix
    ports.clock.advance(DAY / 2)
    assert collected(handle, None) == []  # not silent long enough
    ports.clock.advance(DAY)
    assert collected(handle, None) == [path] and not handle.fs.exists(path)


def failing_rmtree(handle, monkeypatch, during):
    """``fs.rmtree`` of a manager directory runs the next of ``during`` and fails as ENOTEMPTY, while any is left."""
    real = handle.fs.rmtree

    def rmtree(path):
        if path.startswith(f"{handle.layout.managers}/") and during:
            real(f"{path}/manager.json")  # part of the tree went first
            during.pop(0)()
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path)
        real(path)

    monkeypatch.setattr(handle.fs, "rmtree", rmtree)


def test_a_manager_that_writes_while_gc_removes_its_directory_is_left_and_reported(handle, ports, monkeypatch):
    handle.set_policy("retention.manager_days", 1)
    manager = memory_manager(handle, manager_id="m-resumed", host="elsewhere")
    manager.publish_manifest()
    manager.heartbeat(force=True)
    ports.clock.advance(2 * DAY)
    failing_rmtree(handle, monkeypatch, [manager.heartbeat])
    report = GarbageCollector(handle, process=here(handle)).run()  # no crash
    path = f"{handle.layout.managers}/m-resumed"
    assert report["removed"] == [] and report["count"] == 0
    assert report["left"] == [{"category": "manager", "path": path,
                               "reason": "its manager wrote to it while it was removed: it is live again"}]
    assert handle.fs.exists(f"{path}/manager.json")  # the heartbeat put it back
    [listed] = managers(handle)
    assert listed["live"]


def test_a_removal_that_fails_while_the_manager_stays_silent_is_retried_once(handle, ports, monkeypatch):
    handle.set_policy("retention.manager_days", 1)
    first, second = started(handle, "m-one", stopped=True), started(handle, "m-two", stopped=True)
    ports.clock.advance(2 * DAY)
    failing_rmtree(handle, monkeypatch, [lambda: None])  # m-one: a transient failure, then removed
    assert collected(handle) == [first, second]
    assert not handle.fs.exists(first) and not handle.fs.exists(second)
    third = started(handle, "m-three", stopped=True)
    ports.clock.advance(2 * DAY)
    failing_rmtree(handle, monkeypatch, [lambda: None, lambda: None])
    report = GarbageCollector(handle).run()
    [left] = report["left"]
    assert left["path"] == third and left["reason"].startswith("Directory not empty (tried twice")
    assert report["removed"] == [] and handle.fs.exists(third)
