"""gc under policy.retention, through the in-memory filesystem and a fake clock."""

from __future__ import annotations

from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.gc import DAY, GarbageCollector
from httk.workflow.operations.submission import submit
from memory_support import write_payload


def job_in(handle, events, placement="p/a"):
    marker = submit(handle, write_payload(handle.fs, f"/src/{placement.replace('/', '_')}"), placement).marker
    frame = handle.store.read_job(marker).frame
    for event in events:
        marker, frame = handle.store.transition(marker, frame, event)
    return marker


def attempt_dir(handle, marker):
    path = f"{handle.layout.attempts}/{marker.job_id}/0001-x"
    handle.fs.write_atomic(f"{path}/stdout.log", b"log\n", durable=False)
    return path


def test_unset_limits_keep_everything(handle, ports):
    done = job_in(handle, [Event.REGISTER, Event.OPERATOR_CANCEL])
    path = attempt_dir(handle, done)
    ports.clock.advance(100 * DAY)
    report = GarbageCollector(handle).run()
    assert report["removed"] == [] and handle.fs.exists(path)


def test_attempt_dirs_of_terminal_jobs_only_and_only_when_aged(handle, ports):
    handle.set_policy("retention.attempt_control_days", 14)
    done = job_in(handle, [Event.REGISTER, Event.OPERATOR_CANCEL], "p/a")
    active = job_in(handle, [Event.REGISTER], "p/b")
    done_dir, active_dir = attempt_dir(handle, done), attempt_dir(handle, active)
    ports.clock.advance(13 * DAY)
    assert GarbageCollector(handle).run()["removed"] == []
    ports.clock.advance(2 * DAY)
    dry = GarbageCollector(handle, dry_run=True).run()
    assert [item["path"] for item in dry["removed"]] == [done_dir] and handle.fs.exists(done_dir)
    GarbageCollector(handle).run()
    assert not handle.fs.exists(done_dir) and handle.fs.exists(active_dir)
    # No marker or payload was touched.
    assert len(list(handle.store.iter_markers(StateKind.CANCELLED))) == 1
    assert handle.store.read_job(done).spec is not None


def test_journal_segments_referenced_by_markers_are_kept(handle, ports):
    handle.set_policy("retention.journal_days", 1)
    marker = job_in(handle, [Event.REGISTER, Event.OPERATOR_PAUSE])
    ports.clock.advance(5 * DAY)
    GarbageCollector(handle).run()
    [paused] = list(handle.store.iter_markers(StateKind.PAUSED))
    assert handle.store.read_frame(paused).generation == marker.generation


def test_empty_placement_mirrors_are_pruned(handle):
    job_in(handle, [Event.REGISTER], "deep/er/place")
    submitted_mirror = f"{handle.layout.kind_dir(StateKind.SUBMITTED)}/deep"
    assert handle.fs.exists(submitted_mirror)
    GarbageCollector(handle).run()
    assert not handle.fs.exists(submitted_mirror)
    assert handle.fs.exists(f"{handle.layout.kind_dir(StateKind.READY)}/deep/er/place")


def test_scratch_a_dead_command_left_goes_once_nothing_below_it_was_written_for_scratch_days(handle, ports):
    """tmp/ holds what a submission, a workdir seed or a conversion writes before renaming it away:
    what a crash left there is collected under retention.scratch_days, never what is still being written."""
    fs, tmp = handle.fs, handle.layout.tmp
    fs.write_atomic(f"{tmp}/submit-dead/job.json", b"{}", durable=False)
    fs.write_atomic(f"{tmp}/seed-busy/deep/old", b"x", durable=False)
    fs.write_atomic(f"{tmp}/.describe-dead.tmp.0", b"x", durable=False)
    marker = job_in(handle, [Event.REGISTER])
    ports.clock.advance(2 * DAY)
    fs.write_atomic(f"{tmp}/seed-busy/deep/new", b"x", durable=False)  # a copy still under way
    assert GarbageCollector(handle).run()["removed"] == []  # a limit left unset means keep
    handle.set_policy("retention.scratch_days", 1)
    dry = GarbageCollector(handle, dry_run=True).run()
    gone = sorted([f"{tmp}/submit-dead", f"{tmp}/.describe-dead.tmp.0"])
    assert sorted(item["path"] for item in dry["removed"]) == gone
    assert {item["category"] for item in dry["removed"]} == {"scratch"} and fs.exists(f"{tmp}/submit-dead")
    GarbageCollector(handle).run()
    assert sorted(entry.name for entry in fs.scandir(tmp)) == ["seed-busy"]
    assert handle.store.read_job(marker).spec is not None  # the job itself is untouched


def test_a_staged_copy_of_old_files_is_young_scratch_on_the_real_filesystem(tmp_path):
    """A copy keeps its source's times: by mtime alone a staged copy made a moment ago from a payload of
    2024 looked years old, and gc removed it under the submission copying it. Its ctime says it is new."""
    import os

    from httk.workflow.adapters.fs_posix import PosixFilesystem
    from httk.workflow.store.workspaces import Ports, WorkspaceService
    from httk.workflow.testing import FakeClock, SequentialIds

    fs = PosixFilesystem()
    clock = FakeClock(start=__import__("time").time())
    handle = WorkspaceService(Ports(fs=fs, clock=clock, ids=SequentialIds())).init(str(tmp_path / "ws"))
    handle.set_policy("retention.scratch_days", 1)
    source = tmp_path / "payload"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "data").write_bytes(b"x")
    for path in (source / "sub" / "data", source / "sub", source):
        os.utime(path, (1_704_067_200, 1_704_067_200))  # 2024-01-01
    staging = f"{handle.layout.tmp}/submit-abc-123"
    fs.copy_tree(str(source), staging, durable=False, staged=True)
    assert fs.lstat(staging).mtime == 1_704_067_200  # the copy kept the source's time
    assert GarbageCollector(handle).run()["removed"] == [] and fs.exists(f"{staging}/sub/data")
    clock.advance(2 * DAY)  # now it is old by every clock: a dead submission's
    assert [item["path"] for item in GarbageCollector(handle).run()["removed"]] == [staging]
    assert [entry.name for entry in fs.scandir(handle.layout.tmp)] == []


def test_scratch_its_command_renames_away_meanwhile_is_left_whole(handle, ports, monkeypatch):
    """gc claims an entry by renaming it before removing it: a submission whose rename into place won
    keeps its whole payload, and gc reports nothing for it."""
    fs, tmp = handle.fs, handle.layout.tmp
    fs.write_atomic(f"{tmp}/submit-late/job.json", b"{}", durable=False)
    handle.set_policy("retention.scratch_days", 1)
    ports.clock.advance(2 * DAY)
    rename = fs.rename

    def submission_first(source, destination, *, durable):
        if source == f"{tmp}/submit-late":
            rename(source, f"{handle.layout.root}/p/a/job-late", durable=False)  # the submission's rename
        return rename(source, destination, durable=durable)

    monkeypatch.setattr(fs, "rename", submission_first)
    assert GarbageCollector(handle).run()["removed"] == []
    assert fs.read_bytes(f"{handle.layout.root}/p/a/job-late/job.json") == b"{}"
