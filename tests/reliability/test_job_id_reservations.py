"""A job id belongs to one job in the whole workspace (issue 10, "Runner-published identifiers are untrusted").

``attempts/``, ``workdirs/``, ``data/`` and ``joins/`` are keyed by the job id
alone, so the id is reserved workspace-wide (``.httk-workflow/ids/<2>/<id>``)
before anything else of a job is written. A second job with the same id at
another placement is refused even before the first has run, which the
per-placement marker check and the directory traces could not see: by
submission (one line naming the job, nothing written) and by a spawn
(``protocol_error``, nothing created). ``workspace fsck`` reports jobs of older
workspaces without a reservation and ``--repair`` creates them; gc never
collects one.
"""

from __future__ import annotations

import pytest
from commit_support import (
    CHILD,
    CHILD_ID,
    OTHER,
    OTHER_ID,
    ROOT,
    add_job,
    fsck_problems,
    manager,
    markers_of,
    protocol_failure,
    publisher,
    race_id_reservation,
    run_spawner,
    workspace,
)

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.gc import GarbageCollector
from httk.workflow.operations.submission import SubmissionError, submit


def _names(fs, top: str = ROOT) -> list[str]:
    out, pending = [], [top]
    while pending:
        for entry in fs.scandir(pending.pop()):
            out.append(entry.path)
            if entry.is_dir and not entry.is_symlink:
                pending.append(entry.path)
    return sorted(out)


def _reservation(handle, job_id: str) -> dict:
    path = handle.layout.id_reservation(job_id)
    return codec.decode_object(handle.fs.read_bytes(path), path)


def test_a_spawn_naming_the_id_of_a_job_elsewhere_that_has_not_run_yet_is_a_clash():
    ports, handle = workspace()
    existing = add_job(handle, "elsewhere", job_id=CHILD_ID)  # submitted, never claimed: no directory of its id
    parent = add_job(handle)
    # This manager serves only the parent's placement: the existing job stays unrun.
    run_spawner(handle, ports, parent, prefixes=("p",))

    message = protocol_failure(handle, parent.job_id)
    assert f"job id {CHILD_ID} already belongs to job {existing.key} at elsewhere" in message
    assert markers_of(handle, CHILD_ID) == [existing]
    assert not ports.fs.exists(f"{ROOT}/kids")
    assert not ports.fs.exists(handle.layout.job_attempts(CHILD_ID))
    assert _reservation(handle, CHILD_ID)["placement"] == "elsewhere"


def test_a_spawn_refused_midway_releases_the_ids_it_reserved_so_a_later_spawn_may_use_them():
    """Child b's id is taken between the plan and its reservation; child a's reservation is withdrawn."""
    ports, handle = workspace()
    first = add_job(handle)
    fs = ports.fs
    # Another job, at another placement, takes b's id.
    race_id_reservation(handle, OTHER_ID, lambda: submit(handle, "/src/p", "elsewhere", job_id=OTHER_ID))
    children = [("a", CHILD, "kids"), ("b", OTHER, "kids")]
    run_spawner(handle, ports, first, children, prefixes=("p",))
    message = protocol_failure(handle, first.job_id)
    assert f"job id {OTHER_ID} already belongs to job {OTHER_ID} at elsewhere" in message
    assert not fs.exists(handle.layout.id_reservation(CHILD_ID)), "the refused outcome's reservation was kept"
    assert markers_of(handle, CHILD_ID) == [] and not fs.exists(f"{ROOT}/kids")

    second = add_job(handle)
    run_spawner(handle, ports, second, [("a", CHILD, "kids")], prefixes=("p",))
    [child] = markers_of(handle, CHILD_ID)
    assert child.kind == StateKind.SUBMITTED
    reserved = _reservation(handle, CHILD_ID)
    assert reserved["parent"]["job_id"] == second.job_id and reserved["origin"] == "spawn"


def test_submission_refuses_an_id_reserved_at_another_placement_naming_the_job_and_writes_nothing():
    ports, handle = workspace()
    existing = add_job(handle, "a", job_id=CHILD_ID)
    before = _names(ports.fs)
    with pytest.raises(SubmissionError) as refused:
        submit(handle, "/src/p", "b", job_id=CHILD_ID)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"cannot submit at placement 'b': job id {CHILD_ID} already belongs to job "
                              f"{existing.key} at a")
    assert _names(ports.fs) == before


def test_fsck_reports_a_job_without_a_reservation_and_repair_creates_it():
    ports, handle = workspace()
    job = add_job(handle, "a")
    child_like = add_job(handle, "b")
    for marker in (job, child_like):  # a workspace from before reservations
        ports.fs.remove(handle.layout.id_reservation(marker.job_id))
    problems = fsck_problems(handle)
    assert sorted((p["code"], p["job"]) for p in problems) == sorted(
        [("missing_id_reservation", str(job.key)), ("missing_id_reservation", str(child_like.key))])
    assert not ports.fs.exists(handle.layout.id_reservation(job.job_id)), "a check writes nothing"

    report = Fsck(handle, repair=True).run()
    assert [p["action"] for p in report["problems"]] == ["repaired", "repaired"]
    assert report["left_for_operator"] == 0
    assert _reservation(handle, job.job_id)["job_key"] == str(job.key)
    assert _reservation(handle, job.job_id)["placement"] == "a"
    assert fsck_problems(handle) == []
    # And the repaired reservation protects the id as one made by submission does.
    with pytest.raises(SubmissionError, match=f"already belongs to job {job.key} at a"):
        submit(handle, "/src/p", "c", job_id=job.job_id)


def test_fsck_reports_two_jobs_sharing_an_id_that_an_old_workspace_let_through():
    ports, handle = workspace()
    first = add_job(handle, "a", job_id=CHILD_ID)
    ports.fs.remove(handle.layout.id_reservation(CHILD_ID))  # made before reservations existed
    second = add_job(handle, "b", job_id=CHILD_ID)  # nothing left to see of the first: accepted
    problems = fsck_problems(handle)
    [conflict] = [problem for problem in problems if problem["code"] == "id_reservation_conflict"]
    assert conflict["job"] == str(first.key) and f"job {first.key} at a has an id reserved" in conflict["message"]
    assert f"reserved by job {second.key} at b" in conflict["message"]
    assert "duplicate_marker" in {problem["code"] for problem in problems}
    assert Fsck(handle, repair=True).run()["left_for_operator"] >= 1


def test_gc_never_collects_reservations():
    ports, handle = workspace()
    job = add_job(handle)
    manager(handle, ports, publisher(ports.fs, lambda launch: None)).run()
    [done] = markers_of(handle, job.job_id)
    assert done.kind == StateKind.SUCCEEDED
    for name in ("attempt_control_days", "trash_days", "journal_days"):
        handle.set_policy(f"retention.{name}", 0)
    ports.clock.advance(10 * 86400.0)
    collected = GarbageCollector(handle).run()
    assert any(item["category"] == "attempt_control" for item in collected["removed"])
    assert _reservation(handle, job.job_id)["job_key"] == str(job.key)
