"""Every on-disk document is a record of the one converter (``codec``): it round-trips, and refuses strangers.

For each document a valid instance, as its writer writes it, structures and
unstructures back to the same canonical bytes; an unknown member, at the top and
inside a nested object, is refused with a one-line ``DocumentError`` naming the
member's path. Spec: docs/workflow_filesystem_api.md "Reading documents".
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from httk.workflow import codec
from httk.workflow.attempt_records import (
    ContextDocument,
    OutcomeDocument,
    RunnerDescription,
    RunnerErrorDocument,
    SpawnDocument,
    TransactionDocument,
    WorkdirBatchDocument,
)
from httk.workflow.engine.manifest import Heartbeat, ManagerManifest
from httk.workflow.engine.requests import RequestDocument
from httk.workflow.protocol import JobDocument, JobSpec, parse_job_bytes
from httk.workflow.store.workspaces import WorkspaceDocument

JOB_ID = "11111111-1111-4111-8111-111111111111"
KEY = f"c1--{JOB_ID}"
FAILURE = {"code": "oom", "message": "out of memory", "details": {"rss": 5}, "retryable": True}

JOB = JobSpec(name="j", workflow="w", runner_path="run.sh", runner_source="workspace", runner_sha256="a" * 64,
              tag="t", inputs={"encut": 520}, priority=-3, capabilities=("gpu",), workdir_mode="isolated",
              data_mode="transactional", maximum_total_attempts=5, retry_on=("oom",)).to_document()
OUTCOME = {"format": "httk-workflow-outcome", "format_version": 1, "action": "wait", "attempt_id": "a1",
           "step": "main", "runner_steps": ["after", "main"], "next_step": None, "priority": None,
           "join": {"step": "after", "when": "at_least", "count": 1, "on_impossible": None, "children": ["c1"]},
           "failure": None, "reason": None}
SPAWN = {"format": "httk-workflow-spawn", "format_version": 1,
         "children": [{"label": "c1", "job_id": JOB_ID, "job_key": KEY, "placement": "kids", "payload": f"jobs/{KEY}"}]}
MANIFEST = {"format": "httk-workflow-transaction", "format_version": 1, "operations": [
    {"id": "op-0001", "op": "put", "destination": "r", "source": "files/op-0001"},
    {"id": "op-0002", "op": "remove", "destination": "s", "missing_ok": True}]}
CONTEXT = {"format": "httk-workflow-attempt-context", "format_version": 1, "workspace": "/ws", "workspace_id": "w",
           "job_id": JOB_ID, "job_key": KEY, "placement": "p", "step": "main", "activation_id": "act",
           "activation_ordinal": 1, "attempt_id": "a1", "attempt_ordinal": 2, "total_attempts": 3,
           "payload": "/ws/p/x", "workdir": "/ws/w", "data": None, "control": "/ws/c", "durable": True,
           "workdir_mode": "persistent", "data_mode": "none", "manager_id": "m", "host": "h", "created_at": 5.5,
           "runner": {"source": "payload"}, "settings": {}, "restart": {},
           "children": [{"label": "c1", "job_id": JOB_ID, "job_key": KEY, "kind": "failed", "failure": FAILURE,
                         "payload": "/ws/kids/c1", "workdir": "/ws/w2", "data": None}]}
REQUEST = {"format": "httk-workflow-request", "format_version": 1, "request_id": "r1", "action": "pause",
           "job_id": JOB_ID, "job_key": KEY, "placement": "p", "kind": "ready", "generation": 1,
           "record_ref": "000000000001~1~16~100~00000000", "marker": f"{KEY}.p0.g1.x", "executor": "path",
           "operator": "me", "reason": "r", "step": None, "force": False, "created_at": 1.5,
           "signature": {"key": "k", "value": "v"}}
MANAGER = {"format": "httk-workflow-manager", "format_version": 1, "manager_id": "m", "host": "h", "pid": 7,
           "uid": 1000, "workspace": "/ws", "pools": ["default"], "capabilities": [], "executors": ["path"],
           "runner_search_paths": [], "placement_prefixes": [""], "lease_seconds": 30.0, "workers": 2,
           "takeover": {"grace_factor": 2.0}, "join_grace_seconds": 3600.0, "journal_writers": ["0123456789ab"],
           "started_at": 9.5}
HEARTBEAT = {"manager_id": "m", "time": 12.5, "lease_seconds": 30.0, "stopped": False}
WORKSPACE = {"format": "httk-workflow-workspace", "format_version": 1, "workspace_id": "w", "name": "ws",
             "durable": True, "created_at": 3.5, "policy": {"lease_seconds": 30}}
#: error.json as each SDK writes it: Python with its traceback, Bash with the line the handler died on.
PYTHON_ERROR = {"format": "httk-workflow-runner-error", "format_version": 1, "step": "main", "exception": "ValueError",
                "message": "not a crystal", "traceback": "Traceback (most recent call last):\n"}
BASH_ERROR = {"format": "httk-workflow-runner-error", "format_version": 1, "step": "main",
              "exception": "CommandFailed", "message": "command 'grep -q x f' failed with status 1",
              "file": "/ws/run.sh", "line": 6, "command": "grep -q x f"}
WORKDIR_BATCH = {"format": "httk-workflow-workdir-batch", "format_version": 1, "id": "b1", "operations": [
    {"op": "write", "path": "INCAR", "staged": "files/0001"}, {"op": "rename", "path": "a", "destination": "b/a"},
    {"op": "remove", "path": "c"}]}
DESCRIPTION = {"format": "httk-workflow-runner-description", "format_version": 1, "workflow": "defects",
               "steps": ["aggregate", "relax"]}

#: (document, its record, a valid instance, a nested object path in it or None)
DOCUMENTS: list[tuple[str, type, dict[str, Any], tuple[Any, ...] | None]] = [
    ("job.json", JobDocument, JOB, ("retry_policy",)),
    ("outcome.json", OutcomeDocument, OUTCOME, ("join",)),
    ("spawn.json", SpawnDocument, SPAWN, ("children", 0)),
    ("manifest.json", TransactionDocument, MANIFEST, ("operations", 1)),
    ("context.json", ContextDocument, CONTEXT, ("children", 0)),
    ("request", RequestDocument, REQUEST, None),
    ("manager.json", ManagerManifest, MANAGER, None),
    ("heartbeat.json", Heartbeat, HEARTBEAT, None),
    ("format.json", WorkspaceDocument, WORKSPACE, None),
    ("error.json", RunnerErrorDocument, PYTHON_ERROR, None),
    ("bash error.json", RunnerErrorDocument, BASH_ERROR, None),
    ("ops.json", WorkdirBatchDocument, WORKDIR_BATCH, ("operations", 1)),
    ("run.py --describe", RunnerDescription, DESCRIPTION, None),
]
IDS = [name for name, *_ in DOCUMENTS]


def _path(steps: tuple[Any, ...]) -> str:
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)


@pytest.mark.parametrize(("name", "record", "document", "nested"), DOCUMENTS, ids=IDS)
def test_a_valid_document_round_trips_to_the_same_canonical_bytes(name, record, document, nested):
    data = codec.encode(document)
    assert codec.encode(codec.unstructure(codec.read(data, record, name))) == data


@pytest.mark.parametrize(("name", "record", "document", "nested"), DOCUMENTS, ids=IDS)
def test_an_unknown_member_is_refused_with_its_path(name, record, document, nested):
    for steps in [(), nested] if nested else [()]:
        changed = copy.deepcopy(document)
        target = changed
        for step in steps:
            target = target[step]
        target["surplus"] = 1
        with pytest.raises(codec.DocumentError) as refused:
            codec.structure(changed, record, name)
        assert str(refused.value).startswith(f"{name} @ {_path((*steps, 'surplus'))}: unknown member; known: ")
        assert "\n" not in str(refused.value)


def test_the_writers_publish_what_the_readers_read():
    spec = parse_job_bytes(codec.encode(JOB))
    assert spec.to_document() == JOB  # JobSpec is the flat form of the same record


@pytest.mark.parametrize(("document", "member", "problem"), [
    ({**JOB, "priority": "5"}, "$.priority", "expected int, got string"),
    ({**JOB, "retry_policy": {"maximum_total_attempts": 0}}, "$.retry_policy.maximum_total_attempts",
     "expected an int >= 1 or null"),
    ({**JOB, "claim": {"pool": "p", "capabilities": "gpu"}}, "$.claim.capabilities", "expected an array of strings"),
    ({**JOB, "runner": {"source": "workspace", "path": "r"}}, "$.runner.sha256",
     "a workspace runner must be pinned by its sha256"),
    ({**JOB, "runner": []}, "$.runner", "expected object, got array"),
    ({**JOB, "format_version": True}, "$.format_version", "expected 1"),
])
def test_a_wrong_member_keeps_its_one_line_wording(document, member, problem):
    with pytest.raises(codec.DocumentError) as refused:
        codec.structure(document, JobDocument, "job.json")
    assert str(refused.value) == f"job.json @ {member}: {problem}"


def test_a_string_enum_member_is_made_from_its_value():
    from httk.workflow.domain.lifecycle import StateKind

    assert codec.structure("ready", StateKind, "x") is StateKind.READY


@pytest.mark.parametrize(("record", "document", "message"), [
    (SpawnDocument, {**SPAWN, "children": "c1"}, "spawn.json @ $.children: expected array, got string"),
    (SpawnDocument, {**SPAWN, "children": {"c1": {}}}, "spawn.json @ $.children: expected array, got object"),
    (SpawnDocument, {**SPAWN, "children": [SPAWN["children"][0], SPAWN["children"][0]]},
     "spawn.json @ $.children[1].label: duplicate label 'c1'"),
    (OutcomeDocument, {**OUTCOME, "join": None}, "spawn.json @ $.join: required by the action 'wait'"),
    (ContextDocument, {**CONTEXT, "children": [1]}, "spawn.json @ $.children[0]: expected object, got number"),
])
def test_an_array_or_a_record_of_the_wrong_shape_is_named(record, document, message):
    # cattrs alone would iterate a string or an object's keys as the array's items.
    with pytest.raises(codec.DocumentError) as refused:
        codec.structure(document, record, "spawn.json")
    assert str(refused.value) == message


@pytest.mark.parametrize(("operation", "message"), [
    ({"op": "write", "path": "a"}, "ops.json @ $.operations[0].staged: required by the op 'write'"),
    ({"op": "rename", "path": "a"}, "ops.json @ $.operations[0].destination: required by the op 'rename'"),
    ({"op": "chmod", "path": "a"}, "ops.json @ $.operations[0].op: expected one of write, remove, rename"),
    ({"op": "remove"}, "ops.json @ $.operations[0].path: missing member"),
    ("x", "ops.json @ $.operations[0]: expected object, got string"),
])
def test_a_workdir_batch_operation_needs_the_members_of_its_op(operation, message):
    with pytest.raises(codec.DocumentError) as refused:
        codec.structure({**WORKDIR_BATCH, "operations": [operation]}, WorkdirBatchDocument, "ops.json")
    assert str(refused.value) == message


def test_an_error_json_without_its_exception_is_refused():
    with pytest.raises(codec.DocumentError) as refused:
        codec.structure({key: value for key, value in BASH_ERROR.items() if key != "exception"},
                        RunnerErrorDocument, "error.json")
    assert str(refused.value) == "error.json @ $.exception: missing member"
