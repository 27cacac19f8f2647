"""The report document (operations/report.py) and its atomic publication, on the in-memory filesystem."""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import Event
from httk.workflow.domain.model import Failure
from httk.workflow.operations.report import (
    FORMAT,
    STALE_SECONDS,
    ReportError,
    batch_job_ids,
    build_report,
    check_document,
    publish,
    remote_batch,
)
from httk.workflow.operations.submission import submit
from httk.workflow.ports import BatchJobStatus
from httk.workflow.protocol import JobSpec
from httk.workflow.testing import InMemoryFilesystem, SimulatedCrash
from memory_support import write_payload

TO_FAILED = [Event.REGISTER, Event.CLAIM, Event.LAUNCH, Event.PUBLISH, Event.COMMIT_FAIL]


def job(handle, name, placement, events, **last):
    marker = submit(handle, write_payload(handle.fs, f"/src/{name}"), placement).marker
    frame = handle.store.read_job(marker).frame
    for index, event in enumerate(events):
        changes = last if index == len(events) - 1 else {}
        marker, frame = handle.store.transition(marker, frame, event, **changes)
    return marker


def test_counts_placements_failures_and_history(handle, ports):
    job(handle, "a", "proj-a/00", [Event.REGISTER])
    job(handle, "b", "proj-a/01", [Event.REGISTER, Event.OPERATOR_PAUSE])
    ports.clock.advance(30)
    bad = [job(handle, f"f{index}", "proj-b", TO_FAILED, failure=Failure("bad_input", "no POSCAR"))
           for index in range(3)]
    job(handle, "g", "proj-c", TO_FAILED, failure=Failure("walltime", "killed"))
    job(handle, "s", "proj-c", [])
    document = build_report(handle)
    assert document["format"] == FORMAT and document["total"] == 7
    assert {kind: count for kind, count in document["counts"].items() if count} == {
        "submitted": 1, "ready": 1, "paused": 1, "failed": 4}
    assert {row["subtree"]: row["counts"] for row in document["placements"]} == {
        "proj-a": {"paused": 1, "ready": 1}, "proj-b": {"failed": 3}, "proj-c": {"failed": 1, "submitted": 1}}
    codes = document["failures"]["codes"]
    assert [(entry["code"], entry["jobs"]) for entry in codes] == [("bad_input", 3), ("walltime", 1)]
    assert len(codes[0]["examples"]) == 3
    assert {example["job"] for example in codes[0]["examples"]} == {str(marker.key) for marker in bad}
    assert codes[0]["examples"][0]["why"] == "failed: bad_input: no POSCAR"
    # Every transition is in the journal: 1 + 2 + 4 * 5 frames.
    assert document["history"]["frames"] == 23 and not document["history"]["collected"]
    assert sum(row["transitions"] for row in document["throughput"]["bins"]) == 23
    assert document["time_in_state"]["kinds"]["running"]["count"] == 4
    assert document["managers"] == [] and document["flapping"] == {"jobs": 0, "listed": []}
    assert check_document(document) is document


def test_slurm_manager_jobs_come_from_the_batch_directory(handle):
    for name in ("slurm-17.out", "slurm-9.out", "slurm-20_3.out", "manager.sbatch", "local-5.out"):
        handle.fs.write_atomic(f"{handle.layout.control}/batch/{name}", b"", durable=False)
    assert batch_job_ids(handle) == ["9", "17", "20_3"]
    document = build_report(handle)

    class Scheduler:
        name = "slurm"

        def status(self, job_ids):
            return {"9": BatchJobStatus("COMPLETED", True, True), "17": BatchJobStatus("RUNNING", False)}

    section = remote_batch(document, Scheduler(), "kappa")
    assert section["remote"] == "kappa" and section["batch_system"] == "slurm" and section["note"] is None
    assert [(job["job_id"], job["state"], job["finished"]) for job in section["jobs"]] == [
        ("9", "COMPLETED", True), ("17", "RUNNING", False), ("20_3", None, None)]

    class Shell(Scheduler):
        name = "local"

    assert remote_batch(document, Shell(), "here")["jobs"] == []


def test_a_document_of_another_format_or_version_is_refused():
    with pytest.raises(ReportError, match="printed no workspace report"):
        check_document({"counts": {}})
    with pytest.raises(ReportError, match="format version 2"):
        check_document({"format": FORMAT, "format_version": 2})


