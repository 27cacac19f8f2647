"""Transactional data and workdir batches through real attempts.

Spec 001 "Data and workdir changes"; spec 002 rows Attempt.put, Attempt.remove,
Attempt.workdir_batch, Attempt.initialize; docs/workflow_filesystem_api.md
"The outcome" (transaction/manifest.json) and "Runner-side files of the workdir".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (relative POSIX path -> text)."""
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


TRANSACTIONAL = """
run = Runner("e2e")


@run.step
def main(a):
    (a.workdir / "energy.json").write_text('{"energy": -12.5}', encoding="utf-8")
    bands = a.workdir / "bands"
    bands.mkdir()
    (bands / "k0.dat").write_text("0.0", encoding="utf-8")
    (bands / "k1.dat").write_text("0.5", encoding="utf-8")
    a.put(a.workdir / "energy.json", "results/energy.json")
    a.put("bands", "results/bands")
    a.remove("scratch", missing_ok=True)
    # Nothing reaches the data directory before the outcome is committed.
    save(a, {"data": str(a.data), "before_commit": sorted(p.name for p in a.data.iterdir())})
    a.advance("second")


@run.step
def second(a):
    seen = sorted(p.relative_to(a.data).as_posix() for p in a.data.rglob("*") if p.is_file())
    (a.workdir / "energy.json").write_text('{"energy": -13.0}', encoding="utf-8")
    a.put("energy.json", "results/energy.json")
    a.remove("results/bands")
    a.put("energy.json", "summary/final.json")
    save(a, {"seen": seen})
    a.succeed()
"""


