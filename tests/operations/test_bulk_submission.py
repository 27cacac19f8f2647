"""Bulk submission on the in-memory filesystem: the same jobs as single submissions, grouped syncs, crash safety.

A batch must leave on disk exactly what one submission per payload leaves, sync each
directory it touches once per batch instead of once per job, leave every job submitted
in full or absent at every crash point, and refuse a batch with one bad payload before
its first write.
"""

from __future__ import annotations

import errno
import posixpath
import re

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.bulk_submission import PHASES, BulkSubmissionError, submit_many
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import SubmissionError, submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store.job_ids import read_reservation
from httk.workflow.store.workspaces import Ports, WorkspaceService
from httk.workflow.testing import FakeClock, InMemoryFilesystem, SequentialIds, SimulatedCrash
from memory_support import ROOT, write_payload

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Counting(InMemoryFilesystem):
    """Counts fsyncs of files and of directories; ``fail_marker`` makes the n-th marker creation fail."""

    file_syncs = 0
    dir_syncs = 0
    fail_marker: int | None = None
    fail_copy: int | None = None

    def _fsync_file(self, inode):
        self.file_syncs += 1
        super()._fsync_file(inode)

    def _fsync_dir_inode(self, directory):
        self.dir_syncs += 1
        super()._fsync_dir_inode(directory)

    def create_empty(self, path, *, durable):
        if "/state/submitted/" in path and self.fail_marker is not None:
            self.fail_marker -= 1
            if self.fail_marker < 0:
                raise OSError(errno.ENOSPC, "No space left on device", path)
        super().create_empty(path, durable=durable)

    def copy_tree(self, source, destination, *, durable, staged=False):
        if self.fail_copy is not None:
            self.fail_copy -= 1
            if self.fail_copy < 0:
                raise OSError(errno.ENOSPC, "No space left on device", destination)
        super().copy_tree(source, destination, durable=durable, staged=staged)


def workspace_with(count: int, *, durable: bool = True, filesystem: type[Counting] = Counting):
    """A fresh workspace and ``count`` synced payloads ``/src/p0`` ... (tags alternate)."""
    fs = filesystem(clock=FakeClock())
    handle = WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).init(ROOT, durable=durable)
    payloads = []
    for index in range(count):
        spec = JobSpec(name=f"job{index}", workflow="w", runner_path="run.sh", tag="t" if index % 2 else None,
                       priority=index)
        payloads.append(write_payload(fs, f"/src/p{index}", spec))
    fs.sync_tree("/")
    fs.file_syncs = fs.dir_syncs = 0
    return fs, handle, payloads


def image(fs: InMemoryFilesystem, job_ids: list[str]) -> dict[str, bytes | str]:
    """Every name below the workspace root and its content, each job id spelled by its ordinal."""
    names = {job_id: f"JOB{index}" for index, job_id in enumerate(job_ids)}

    def spell(text: str) -> str:
        return UUID.sub(lambda match: names.get(match.group(0), match.group(0)), text)

    out: dict[str, bytes | str] = {}
    pending = [ROOT]
    while pending:
        for entry in fs.scandir(pending.pop()):
            if entry.is_dir:
                out[spell(entry.path)] = "dir"
                pending.append(entry.path)
            else:
                out[spell(entry.path)] = spell(fs.read_bytes(entry.path).decode())
    return out


def placements(count: int) -> list[str]:
    return ["camp/a" if index % 3 else "camp/b/c" for index in range(count)]


@pytest.mark.parametrize("durable", [True, False])
def test_a_batch_leaves_exactly_what_one_submission_per_payload_leaves(durable):
    fs_one, handle_one, payloads = workspace_with(5, durable=durable)
    singles = [submit(handle_one, payload, place) for payload, place in zip(payloads, placements(5), strict=True)]
    fs_many, handle_many, payloads = workspace_with(5, durable=durable)
    batch = submit_many(handle_many, payloads, placements(5))
    assert [str(job.marker.key).split("--")[0] for job in batch] == ["t"[: index % 2] or job.marker.job_id
                                                                    for index, job in enumerate(batch)]
    assert [job.marker.placement for job in batch] == placements(5)
    assert [job.marker.priority for job in batch] == list(range(5))
    one = image(fs_one, [job.marker.job_id for job in singles])
    many = image(fs_many, [job.marker.job_id for job in batch])
    assert many == one
    if durable:
        # What survives power loss is the same too: everything either wrote was synced.
        fs_one.crash()
        fs_many.crash()
        assert image(fs_many, [job.marker.job_id for job in batch]) == image(fs_one, [j.marker.job_id for j in singles])