def test_publish_replaces_a_report_whole_and_refuses_anything_else(ports):
    fs = ports.fs
    publish(fs, "/site/report", {"report.json": b'{"format":"httk-workflow-report"}', "a.svg": b"<svg/>"},
            token="t1", durable=True)
    publish(fs, "/site/report", {"report.json": b'{"format":"httk-workflow-report","n":2}'}, token="t2",
            durable=True)
    assert sorted(entry.name for entry in fs.scandir("/site")) == ["report"]
    assert sorted(entry.name for entry in fs.scandir("/site/report")) == ["report.json"]
    assert b'"n":2' in fs.read_bytes("/site/report/report.json")
    fs.write_atomic("/home/thesis.tex", b"precious", durable=False)
    with pytest.raises(ReportError, match="holds no earlier report"):
        publish(fs, "/home", {"report.json": b"{}"}, token="t3", durable=False)
    assert [entry.name for entry in fs.scandir("/home")] == ["thesis.tex"]
    assert sorted(entry.name for entry in fs.scandir("/")) == ["home", "site"]
    fs.write_atomic("/file", b"x", durable=False)
    with pytest.raises(ReportError, match="is not a directory"):
        publish(fs, "/file", {}, token="t4", durable=False)


def test_flapping_jobs_are_the_ones_job_why_calls_flapping(handle):
    flapping = job(handle, "loop", "p", [Event.REGISTER, Event.OPERATOR_PAUSE, Event.OPERATOR_CONTINUE],
                   total_attempts=25)
    job(handle, "calm", "p", [Event.REGISTER, Event.OPERATOR_PAUSE, Event.OPERATOR_CONTINUE], total_attempts=3)
    found = build_report(handle)["flapping"]
    assert found["jobs"] == 1
    [entry] = found["listed"]
    assert (entry["job"], entry["attempts"], entry["kind"]) == (str(flapping.key), 25, "ready")
    assert entry["why"].startswith("flapping: 25 attempts under an unlimited budget")


def test_a_failed_publication_keeps_the_earlier_report(ports, monkeypatch):
    fs = ports.fs
    publish(fs, "/site/report", {"report.json": b'{"format":"httk-workflow-report","n":1}'}, token="t1",
            durable=False)

    def exchange(first, second, *, durable):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fs, "exchange", exchange)
    with pytest.raises(OSError, match="No space"):
        publish(fs, "/site/report", {"report.json": b'{"format":"httk-workflow-report","n":2}'}, token="t2",
                durable=False)
    assert [entry.name for entry in fs.scandir("/site")] == ["report"]
    assert b'"n":1' in fs.read_bytes("/site/report/report.json")


def report_bytes(n):
    return b'{"format":"httk-workflow-report","n":%d}' % n


def test_a_crash_at_any_step_of_publishing_leaves_the_old_or_the_new_report():
    outcomes = set()
    for step in range(100):
        fs = InMemoryFilesystem()
        publish(fs, "/site/report", {"report.json": report_bytes(1)}, token="t1", durable=True)
        fs.sync_tree("/")
        fs.arm_crash(step)
        try:
            publish(fs, "/site/report", {"report.json": report_bytes(2), "a.svg": b"<svg/>"}, token="t2",
                    durable=True)
        except SimulatedCrash:
            assert fs.read_bytes("/site/report/report.json") in (report_bytes(1), report_bytes(2))
        else:
            break
        fs.crash()
        survived = fs.read_bytes("/site/report/report.json")
        assert survived in (report_bytes(1), report_bytes(2)), step
        outcomes.add(survived)
        fs.clock.advance(STALE_SECONDS)  # the next publication removes what the crashed one left
        publish(fs, "/site/report", {"report.json": report_bytes(3)}, token="t3", durable=True)
        assert [entry.name for entry in fs.scandir("/site")] == ["report"], step
        assert fs.read_bytes("/site/report/report.json") == report_bytes(3)
    else:
        pytest.fail("publish never completed")
    assert outcomes == {report_bytes(1), report_bytes(2)}


def test_publishing_sweeps_only_a_crashed_publishers_leftovers():
    fs = InMemoryFilesystem()
    publish(fs, "/site/report", {"report.json": report_bytes(1)}, token="t1", durable=False)
    fs.write_atomic("/site/.report.old-crashed/report.json", report_bytes(0), durable=False)
    fs.write_atomic("/site/.report.new-crashed/report.json", report_bytes(0), durable=False)
    fs.write_atomic("/site/.other.new-x/keep", b"not ours", durable=False)
    fs.clock.advance(STALE_SECONDS)
    fs.write_atomic("/site/.report.new-running/report.json", report_bytes(9), durable=False)  # a live publisher's
    publish(fs, "/site/report", {"report.json": report_bytes(2)}, token="t2", durable=False)
    assert sorted(entry.name for entry in fs.scandir("/site")) == [".other.new-x", ".report.new-running", "report"]
    assert fs.read_bytes("/site/report/report.json") == report_bytes(2)


