"""Crash a manager at every filesystem operation of a run with children, a join and data; a second finishes.

Whatever the crash point: every job ends exactly once, each spawned child exists exactly once (one whole payload,
one marker), the parent resumes once, and fsck finds nothing.
"""

from __future__ import annotations

import itertools

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import JobKey
from httk.workflow.protocol import JobSpec
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner
from memory_support import crash_first_run, fsck_problems, kinds

LABELS = ("a", "b", "c", "d", "e")
CHILD_JOB = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()


def scenario(points, *, join=True, children=2):
    ports, handle, [marker] = memory_workspace(data_mode="transactional")
    parent_id = marker.job_id
    counter = itertools.count(1)

    def tree(launch):
        if launch.env["HTTK_WORKFLOW_JOB_ID"] != parent_id:
            return {"outcome.json": outcome_document()}
        if launch.env["HTTK_WORKFLOW_STEP"] == "after":
            return {"outcome.json": outcome_document()}
        spawned, files = [], {}
        for label in LABELS[:children]:
            key = JobKey(f"cccccccc-0000-4000-8000-{next(counter):012x}", label)
            payload = f"jobs/{key}"
            spawned.append({"label": label, "job_id": key.job_id, "job_key": str(key),
                            "placement": "kids/x", "payload": payload})
            files[f"children/{payload}/job.json"] = CHILD_JOB
            files[f"children/{payload}/run.sh"] = b"#!/bin/sh\n"
        final = outcome_document("wait", join={"step": "after", "children": []}) if join else outcome_document()
        return {
            "outcome.json": final,
            "children/spawn.json": {"format": "httk-workflow-spawn", "format_version": 1, "children": spawned},
            "transaction/manifest.json": {"format": "httk-workflow-transaction", "format_version": 1, "operations": [
                {"id": "op-0001", "op": "put", "destination": "r", "source": "files/op-0001"}]},
            "transaction/files/op-0001": b"result",
            **files,
        }

    publish = scripted_runner(ports.fs, tree)
    fresh, crashed = crash_first_run(handle, publish, points)
    memory_manager(fresh, publish, manager_id="m-b", lease_seconds=10.0).run()
    return ports, fresh, parent_id, crashed


def check(ports, handle, parent_id, join=True, children=2):
    assert kinds(handle) == {"succeeded": children + 1}, kinds(handle)
    assert fsck_problems(handle) == []
    payloads = [entry.name for entry in ports.fs.scandir("/ws/kids/x")]
    assert len(payloads) == children, payloads
    for name in payloads:  # whole: nothing staged is left, the parent record reads back
        private = sorted(entry.name for entry in ports.fs.scandir(f"/ws/kids/x/{name}/.httk-job"))
        assert private == ["parent.json"], (name, private)
        record = codec.decode_object(ports.fs.read_bytes(f"/ws/kids/x/{name}/.httk-job/parent.json"), name)
        assert record["job_id"] == parent_id and record["staged_marker"] is True
    assert not [entry.path for bucket in ports.fs.scandir("/ws/.httk-workflow/ids")
                for entry in ports.fs.scandir(bucket.path) if entry.name.startswith(".")]
    markers = list(handle.store.iter_markers(StateKind.SUCCEEDED))
    assert len({marker.job_id for marker in markers}) == children + 1
    notes = [entry.name for entry in ports.fs.scandir(f"/ws/.httk-workflow/joins/{parent_id}")]
    assert len(notes) == children, notes
    [parent] = [marker for marker in markers if marker.job_id == parent_id]
    frame = handle.store.read_frame(parent)
    assert frame.data_generation == 1
    if join:
        assert frame.step == "after" and frame.activation_ordinal == 2


def sweep(join=True, children=2):
    points = 0
    failures = []
    while points < 1500:
        ports, handle, parent_id, crashed = scenario(points, join=join, children=children)
        try:
            check(ports, handle, parent_id, join, children)
        except AssertionError as error:
            failures.append((points, str(error)[:200]))
        if not crashed:
            break
        points += 1
    assert not crashed, "the sweep never reached a crash-free run"
    assert points > 30
    return failures


def test_whole_run_with_children_join_and_data_survives_a_crash_at_every_operation():
    assert sweep() == []


def test_spawn_without_join_survives_a_crash_at_every_operation():
    assert sweep(join=False) == []


def test_a_spawn_of_several_children_created_as_one_group_commit_survives_a_crash_at_every_operation():
    """Five children: a crash between any two of the grouped writes, syncs and renames (and the power loss
    it makes) leaves each child created once or not at all, and the replayed commit creates the rest."""
    assert sweep(children=5) == []