def test_syncs_are_grouped_one_per_directory_not_one_per_job():
    """Per extra job a batch adds three file syncs (reservation, job.json, runner) and one directory
    sync (its own payload directory); every other directory is synced once per batch."""
    counts = {}
    for count in (10, 30):
        fs, handle, payloads = workspace_with(count)
        submit_many(handle, payloads, "camp/a")
        counts[count] = (fs.file_syncs, fs.dir_syncs)
    assert counts[30][0] - counts[10][0] == 3 * 20
    assert counts[30][1] - counts[10][1] == 20
    fs, handle, payloads = workspace_with(10)
    for payload in payloads:
        submit(handle, payload, "camp/a")
    # One job at a time: five directory syncs each (the reservation's bucket, the copy's directory, the
    # rename's two directories, the marker's), at least; the batch syncs each directory once.
    assert fs.dir_syncs >= 5 * 10 > 2 * counts[10][1]


def test_no_durable_syncs_nothing():
    fs, handle, payloads = workspace_with(4, durable=False)
    submit_many(handle, payloads, "camp/a")
    assert (fs.file_syncs, fs.dir_syncs) == (0, 0)


def jobs_after_crash(fs, handle, payloads):
    """``{payload: job key}`` of the jobs a fresh attach finds, each checked to be whole."""
    fresh = WorkspaceService(handle.ports).open(ROOT)
    found = {}
    for kind in StateKind:
        for marker in fresh.store.iter_markers(kind):
            assert kind is StateKind.SUBMITTED and marker.generation == 0
            view = fresh.store.read_job(marker)
            assert view.spec is not None, view.spec_error  # the payload is whole under its marker
            held = read_reservation(fs, fresh.layout, marker.job_id)
            assert held is not None and held.job_key == str(marker.key) and held.placement == marker.placement
            found[f"/src/p{int(view.spec.name[3:])}"] = str(marker.key)
    return found


def crash_at_every_write(count: int, *, move: bool = False) -> tuple[int, int]:
    """Crash a batch of ``count`` at each write in turn; every time, each job is submitted in full or absent.

    Returns (crash points, points that left some but not all of the jobs).
    """
    points, partial = 0, 0
    while True:
        fs, handle, payloads = workspace_with(count)
        fs.arm_crash(points)
        try:
            submit_many(handle, payloads, placements(count), move=move)
        except SimulatedCrash:
            fs.crash()
            found = jobs_after_crash(fs, handle, payloads)
            partial += 0 < len(found) < count
            if move:  # a moved payload is in exactly one place: its source or the workspace (maybe orphaned)
                placed = [text for path, text in image(fs, []).items()
                          if path.endswith("/job.json") and "/.httk-workflow/" not in path]
                for index, payload in enumerate(payloads):
                    copies = sum(f'"name":"job{index}"' in text for text in placed)
                    assert copies + fs.exists(f"{payload}/job.json") == 1, (points, payload)
                    assert copies == 1 or payload not in found
            # What is left beside the jobs is what an interrupted single submission leaves, no more.
            problems = Fsck(WorkspaceService(handle.ports).open(ROOT)).run()["problems"]
            assert {problem["code"] for problem in problems} <= {"orphaned_payload"}, (points, problems)
            points += 1
            continue
        fs.crash()
        assert sorted(jobs_after_crash(fs, handle, payloads)) == payloads
        return points, partial


@pytest.mark.parametrize("move", [False, True], ids=["copy", "move"])
def test_a_crash_at_every_write_leaves_each_job_submitted_or_absent(move):
    points, partial = crash_at_every_write(4, move=move)
    assert points > 20  # the loop really crashed inside the batch, at every step
    assert partial  # and some crash points fell between the two marker directories' syncs


def test_one_bad_payload_refuses_the_whole_batch_before_any_write():
    fs, handle, payloads = workspace_with(3)
    fs.remove("/src/p1/job.json")
    before, operations = image(fs, []), fs.operation_count
    with pytest.raises(SubmissionError) as refusal:
        submit_many(handle, payloads, "camp/a")
    message = str(refusal.value)
    assert "\n" not in message
    assert message.startswith("/src/p1/job.json: missing; prepare the payload with prepare_job_payload first")
    assert "payload 2 of 3" in message and "none of the 3 was submitted" in message
    assert fs.operation_count == operations  # not one mutating primitive
    assert image(fs, []) == before


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda fs: fs.write_atomic("/src/p2/job.json", b'{"format": 1}', durable=True), "/src/p2/job.json @ $.format"),
        (lambda fs: fs.rmtree("/src/p2"), "/src/p2: not a payload directory"),
    ],
    ids=["invalid-job-json", "missing-directory"],
)
def test_refusals_name_the_payload_and_write_nothing(spoil, expected):
    fs, handle, payloads = workspace_with(3)
    spoil(fs)
    operations = fs.operation_count
    with pytest.raises(SubmissionError, match=re.escape(expected)):
        submit_many(handle, payloads, "camp/a")
    assert fs.operation_count == operations