def test_put_and_remove_are_applied_exactly_once_in_op_order(harness) -> None:
    ref = harness.publish(TRANSACTIONAL)
    job = harness.submit(ref, data_mode="transactional")
    harness.finish(job, "succeeded")
    first, second = harness.attempts(job)
    data = harness.data(job)
    report = harness.report(job, 0)
    assert report["data"] == str(data) and report["before_commit"] == []
    assert harness.report(job, 1)["seen"] == ["results/bands/k0.dat", "results/bands/k1.dat", "results/energy.json"]
    manifest = json.loads((first / "outcome.ready" / "transaction" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest == {
        "format": "httk-workflow-transaction",
        "format_version": 1,
        "operations": [
            {"id": "op-0001", "op": "put", "destination": "results/energy.json", "source": "files/op-0001"},
            {"id": "op-0002", "op": "put", "destination": "results/bands", "source": "files/op-0002"},
            {"id": "op-0003", "op": "remove", "destination": "scratch", "missing_ok": True},
        ],
    }
    staged = first / "outcome.ready" / "transaction" / "files"
    assert tree(staged) == {"op-0001": '{"energy": -12.5}', "op-0002/k0.dat": "0.0", "op-0002/k1.dat": "0.5"}
    later = json.loads((second / "outcome.ready" / "transaction" / "manifest.json").read_text(encoding="utf-8"))
    assert [op["id"] for op in later["operations"]] == ["op-0001", "op-0002", "op-0003"]  # per attempt, from 1
    assert tree(data) == {"results/energy.json": '{"energy": -13.0}', "summary/final.json": '{"energy": -13.0}'}
    # each op is ledgered once by the commit that applied it
    assert sorted(p.name for p in (first / "commit" / "ops").iterdir()) == ["op-0001", "op-0002", "op-0003"]
    assert sorted(p.name for p in (second / "commit" / "ops").iterdir()) == ["op-0001", "op-0002", "op-0003"]
    # the replaced energy file and the removed bands went to the job's trash, not into the data
    trash = harness.root / ".httk-workflow" / "data" / job.job_id / "trash" / second.name
    assert tree(trash) == {"op-0001": '{"energy": -12.5}', "op-0002/k0.dat": "0.0", "op-0002/k1.dat": "0.5"}


CHILD_DATA = """
run = Runner("e2e")


@run.step
def start(a):
    a.spawn(ChildSpec(step="child"), label="worker")
    a.gather("collect")


@run.step
def child(a):
    (a.workdir / "out.txt").write_text("from the child", encoding="utf-8")
    a.put("out.txt", "out.txt")
    a.succeed()


@run.step
def collect(a):
    child = a.children["worker"]
    save(a, {"data": str(child.data), "text": (child.data / "out.txt").read_text(encoding="utf-8")})
    a.succeed()
"""


def test_a_gathered_transactional_child_exposes_its_data(harness) -> None:
    ref = harness.publish(CHILD_DATA)
    parent = harness.submit(ref, step="start", data_mode="transactional")
    harness.finish(parent, "succeeded")
    child = harness.child(parent, "worker")
    assert child["data_mode"] == "transactional"  # inherited
    assert harness.report(parent, 1) == {"data": str(harness.data(child["job_id"])), "text": "from the child"}


def test_a_remove_of_missing_data_fails_the_job_not_the_manager(harness) -> None:
    ref = harness.publish(
        """
        run = Runner("e2e")


        @run.step
        def main(a):
            a.remove("never-written")
            a.succeed()
        """
    )
    job = harness.submit(ref, data_mode="transactional")
    try:
        status = harness.run()
    except Exception as error:  # the bug is exactly that this escapes Manager.run
        pytest.fail(f"the manager died committing the outcome: {error!r}")
    assert status == 0
    assert harness.show(job)["kind"] == "failed"


WORKDIR_BATCH = """
run = Runner("e2e")


@run.step
def main(a):
    runner_dir = a.workdir / ".httk-runner"
    seen = {
        "files": sorted(p.name for p in a.workdir.iterdir() if p.is_file()),
        "ready": sorted(p.name for p in (runner_dir / "workdir-ready").iterdir())
        if (runner_dir / "workdir-ready").exists() else [],
        "applied": sorted(p.name for p in (runner_dir / "workdir-applied").iterdir())
        if (runner_dir / "workdir-applied").exists() else [],
        "new": (a.workdir / "new.txt").read_text(encoding="utf-8") if (a.workdir / "new.txt").exists() else None,
    }
    save(a, seen)
    if a.context.attempt_ordinal == 1:
        with a.workdir_batch() as batch:
            batch.write("new.txt", "written by the batch")
            batch.rename("old.txt", "renamed.txt")
            batch.remove("gone.txt")
            a.state["batch"] = batch.id
            batch.seal()
            # Die between sealing and applying: the next attempt's initialize must finish the batch.
            os.kill(os.getpid(), 9)
    with a.workdir_batch() as batch:
        batch.write("second.txt", "applied at once")
    a.succeed()
"""


def test_a_sealed_workdir_batch_is_replayed_after_an_interrupted_attempt(harness) -> None:
    ref = harness.publish(WORKDIR_BATCH)
    job = harness.submit(ref, files={"old.txt": "old", "gone.txt": "gone", "kept.txt": "kept"})
    show = harness.finish(job, "succeeded")
    assert show["total_attempts"] == 2 and show["unclean_exits"] == 1
    first, second = harness.attempts(job)
    assert not (first / "outcome.ready").exists()
    batch_id = harness.state(job)["batch"]
    assert harness.report(job, 0) == {
        "files": ["gone.txt", "kept.txt", "old.txt"],
        "ready": [],
        "applied": [],
        "new": None,
    }
    # Attempt.initialize (through Runner.main) applied the sealed batch before the handler ran.
    assert harness.report(job, 1) == {
        "files": ["kept.txt", "new.txt", "renamed.txt"],
        "ready": [],
        "applied": [batch_id],
        "new": "written by the batch",
    }
    workdir = harness.workdir(job)
    assert tree(workdir / ".httk-runner" / "workdir-applied" / batch_id)["ops.json"]
    assert sorted(p.name for p in workdir.iterdir() if p.is_file()) == [
        "kept.txt",
        "new.txt",
        "renamed.txt",
        "second.txt",
    ]
    assert len(list((workdir / ".httk-runner" / "workdir-applied").iterdir())) == 2
    assert not list((workdir / ".httk-runner" / "workdir-ready").iterdir())
