"""One-pass bulk submission from job definitions (``submit_specs``) and the batch's shared checks.

``submit_specs`` must leave exactly what preparing each spec's payload and moving it in
with ``submit_many`` leaves, leave every job submitted in full or absent at every crash
point, and refuse a bad spec before its first write. A batch checks each path shape and
each distinct job.json once; the verdicts must stay those of the per-job checks.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from test_bulk_submission import Counting, image, placements

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations import submission
from httk.workflow.operations.bulk_submission import PHASES, BulkSubmissionError, submit_many, submit_specs
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import SubmissionError
from httk.workflow.protocol import JobSpec
from httk.workflow.store.job_ids import read_reservation
from httk.workflow.store.runners import publish_runner
from httk.workflow.store.workspaces import Ports, WorkspaceService
from httk.workflow.testing import FakeClock, SequentialIds, SimulatedCrash
from memory_support import ROOT

#: The runner every job pins, published by :func:`fresh`: a job of its definition alone has no payload runner.
RUNNER = b"#!/bin/sh\n"
RUNNER_SHA256 = hashlib.sha256(RUNNER).hexdigest()


def fresh(*, durable: bool = True):
    fs = Counting(clock=FakeClock())
    handle = WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).init(ROOT, durable=durable)
    fs.write_atomic("/src/run.sh", RUNNER, durable=False)
    assert publish_runner(fs, handle.layout, "/src/run.sh", "run.sh")["sha256"] == RUNNER_SHA256
    fs.sync_tree("/")
    fs.file_syncs = fs.dir_syncs = 0
    return fs, handle


def specs(count: int) -> list[JobSpec]:
    return [JobSpec(name=f"job{index}", workflow="w", runner_path="run.sh", runner_source="workspace",
                    runner_sha256=RUNNER_SHA256, tag="t" if index % 2 else None, priority=index)
            for index in range(count)]


@pytest.mark.parametrize("durable", [True, False])
def test_specs_leave_exactly_what_prepared_payloads_moved_in_leave(durable):
    fs_moved, handle_moved = fresh(durable=durable)
    payloads = []
    for index, spec in enumerate(specs(5)):
        fs_moved.write_atomic(f"/src/p{index}/job.json", spec.to_bytes(), durable=True)
        payloads.append(f"/src/p{index}")
    moved = submit_many(handle_moved, payloads, placements(5), move=True)
    fs_specs, handle_specs = fresh(durable=durable)
    direct = submit_specs(handle_specs, specs(5), placements(5))
    assert [job.marker.placement for job in direct] == placements(5)
    assert [job.marker.priority for job in direct] == list(range(5))
    assert image(fs_specs, [job.marker.job_id for job in direct]) == image(fs_moved, [j.marker.job_id for j in moved])
    if durable:
        fs_specs.crash()  # everything it wrote was synced before it returned
        assert len(list(WorkspaceService(handle_specs.ports).open(ROOT).store.iter_markers(StateKind.SUBMITTED))) == 5
    else:
        assert (fs_specs.file_syncs, fs_specs.dir_syncs) == (0, 0)


def test_a_crash_at_every_write_of_a_spec_batch_leaves_each_job_submitted_or_absent():
    points = 0
    while True:
        fs, handle = fresh()
        fs.arm_crash(points)
        try:
            submit_specs(handle, specs(4), placements(4))
        except SimulatedCrash:
            fs.crash()
            reopened = WorkspaceService(handle.ports).open(ROOT)
            for marker in reopened.store.iter_markers(StateKind.SUBMITTED):
                view = reopened.store.read_job(marker)
                assert view.spec is not None, (points, view.spec_error)  # whole under its marker
                held = read_reservation(fs, reopened.layout, marker.job_id)
                assert held is not None and held.job_key == str(marker.key), points
            problems = Fsck(reopened).run()["problems"]
            assert {problem["code"] for problem in problems} <= {"orphaned_payload"}, (points, problems)
            points += 1
            continue
        fs.crash()
        assert len(list(WorkspaceService(handle.ports).open(ROOT).store.iter_markers(StateKind.SUBMITTED))) == 4
        break
    assert points > 20  # it crashed inside the batch, at every step


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda spec: JobSpec(name=spec.name, workflow="w", runner_path="../run.sh"),
         "job spec 2 (name 'job1'): job.json @ $.runner.path: expected a relative path without '..'"),
        (lambda spec: JobSpec(name=spec.name, workflow="w", runner_path="run.sh", runner_source="workspace"),
         "job spec 2 (name 'job1'): job.json @ $.runner.sha256"),
        (lambda spec: "not a spec", "job spec 2 is a str, not a JobSpec"),
        (lambda spec: JobSpec(name=spec.name, workflow="w", runner_path="run.sh"),
         "job spec 2 (name 'job1') names payload runner 'run.sh', but a job submitted from its definition has a "
         "payload of job.json alone; prepare a payload directory holding the runner (prepare_job_payload)"),
    ],
    ids=["bad-runner-path", "unpinned-workspace-runner", "not-a-spec", "payload-runner"],
)
def test_a_bad_spec_refuses_the_batch_naming_it_and_writes_nothing(spoil, expected):
    fs, handle = fresh()
    batch = specs(3)
    batch[1] = spoil(batch[1])
    before, operations = image(fs, []), fs.operation_count
    with pytest.raises(SubmissionError) as refusal:
        submit_specs(handle, batch, "camp/a")
    message = str(refusal.value)
    assert "\n" not in message and message.startswith(expected), message
    assert fs.operation_count == operations and image(fs, []) == before


def test_a_spec_batch_refuses_a_placement_too_long_for_a_later_shape(monkeypatch):
    """The shape cache must not let a longer key (another shape) past the path limit."""
    fs, handle = fresh()
    untagged, tagged = specs(1)[0], JobSpec(name="long", workflow="w", runner_path="run.sh", runner_source="workspace",
                                             runner_sha256=RUNNER_SHA256, tag="t" * 48)

    def fits(spec: JobSpec, place: str) -> bool:
        try:
            submission.plan_spec(handle, spec, place, label="probe")
        except SubmissionError:
            return False
        return True

    # The longest placement an untagged job fits at: a key 50 bytes longer then does not.
    deep = "/".join(["p" * 200] * 19)
    place = next(f"{deep}/{'q' * size}" for size in range(200, 0, -1) if fits(untagged, f"{deep}/{'q' * size}"))
    assert not fits(tagged, place)
    operations = fs.operation_count
    with pytest.raises(SubmissionError, match=r"^job spec 3 \(name 'long'\): placement .* too long"):
        submit_specs(handle, [untagged, untagged, tagged], place)
    assert fs.operation_count == operations
    checked = []
    real = submission.check_path_lengths
    monkeypatch.setattr(submission, "check_path_lengths", lambda *a: checked.append(1) or real(*a))
    submit_specs(handle, specs(6), "camp/a")
    assert len(checked) == 2  # two shapes (tagged and untagged keys), six jobs


def test_a_payload_batch_validates_each_distinct_job_json_once(monkeypatch):
    fs, handle = fresh()
    data = specs(1)[0].to_bytes()
    for index in range(4):
        fs.write_atomic(f"/src/p{index}/job.json", data, durable=True)
    parsed = []
    real = submission.parse_job_bytes
    monkeypatch.setattr(submission, "parse_job_bytes", lambda *a: parsed.append(1) or real(*a))
    jobs = submit_many(handle, [f"/src/p{index}" for index in range(4)], "camp/a")
    assert len(jobs) == 4 and len({job.marker.job_id for job in jobs}) == 4
    assert len(parsed) == 1


def test_spec_progress_is_told_every_job_of_every_phase():
    fs, handle = fresh()
    told: dict[str, int] = {}
    submit_specs(handle, specs(5), "camp/a", progress=lambda phase, jobs: told.__setitem__(phase, told.get(phase, 0)
                                                                                          + jobs))
    assert told == dict.fromkeys(PHASES, 5)


def test_a_spec_batch_refuses_mismatched_placements_up_front():
    fs, handle = fresh()
    operations = fs.operation_count
    with pytest.raises(SubmissionError, match=re.escape("3 specs but 2 placements; give one placement per spec")):
        submit_specs(handle, specs(3), ["camp/a", "camp/b"])
    assert fs.operation_count == operations


@pytest.mark.parametrize("durable", [True, False])
def test_a_generated_id_is_not_probed_but_a_clash_is_still_refused_and_taken_back(monkeypatch, durable):
    from httk.workflow.store import job_ids

    fs, handle = fresh(durable=durable)
    first = submit_specs(handle, specs(2), "camp/a")
    probes = []
    real = job_ids.read_reservation
    monkeypatch.setattr(job_ids, "read_reservation", lambda *a: probes.append(a[2]) or real(*a))
    # A handle whose id generator repeats the ids already taken (a fresh random UUID never would).
    again = WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).open(ROOT)
    again.ports.ids.new_id()  # the workspace id the first init drew
    before = image(fs, [])
    with pytest.raises(SubmissionError) as refusal:
        submit_specs(again, specs(3), "camp/b")
    assert str(refusal.value).startswith(
        f"cannot submit at placement 'camp/b': job id {first[0].marker.job_id} already belongs to job "
        f"{first[0].marker.key} at camp/a")
    assert image(fs, []) == before  # the chunk was taken back
    assert probes == [first[0].marker.job_id]  # read once, to name the holder: never probed per job


def test_a_spec_batch_failing_part_way_keeps_the_jobs_with_a_marker_and_names_the_rest():
    fs, handle = fresh()
    fs.fail_marker = 3
    with pytest.raises(BulkSubmissionError) as failure:
        submit_specs(handle, specs(4), "camp/a", chunk=2)
    assert str(failure.value).startswith(
        "cannot submit job spec 4 (name 'job3') at placement 'camp/a': No space left on device; the first 3 of 4 "
        "jobs were submitted, the other 1 were not (submit those specs again)")
    assert [job.spec.name for job in failure.value.submitted] == ["job0", "job1", "job2"]
    assert Fsck(handle).run()["problems"] == []  # the fourth job was taken back whole
    fs.crash()  # the three survive power loss (the take-back is not synced: at most an orphan comes back)
    reopened = WorkspaceService(handle.ports).open(ROOT)
    assert len(list(reopened.store.iter_markers(StateKind.SUBMITTED))) == 3
    assert {problem["code"] for problem in Fsck(reopened).run()["problems"]} <= {"orphaned_payload"}