def test_a_bad_placement_and_a_payload_moved_twice_are_refused_up_front():
    fs, handle, payloads = workspace_with(2)
    operations = fs.operation_count
    with pytest.raises(SubmissionError, match=r"placement"):
        submit_many(handle, payloads, ["camp/a", "../out"])
    with pytest.raises(SubmissionError, match=r"payload /src/p0 is listed twice \(entries 1 and 3 of 3\); --move"):
        submit_many(handle, [*payloads, payloads[0]], "camp/a", move=True)
    with pytest.raises(SubmissionError, match=r"2 payloads but 1 placements"):
        submit_many(handle, payloads, ["camp/a"])
    assert fs.operation_count == operations


def test_a_failed_copy_takes_the_chunk_back():
    fs, handle, payloads = workspace_with(3)
    before = image(fs, [])
    fs.fail_copy = 2
    with pytest.raises(SubmissionError) as refusal:
        submit_many(handle, payloads, "camp/a")
    assert type(refusal.value) is SubmissionError  # nothing was submitted: a plain refusal
    assert str(refusal.value) == (
        "cannot submit /src/p2 at placement 'camp/a': No space left on device; nothing was submitted"
    )
    assert image(fs, []) == before  # reservations released, copies and new directories removed


def test_a_write_failure_in_a_later_chunk_keeps_the_earlier_chunks():
    fs, handle, payloads = workspace_with(5)
    fs.fail_copy = 3
    with pytest.raises(BulkSubmissionError) as failure:
        submit_many(handle, payloads, "camp/a", chunk=2)
    assert [job.payload.rsplit("/", 1)[1] for job in failure.value.submitted] == [
        str(job.marker.key) for job in failure.value.submitted]
    assert len(failure.value.submitted) == 2
    assert "the first 2 of 5 jobs were submitted, the other 3 were not" in str(failure.value)
    fresh = WorkspaceService(handle.ports).open(ROOT)
    assert len(list(fresh.store.iter_markers(StateKind.SUBMITTED))) == 2
    assert Fsck(fresh).run()["problems"] == []  # the failed chunk's jobs left nothing behind


def test_a_failed_marker_keeps_the_jobs_that_have_one_and_takes_back_the_rest():
    fs, handle, payloads = workspace_with(4)
    fs.fail_marker = 2
    with pytest.raises(BulkSubmissionError) as failure:
        submit_many(handle, payloads, "camp/a")
    assert len(failure.value.submitted) == 2
    assert str(failure.value).startswith("cannot submit /src/p2 at placement 'camp/a': No space left on device; "
                                         "the first 2 of 4 jobs were submitted, the other 2 were not")
    assert Fsck(WorkspaceService(handle.ports).open(ROOT)).run()["problems"] == []  # the rest left nothing
    fs.crash()  # the two submitted jobs were synced before the error was raised
    assert sorted(jobs_after_crash(fs, handle, payloads)) == payloads[:2]


def test_progress_is_told_every_job_of_every_phase():
    fs, handle, payloads = workspace_with(250)
    told: dict[str, int] = {}
    calls = []

    def progress(phase: str, jobs: int) -> None:
        calls.append(phase)
        told[phase] = told.get(phase, 0) + jobs

    submit_many(handle, payloads, "camp/a", progress=progress, chunk=120)
    assert told == dict.fromkeys(PHASES, 250)
    assert list(dict.fromkeys(calls)) == list(PHASES)
    assert len(calls) < 40  # in steps, not one call per job


def test_a_shared_workspace_runner_is_resolved_once_per_batch(monkeypatch):
    from httk.workflow.operations import submission
    from httk.workflow.store.runners import publish_runner

    fs, handle, _ = workspace_with(0)
    fs.write_atomic("/src/run.py", b"print('hi')\n", durable=True)
    reference = publish_runner(fs, handle.layout, "/src/run.py", "run.py")
    payloads = [write_payload(fs, f"/src/w{index}", JobSpec(
        name=f"job{index}", workflow="w", runner_path="run.py", runner_source="workspace",
        runner_sha256=reference["sha256"])) for index in range(6)]
    resolved = []
    real = submission.resolve_runner
    monkeypatch.setattr(submission, "resolve_runner", lambda *args, **kw: resolved.append(1) or real(*args, **kw))
    assert len(submit_many(handle, payloads, "camp/a")) == 6
    assert len(resolved) == 1