def test_two_publishers_at_once_both_succeed_and_leave_one_report(monkeypatch):
    fs = InMemoryFilesystem()
    publish(fs, "/site/report", {"report.json": report_bytes(1)}, token="t1", durable=False)
    real = {"exchange": fs.exchange, "rename": fs.rename}
    calls = []

    def interleaved(method):
        def call(first, second, *, durable):
            if first.endswith(".new-t2") and not calls:
                # The first publisher is about to move its new report in: the second one runs to its end.
                calls.append(first)
                publish(fs, "/site/report", {"report.json": report_bytes(3)}, token="t3", durable=False)
            real[method](first, second, durable=durable)
        return call

    for method in real:
        monkeypatch.setattr(fs, method, interleaved(method))
    publish(fs, "/site/report", {"report.json": report_bytes(2)}, token="t2", durable=False)
    assert [entry.name for entry in fs.scandir("/site")] == ["report"]
    assert fs.read_bytes("/site/report/report.json") == report_bytes(2)


def test_publishing_into_a_missing_directory_renames_without_replacing(monkeypatch):
    fs = InMemoryFilesystem()
    real_rename = fs.rename

    def rename(source, destination, *, durable):
        # Another publisher places its report between this one's check and its rename.
        monkeypatch.setattr(fs, "rename", real_rename)
        publish(fs, "/site/report", {"report.json": report_bytes(3)}, token="t3", durable=False)
        real_rename(source, destination, durable=durable)

    monkeypatch.setattr(fs, "rename", rename)
    publish(fs, "/site/report", {"report.json": report_bytes(2)}, token="t2", durable=False)
    assert [entry.name for entry in fs.scandir("/site")] == ["report"]
    assert fs.read_bytes("/site/report/report.json") == report_bytes(2)


def realized(handle, name, runner_path, events=()):
    """A job whose workspace runner is ``runner_path`` (the store need not hold it: only job.json is read)."""
    spec = JobSpec(name=name, workflow="w", runner_source="workspace", runner_path=runner_path,
                   runner_sha256="a" * 64, tag="t")
    payload = write_payload(handle.fs, f"/src/{name}", spec)
    marker = submit(handle, payload, "p", allow_missing_runner=True).marker
    frame = handle.store.read_job(marker).frame
    for event in events:
        marker, frame = handle.store.transition(marker, frame, event)
    return marker


def test_counts_by_realization_come_from_each_jobs_job_json(handle):
    job(handle, "native", "p", [Event.REGISTER])
    realized(handle, "flow", "languages/jobflow", [Event.REGISTER])
    realized(handle, "flow2", "languages/jobflow")
    realized(handle, "v1", "compat/httk-v1")
    lost = job(handle, "lost", "p", [])
    handle.fs.rmtree(f"{handle.store.payload_dir(lost)}/job.json")
    section = build_report(handle)["realizations"]
    assert (section["jobs_read"], section["complete"]) == (5, True)
    assert [(row["realization"], row["language"], row["total"], row["counts"]) for row in section["rows"]] == [
        ("httk-v1", None, 1, {"submitted": 1}),
        ("language", "jobflow", 2, {"ready": 1, "submitted": 1}),
        ("native", None, 1, {"ready": 1}),
        ("unreadable", None, 1, {"submitted": 1}),
    ]


def test_a_large_workspace_counts_realizations_of_a_bounded_sample(handle, monkeypatch):
    from httk.workflow.operations import report

    markers = [job(handle, f"j{index}", "p", []) for index in range(5)]
    reads = []
    real_read_spec = handle.store.read_spec
    monkeypatch.setattr(handle.store, "read_spec", lambda marker: reads.append(marker.job_id) or real_read_spec(marker))
    monkeypatch.setattr(report, "REALIZATION_SAMPLE", 3)
    section = build_report(handle)["realizations"]
    assert (section["jobs_read"], section["complete"]) == (3, False)
    assert sum(row["total"] for row in section["rows"]) == 3
    assert sorted(reads) == sorted(marker.job_id for marker in markers)[:3]  # the lowest job ids, nothing more
