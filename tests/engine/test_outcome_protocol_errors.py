"""A runner that publishes garbage in outcome.ready/: the manager must survive and fail the job cleanly.

Every case runs a whole manager in memory; the parent job's runner publishes the tree under test,
any child runs to success.
"""

from __future__ import annotations

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import JobKey
from httk.workflow.protocol import JobSpec
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner
from memory_support import frame_of, kinds

CHILD_ID = "11111111-1111-4111-8111-111111111111"
CHILD_KEY = str(JobKey(CHILD_ID, "c1"))
CHILD_JOB = JobSpec(name="c", workflow="w", runner_path="run.sh", tag="c1").to_bytes()


def run_with(tree_for_parent, *, data_mode="none"):
    """Run one job whose first attempt publishes ``tree_for_parent``; children and later steps succeed."""
    ports, handle, [marker] = memory_workspace(data_mode=data_mode)
    parent_id = marker.job_id

    def tree(launch):
        if launch.env["HTTK_WORKFLOW_JOB_ID"] == parent_id and launch.env["HTTK_WORKFLOW_STEP"] == "main":
            return tree_for_parent
        return {"outcome.json": outcome_document()}

    status = memory_manager(handle, scripted_runner(ports.fs, tree), join_grace_seconds=0.0).run()
    return ports, handle, status


def failed_with(handle, code):
    assert kinds(handle).get("failed") == 1, kinds(handle)
    frame = frame_of(handle, StateKind.FAILED)
    assert frame.failure.code == code, frame.failure


def spawn_tree(child: dict, *, payload_job=CHILD_JOB, action="wait"):
    members = {"join": {"step": "after", "children": [child["label"]]}} if action == "wait" else {}
    tree = {
        "outcome.json": outcome_document(action, **members),
        "children/spawn.json": {"format": "httk-workflow-spawn", "format_version": 1, "children": [child]},
    }
    if payload_job is not None:
        tree[f"children/{child['payload']}/job.json"] = payload_job
        tree[f"children/{child['payload']}/run.sh"] = b"#!/bin/sh\n"
    return tree


def good_child(**changes):
    child = {"label": "c1", "job_id": CHILD_ID, "job_key": CHILD_KEY, "placement": "kids",
             "payload": f"jobs/{CHILD_KEY}"}
    child.update(changes)
    return child


# -- outcome.json itself ------------------------------------------------------------------------

def test_binary_outcome_json_is_a_protocol_error():
    _ports, handle, status = run_with({"outcome.json": b"\xff\xfe\x00garbage"})
    assert status == 0
    failed_with(handle, "protocol_error")


def test_outcome_json_not_an_object_is_a_protocol_error():
    _ports, handle, _ = run_with({"outcome.json": b"[1, 2, 3]\n"})
    failed_with(handle, "protocol_error")


def test_outcome_json_with_a_5000_digit_integer_is_a_protocol_error():
    _ports, handle, _ = run_with({"outcome.json": b'{"format": "httk-workflow-outcome", "format_version": '
                                  + b"9" * 5000 + b"}"})
    failed_with(handle, "protocol_error")


def test_unknown_action_and_bad_next_step_are_protocol_errors():
    _ports, handle, _ = run_with({"outcome.json": outcome_document("advance", next_step="../etc")})
    failed_with(handle, "protocol_error")


def test_deeply_nested_outcome_json_is_a_protocol_error():
    _ports, handle, _ = run_with({"outcome.json": b"[" * 200_000 + b"]" * 200_000})
    failed_with(handle, "protocol_error")


def test_failure_details_with_nan_are_a_protocol_error():
    document = b'{"action":"fail","failure":{"code":"x","message":"m","details":{"v":NaN}},' \
               b'"format":"httk-workflow-outcome","format_version":1}'
    _ports, handle, _ = run_with({"outcome.json": document})
    failed_with(handle, "protocol_error")


def test_join_naming_an_unspawned_label_is_a_protocol_error():
    join = {"step": "after", "children": ["ghost"]}
    _ports, handle, _ = run_with({"outcome.json": outcome_document("wait", join=join)})
    failed_with(handle, "protocol_error")


# -- children ------------------------------------------------------------------------------------

def test_a_well_formed_spawn_and_join_runs_the_child_once_and_resumes_the_parent():
    ports, handle, _ = run_with(spawn_tree(good_child()))
    assert kinds(handle) == {"succeeded": 2}
    assert ports.fs.exists(f"/ws/kids/{CHILD_KEY}/job.json")


def test_child_placement_with_dotdot_is_refused():
    ports, handle, _ = run_with(spawn_tree(good_child(placement="../../outside")))
    assert not ports.fs.exists("/outside")
    assert not ports.fs.exists("/ws/.httk-workflow/outside")
    failed_with(handle, "protocol_error")


def test_child_placement_into_the_control_tree_is_refused():
    ports, handle, _ = run_with(spawn_tree(good_child(placement=".httk-workflow/runners")))
    assert not ports.fs.exists(f"/ws/.httk-workflow/runners/{CHILD_KEY}")
    failed_with(handle, "protocol_error")


def test_invalid_child_job_key_is_a_protocol_error():
    _ports, handle, _ = run_with(spawn_tree(good_child(job_key="Not A Key", payload="jobs/x")))
    failed_with(handle, "protocol_error")


def test_missing_child_payload_is_a_protocol_error():
    _ports, handle, _ = run_with(spawn_tree(good_child(), payload_job=None))
    failed_with(handle, "protocol_error")


def test_child_job_id_that_disagrees_with_its_key_is_refused():
    other = "22222222-2222-4222-8222-222222222222"
    _ports, handle, _ = run_with(spawn_tree(good_child(job_id=other)))
    assert "waiting" not in kinds(handle), kinds(handle)


def test_child_payload_dotdot_is_a_protocol_error():
    child = good_child(payload="jobs/..")
    tree = spawn_tree(child, payload_job=None)
    tree["children/job.json"] = CHILD_JOB
    _ports, handle, _ = run_with(tree)
    failed_with(handle, "protocol_error")


def test_duplicate_child_labels_are_a_protocol_error():
    child = good_child()
    tree = spawn_tree(child)
    tree["children/spawn.json"]["children"] = [child, dict(child)]
    _ports, handle, _ = run_with(tree)
    failed_with(handle, "protocol_error")