@pytest.mark.parametrize("durable", [True, False])
def test_an_id_taken_between_the_check_and_the_write_refuses_the_batch_and_takes_it_back(monkeypatch, durable):
    from httk.workflow.operations import bulk_submission
    from httk.workflow.store.job_ids import Reservation, reserve_job_id

    fs, handle, payloads = workspace_with(3, durable=durable)
    real = bulk_submission.reserve_job_ids
    taken = []

    def racing(fs_, layout, wanted, **kwargs):
        # Another submission reserves the second id after the batch checked it.
        rival = Reservation(wanted[1].job_id, "rival", "elsewhere")
        reserve_job_id(fs_, layout, rival, durable=True)
        taken.append(rival)
        return real(fs_, layout, wanted, **kwargs)

    monkeypatch.setattr(bulk_submission, "reserve_job_ids", racing)
    with pytest.raises(SubmissionError) as refusal:
        submit_many(handle, payloads, "camp/a")
    assert str(refusal.value).startswith(
        f"cannot submit at placement 'camp/a': job id {taken[0].job_id} already belongs to job rival at elsewhere")
    left = image(fs, [])
    assert [path for path in left if "/ids/" in path and left[path] != "dir"] == [
        f"{ROOT}/.httk-workflow/ids/00/{taken[0].job_id}"]  # only the rival's reservation
    assert not [path for path in left if "/camp" in path or "/tmp/" in path]


def unsynced_payloads(count: int):
    """A durable workspace and ``count`` payloads written without a single sync (as a tool writing them leaves them)."""
    fs = Counting(clock=FakeClock())
    handle = WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).init(ROOT, durable=True)
    fs.sync_tree("/")  # the workspace itself is durable; the payloads below are not
    payloads = []
    for index in range(count):
        path = f"/src/p{index}"
        fs.makedirs(path, durable=False)
        spec = JobSpec(name=f"job{index}", workflow="w", runner_path="run.sh", priority=index)
        fs.write_atomic(f"{path}/job.json", spec.to_bytes(), durable=False)
        fs.write_atomic(f"{path}/run.sh", b"#!/bin/sh\n", durable=False)
        payloads.append(path)
    return fs, handle, payloads


def crash_problems(fs, handle) -> list[dict]:
    fs.crash()
    return Fsck(WorkspaceService(handle.ports).open(ROOT)).run()["problems"]


def test_a_moved_batch_of_unsynced_payloads_survives_a_crash_after_it_returns():
    """``--move`` renames the caller's payloads: a marker must not be published over one never synced."""
    fs, handle, payloads = unsynced_payloads(3)
    batch = submit_many(handle, payloads, "camp/a", move=True)
    assert crash_problems(fs, handle) == []
    assert sorted(jobs_after_crash(fs, handle, payloads)) == payloads
    assert len(batch) == 3


def test_a_moved_single_submission_of_an_unsynced_payload_survives_a_crash_after_it_returns():
    fs, handle, payloads = unsynced_payloads(1)
    submit(handle, payloads[0], "camp/a", move=True)
    assert crash_problems(fs, handle) == []
    assert sorted(jobs_after_crash(fs, handle, payloads)) == payloads


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "single"])
def test_a_crash_at_every_write_of_a_move_from_unsynced_payloads_leaves_no_job_without_its_payload(bulk):
    """The crash test above starts from synced payloads; this one from payloads a crash can still lose."""
    points = 0
    while True:
        fs, handle, payloads = unsynced_payloads(3)
        fs.arm_crash(points)
        try:
            if bulk:
                submit_many(handle, payloads, "camp/a", move=True)
            else:
                for payload in payloads:
                    submit(handle, payload, "camp/a", move=True)
        except SimulatedCrash:
            fs.crash()
            jobs_after_crash(fs, handle, payloads)  # every job found has its whole payload
            problems = Fsck(WorkspaceService(handle.ports).open(ROOT)).run()["problems"]
            assert {problem["code"] for problem in problems} <= {"orphaned_payload"}, (points, problems)
            points += 1
            continue
        assert crash_problems(fs, handle) == []
        assert sorted(jobs_after_crash(fs, handle, payloads)) == payloads
        break
    assert points > 10


class StuckRollback(Counting):
    """Once a copy has failed, removing a tree fails too (the rollback of a disk gone read-only)."""

    failed = False

    def copy_tree(self, source, destination, *, durable, staged=False):
        try:
            super().copy_tree(source, destination, durable=durable, staged=staged)
        except OSError:
            self.failed = True
            raise

    def rmtree(self, path):
        if self.failed:
            raise OSError(errno.EROFS, "Read-only file system", path)
        super().rmtree(path)


