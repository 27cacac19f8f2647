"""fsck names interrupted transfers (a warning) and transfer ledgers nothing can finish (a problem), in memory."""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import submit
from httk.workflow.operations.transfer import SourceSide
from httk.workflow.operations.transfer_flow import LocalEndpoint, Transfer
from httk.workflow.operations.transfer_import import DestinationSide
from httk.workflow.store.transfer_ledger import unfinished_sources
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import memory_ports
from memory_support import write_payload

A, B = "/ws/a", "/ws/b"


class Killed(Exception):
    """The transfer command stopping dead right after a ledger step, as SIGKILL would."""


def two_workspaces():
    """``a`` with two paused jobs, and an empty ``b``, on one in-memory filesystem."""
    ports = memory_ports()
    service = WorkspaceService(ports)
    a, b = service.init(A), service.init(B)
    for number in (1, 2):
        marker = submit(a, write_payload(ports.fs, f"/src/p{number}"), f"p/{number}").marker
        marker, frame = a.store.transition(marker, a.store.read_job(marker).frame, Event.REGISTER)
        a.store.transition(marker, frame, Event.OPERATOR_PAUSE, reason="travel")
    return ports, a, b


def transfer(a, b, stop_after=None, **options):
    """``transfer a b``; ``stop_after=(role, step)`` kills it right after that ledger step."""

    def record(role: str, step: str) -> None:
        if (role, step) == stop_after:
            raise Killed(f"{role}:{step}")

    def endpoint(handle, label):
        return LocalEndpoint(SourceSide(handle, label, on_record=record),
                             DestinationSide(handle, label, on_record=record), handle.fs, label)

    return Transfer(endpoint(a, a.reference), endpoint(b, b.reference), a.ports.ids).run(**options)


def fsck(handle, **options):
    return Fsck(WorkspaceService(handle.ports).open(handle.root), **options).run()


def test_an_interrupted_transfer_is_a_warning_on_both_sides_naming_its_resume_command():
    _, a, b = two_workspaces()
    with pytest.raises(Killed):
        transfer(a, b, stop_after=("destination", "imported"))
    resume = f"httk workflow transfer {a.reference} {b.reference} --resume"
    source = fsck(a)
    # Not damage: the jobs are safe at one end, so the workspace is clean and the exit status unaffected.
    assert source["clean"] and source["left_for_operator"] == 0 and source["problems"] == []
    [held] = source["unfinished_transfers"]
    assert (held["code"], held["role"], held["step"], held["destination"], len(held["jobs"]), held["resume"]) == \
        ("unfinished_transfer", "source", "sent", b.reference, 2, resume)
    assert held["message"].startswith(f"2 jobs held by unfinished transfer {held['transfer_id']} to {b.reference} "
                                      f"(at step sent)") and f"'{resume}'" in held["message"]
    [arriving] = fsck(b)["unfinished_transfers"]
    assert (arriving["transfer_id"], arriving["role"], arriving["step"], arriving["source"], len(arriving["jobs"]),
            arriving["resume"]) == (held["transfer_id"], "destination", "imported", a.reference, 2, resume)
    assert f"from {a.reference} (imported here, not acknowledged)" in arriving["message"]
    # --repair does not (cannot) finish a transfer: it stays a warning.
    assert fsck(a, repair=True)["unfinished_transfers"] == source["unfinished_transfers"]
    transfer(a, b, resume_only=True)
    for handle in (a, b):
        report = fsck(handle)
        assert report["clean"] and report["unfinished_transfers"] == []


def test_a_transfer_stopped_after_its_plan_counts_the_jobs_it_holds():
    _, a, b = two_workspaces()
    with pytest.raises(Killed):
        transfer(a, b, stop_after=("source", "detached"))
    assert len(list(a.store.iter_markers(StateKind.TRANSFERRING))) == 2
    [held] = fsck(a)["unfinished_transfers"]
    assert (held["step"], len(held["jobs"])) == ("detached", 2)
    assert fsck(b)["unfinished_transfers"] == []  # nothing reached b


def test_a_ledger_that_does_not_read_is_a_problem_naming_the_jobs_it_holds():
    ports, a, b = two_workspaces()
    with pytest.raises(Killed):
        transfer(a, b, stop_after=("source", "bundled"))
    [held] = fsck(a)["unfinished_transfers"]
    ports.fs.write_atomic(f"{held['path']}/steps/2.json", b"{not json", durable=True)
    before = ports.fs.operation_count
    report = fsck(a, repair=True)
    assert ports.fs.operation_count == before  # nothing written, even with --repair
    [problem] = report["problems"]
    assert problem["code"] == "transfer_ledger_unreadable" and problem["path"] == held["path"]
    assert "it holds 2 transferring job(s)" in problem["message"]
    assert problem["action"].startswith("left") and report["left_for_operator"] == 1
    assert report["unfinished_transfers"] == []


@pytest.mark.parametrize("jobs, problem", [
    (5, "steps/1.json: jobs is not a list of job objects"),
    (["p/1"], "steps/1.json: jobs is not a list of job objects"),
    ([{"job_id": "x"}], "steps/1.json: job 1 of jobs has no job_key"),
])
def test_a_plan_whose_jobs_is_not_a_list_of_jobs_is_a_damaged_ledger(jobs, problem):
    ports, a, b = two_workspaces()
    with pytest.raises(Killed):
        transfer(a, b, stop_after=("source", "bundled"))
    [held] = fsck(a)["unfinished_transfers"]
    path = f"{held['path']}/steps/1.json"
    plan = codec.decode_object(ports.fs.read_bytes(path), path)
    ports.fs.write_atomic(path, codec.encode({**plan, "jobs": jobs}), durable=True)
    report = fsck(a)  # reported, not a TypeError, and no job key spelled "None"
    [damaged] = report["problems"]
    assert damaged["code"] == "transfer_ledger_unreadable" and problem in damaged["message"]
    assert report["unfinished_transfers"] == []
    [listed] = unfinished_sources(ports.fs, a.layout, ports.clock)
    assert problem in listed["problem"] and listed["jobs"] == []


def test_a_transferring_job_whose_ledger_is_gone_is_a_problem():
    ports, a, b = two_workspaces()
    with pytest.raises(Killed):
        transfer(a, b, stop_after=("source", "detached"))
    [held] = fsck(a)["unfinished_transfers"]
    ports.fs.rmtree(held["path"])
    report = fsck(a)
    assert sorted(p["code"] for p in report["problems"]) == ["transfer_ledger_missing"] * 2
    assert f"transfer {held['transfer_id']} has no ledger here" in report["problems"][0]["message"]
    assert report["left_for_operator"] == 2


def test_a_ledger_directory_with_nothing_recorded_is_not_named():
    ports, a, _ = two_workspaces()
    ports.fs.makedirs(f"{A}/.httk-workflow/transfers/t-0123456789ab/steps")
    report = fsck(a)
    assert report["clean"] and report["unfinished_transfers"] == []