def test_a_rollback_that_fails_keeps_the_original_error_and_names_what_it_left():
    fs = StuckRollback(clock=FakeClock())
    handle = WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).init(ROOT)
    payloads = [write_payload(fs, f"/src/p{index}") for index in range(3)]
    fs.fail_copy = 2
    with pytest.raises(BulkSubmissionError) as failure:  # not a bare OSError of the rollback
        submit_many(handle, payloads, "camp/a")
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("cannot submit /src/p2 at placement 'camp/a': No space left on device; nothing was "
                              "submitted; the rollback failed too and left staged copy /ws/.httk-workflow/tmp/submit-")
    assert message.count("staged copy") == 2 and "(Read-only file system)" in message
    assert message.endswith(": see 'httk workflow workspace fsck'")
    assert failure.value.submitted == []
    # What could be taken back was: the id reservations are released.
    assert all(read_reservation(fs, handle.layout, job_id) is None for job_id in (
        "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"))


def test_two_writers_reserving_one_id_never_share_a_temp():
    """Two runs of one children commit reserve the same ids: each writes its own temp (named by its journal
    writer), so neither removes, nor renames into place, the other's half-written temp."""
    from httk.workflow.store.job_ids import Reservation, read_reservation, reserve_job_ids

    fs, handle, _payloads = workspace_with(0, durable=True)
    wanted = Reservation("00000000-0000-4000-8000-000000000001", "camp--x", "camp/a")
    bucket = posixpath.dirname(handle.layout.id_reservation(wanted.job_id))
    fs.makedirs(bucket)
    fs.write_staged(f"{bucket}/.{wanted.job_id}.bulk.other", b"", durable=False)  # the other writer, mid-write
    reserve_job_ids(fs, handle.layout, [wanted], durable=True, writer="mine")
    assert read_reservation(fs, handle.layout, wanted.job_id) == wanted
    assert fs.read_bytes(f"{bucket}/.{wanted.job_id}.bulk.other") == b""  # left to its writer
    assert not fs.exists(f"{bucket}/.{wanted.job_id}.bulk.mine")


def test_two_submissions_of_one_chosen_id_stage_under_names_of_their_own():
    """A replay of a chosen job id passes the id checks by design: its staged copy must not be the other's,
    which it would otherwise empty (rmtree) or fill while that one is still copying."""
    from httk.workflow.operations.submission import plan_submission

    _fs, handle, payloads = workspace_with(1)
    first, second = (plan_submission(handle, payloads[0], "camp/a", job_id="00000000-0000-4000-8000-0000000000aa")
                     for _ in range(2))
    assert first.key == second.key and first.staging != second.staging
    assert first.staging.startswith(f"{handle.layout.tmp}/submit-{first.key.job_id}-")


class StagingWatch(Counting):
    """Records how many staged copies ``tmp/`` held at each rename of one into place."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.held: list[int] = []

    def rename(self, source, destination, *, durable):
        if "/tmp/submit-" in source:
            self.held.append(sum(entry.name.startswith("submit-") for entry in self.scandir(posixpath.dirname(source))))
        super().rename(source, destination, durable=durable)


@pytest.mark.parametrize("durable", [True, False])
def test_tmp_never_holds_more_than_a_slice_of_staged_copies(monkeypatch, durable):
    """A directory of a whole chunk's names makes every creation and rename in it slower: a durable batch
    stages, syncs and places a slice at a time; one without syncs places each copy at once."""
    import httk.workflow.operations.bulk_submission as bulk

    monkeypatch.setattr(bulk, "_STAGED_SLICE", 3)
    fs, handle, payloads = workspace_with(8, durable=durable, filesystem=StagingWatch)
    submit_many(handle, payloads, "camp/a")
    assert fs.held == ([3, 2, 1, 3, 2, 1, 2, 1] if durable else [1] * 8)
    assert [entry.name for entry in fs.scandir(handle.layout.tmp)] == []
    if durable:  # each slice's copies synced before their renames; still one sync per directory
        fs.crash()
        assert len(jobs_after_crash(fs, handle, payloads)) == 8


def test_a_crash_at_every_write_of_a_sliced_batch_leaves_each_job_submitted_or_absent(monkeypatch):
    import httk.workflow.operations.bulk_submission as bulk

    monkeypatch.setattr(bulk, "_STAGED_SLICE", 2)
    points, partial = crash_at_every_write(5)
    assert points > 30 and partial
