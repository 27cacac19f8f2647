"""The state frame's records on disk: the same bytes as the dicts they replaced, and strict reading.

``StateFrame.join``, ``failure``, ``owner``, ``process`` and ``takeover`` are frozen records
(``domain/frames.py``) written and read by the one converter (``codec.frame_to_json``,
``codec.frame_from_json``). The expected documents below are what the code before the records
wrote for the same values (its writers built plain dicts); docs/workflow_filesystem_api.md "Journal".
"""

from __future__ import annotations

import json

import pytest

from httk.workflow import codec
from httk.workflow.domain.frames import (
    ChildRef,
    JoinRecord,
    Owner,
    ProcessRecord,
    StateFrame,
    StoppedGroup,
    TakeoverEvidence,
)
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import Failure

#: Every record member set, every optional key present (``resolved``, the grace, the stopped group).
FULL = (
    '{"activation_id":"act","activation_ordinal":2,"attempt_id":"att","attempt_ordinal":2,'
    '"created_at":1800000011.0,"data_generation":0,"event":"launch","failure":{"code":"runner_exit",'
    '"details":{"returncode":3,"stderr":"boom"},"message":"the runner exited with status 3","retryable":true},'
    '"format":"httk-workflow-state-frame","format_version":1,"generation":7,"job_id":"j","job_key":"j",'
    '"join":{"children":[{"job_id":"cccccccc-0000-4000-8000-000000000001",'
    '"job_key":"a--cccccccc-0000-4000-8000-000000000001","label":"a","placement":"kids"}],"count":1,'
    '"first_unresolved_at":1800000005.5,"on_impossible":"rescue","resolved":"satisfied","step":"after",'
    '"when":"at_least"},"kind":"running","notes":{},"operator":null,"operator_key":null,'
    '"owner":{"claimed_at":1800000010.25,"host":"node7","lease_seconds":30.0,"manager_id":"m-b"},'
    '"pause_requested":false,"placement":"p","previous_record_ref":"000000000001~1~16~900~0123abcd",'
    '"priority":5,"process":{"control":"/ws/.httk-workflow/attempts/j/0002-a","host":"node7","pgid":4242,'
    '"pid":4242,"start_ticks":987654},"reason":null,"request_id":null,"runner_steps":null,"step":"after",'
    '"takeover":{"at":1800000010.25,"by":"m-b","grace_factor":2.0,"grace_remaining":12.5,"grace_seconds":60.0,'
    '"heartbeat_age":null,"kind":"running","lease_seconds":30.0,"outcome_published":true,"owner_stopped":true,'
    '"previous_owner":"m-a","process_alive":null,"recorded_host":"node7","rule":"isolated_grace",'
    '"stopped_group":{"method":"sigkill","pgid":4242,"seconds":5.125,'
    '"verified":"process group 4242 gone on host node7"},"this_host":"node7","unsafe_isolated":true,'
    '"unsafe_persistent":false,"workdir_mode":"isolated"},"total_attempts":3,"unclean_exits":1,"workspace_id":"w-1"}\n'
)

#: The optional keys absent: they are not written at all (never as ``null``).
MINIMAL = (
    '{"activation_id":null,"activation_ordinal":0,"attempt_id":null,"attempt_ordinal":0,'
    '"created_at":1800000001.0,"data_generation":0,"event":"commit_wait","failure":null,'
    '"format":"httk-workflow-state-frame","format_version":1,"generation":2,"job_id":"j","job_key":"j",'
    '"join":{"children":[{"job_id":"c1","job_key":"c1","label":"a","placement":"kids"}],"count":null,'
    '"first_unresolved_at":null,"on_impossible":null,"step":"after","when":"all_succeeded"},"kind":"waiting",'
    '"notes":{},"operator":null,"operator_key":null,"owner":null,"pause_requested":false,"placement":"p",'
    '"previous_record_ref":null,"priority":0,"process":null,"reason":null,"request_id":null,"runner_steps":null,'
    '"step":"main","takeover":{"at":1800000000.5,"by":"m-b","grace_factor":2.0,"heartbeat_age":101.0,'
    '"kind":"running","lease_seconds":100.0,"outcome_published":false,"owner_stopped":false,"previous_owner":"m-a",'
    '"process_alive":false,"recorded_host":"h","rule":"process_gone","this_host":"h","unsafe_isolated":false,'
    '"unsafe_persistent":false,"workdir_mode":"persistent"},"total_attempts":0,"unclean_exits":0,"workspace_id":"w-1"}\n'
)


def _evidence(**changes: object) -> TakeoverEvidence:
    values: dict[str, object] = {
        "rule": "process_gone", "kind": "running", "workdir_mode": "persistent", "heartbeat_age": 101.0,
        "lease_seconds": 100.0, "grace_factor": 2.0, "recorded_host": "h", "this_host": "h",
        "process_alive": False, "outcome_published": False, "unsafe_persistent": False, "unsafe_isolated": False,
        "by": "m-b", "at": 1800000000.5, "previous_owner": "m-a", "owner_stopped": False,
    }
    values.update(changes)
    return TakeoverEvidence(**values)  # type: ignore[arg-type]


def full_frame() -> StateFrame:
    child = ChildRef(label="a", job_id="cccccccc-0000-4000-8000-000000000001",
                     job_key="a--cccccccc-0000-4000-8000-000000000001", placement="kids")
    return StateFrame(
        workspace_id="w-1", job_id="j", job_key="j", placement="p", generation=7, kind=StateKind.RUNNING,
        event="launch", previous_record_ref="000000000001~1~16~900~0123abcd", created_at=1800000011.0, priority=5,
        step="after", activation_id="act", activation_ordinal=2, attempt_id="att", attempt_ordinal=2,
        total_attempts=3, unclean_exits=1,
        join=JoinRecord(step="after", when="at_least", count=1, on_impossible="rescue", children=(child,),
                        first_unresolved_at=1800000005.5, resolved="satisfied"),
        failure=Failure("runner_exit", "the runner exited with status 3", {"returncode": 3, "stderr": "boom"},
                        retryable=True),
        owner=Owner(manager_id="m-b", host="node7", lease_seconds=30.0, claimed_at=1800000010.25),
        process=ProcessRecord(host="node7", pid=4242, start_ticks=987654, pgid=4242,
                              control="/ws/.httk-workflow/attempts/j/0002-a"),
        takeover=_evidence(
            rule="isolated_grace", workdir_mode="isolated", heartbeat_age=None, lease_seconds=30.0,
            recorded_host="node7", this_host="node7", process_alive=None, outcome_published=True,
            unsafe_isolated=True, at=1800000010.25, owner_stopped=True, grace_seconds=60.0, grace_remaining=12.5,
            stopped_group=StoppedGroup(pgid=4242, method="sigkill", verified="process group 4242 gone on host node7",
                                       seconds=5.125),
        ),
    )


def minimal_frame() -> StateFrame:
    return StateFrame(
        workspace_id="w-1", job_id="j", job_key="j", placement="p", generation=2, kind=StateKind.WAITING,
        event="commit_wait", previous_record_ref=None, created_at=1800000001.0, priority=0, step="main",
        join=JoinRecord(step="after", children=(ChildRef(label="a", job_id="c1", job_key="c1", placement="kids"),)),
        takeover=_evidence(),
    )


@pytest.mark.parametrize(("frame", "expected"), [(full_frame, FULL), (minimal_frame, MINIMAL)],
                         ids=["every-member", "optional-keys-absent"])
def test_a_frame_of_records_encodes_to_exactly_the_bytes_of_the_old_dict_form(frame, expected):
    record = frame()
    data = codec.encode(codec.frame_to_json(record))
    assert data == expected.encode("utf-8")
    assert codec.frame_from_json(codec.decode_object(data, "frame")) == record


#: Two frames as the code before the records journalled them (an in-memory takeover of a published
#: attempt whose group it stopped, and a retry after a satisfied join), verbatim.
OLD_TAKEOVER = (
    '{"activation_id":"00000000-0000-4000-8000-000000000004","activation_ordinal":1,'
    '"attempt_id":"00000000-0000-4000-8000-000000000005","attempt_ordinal":1,"created_at":1800000030.0,'
    '"data_generation":0,"event":"publish","failure":null,"format":"httk-workflow-state-frame","format_version":1,'
    '"generation":4,"job_id":"00000000-0000-4000-8000-000000000002","job_key":"00000000-0000-4000-8000-000000000002",'
    '"join":null,"kind":"committing","notes":{},"operator":null,"operator_key":null,'
    '"owner":{"claimed_at":1800000030.0,"host":"node-here","lease_seconds":10.0,"manager_id":"m-here"},'
    '"pause_requested":false,"placement":"p","previous_record_ref":"000000000003~1~1698~1094~7ba6d28f","priority":0,'
    '"process":{"control":"/ws/.httk-workflow/attempts/00000000-0000-4000-8000-000000000002/'
    '0001-00000000-0000-4000-8000-000000000005","host":"node-here","pgid":4000,"pid":4000,"start_ticks":28000},'
    '"reason":null,"request_id":null,"runner_steps":null,"step":"main","takeover":{"at":1800000030.0,"by":"m-here",'
    '"grace_factor":2.0,"heartbeat_age":30.0,"kind":"running","lease_seconds":10.0,"outcome_published":true,'
    '"owner_stopped":false,"previous_owner":"m-dead","process_alive":true,"recorded_host":"node-here",'
    '"rule":"outcome_published_stop","stopped_group":{"method":"sigterm","pgid":4000,"seconds":0.0,'
    '"verified":"process group 4000 gone on host node-here"},"this_host":"node-here","unsafe_isolated":false,'
    '"unsafe_persistent":false,"workdir_mode":"persistent"},"total_attempts":1,"unclean_exits":0,'
    '"workspace_id":"00000000-0000-4000-8000-000000000001"}'
)
OLD_RETRY_AFTER_JOIN = (
    '{"activation_id":"00000000-0000-4000-8000-00000000000a","activation_ordinal":2,'
    '"attempt_id":"00000000-0000-4000-8000-00000000000b","attempt_ordinal":1,"created_at":1800001000.0,'
    '"data_generation":1,"event":"commit_retry","failure":{"code":"runner_exit","details":{"returncode":-9,'
    '"stderr":"","takeover_rule":"process_gone"},"message":"attempt 2 ended without an outcome its manager could '
    'commit: the manager stopped heartbeating and the attempt was taken over (process_gone)","retryable":true},'
    '"format":"httk-workflow-state-frame","format_version":1,"generation":10,'
    '"job_id":"00000000-0000-4000-8000-000000000002","job_key":"00000000-0000-4000-8000-000000000002",'
    '"join":{"children":[{"job_id":"cccccccc-0000-4000-8000-000000000001",'
    '"job_key":"a--cccccccc-0000-4000-8000-000000000001","label":"a","placement":"kids/x"},'
    '{"job_id":"cccccccc-0000-4000-8000-000000000002","job_key":"b--cccccccc-0000-4000-8000-000000000002",'
    '"label":"b","placement":"kids/x"}],"count":null,"first_unresolved_at":null,"on_impossible":null,'
    '"resolved":"satisfied","step":"after","when":"all_succeeded"},"kind":"ready","notes":{},"operator":null,'
    '"operator_key":null,"owner":null,"pause_requested":false,"placement":"p",'
    '"previous_record_ref":"00000000000c~1~16~1848~4d6f66a1","priority":0,"process":null,'
    '"reason":"retrying: failure \'runner_exit\' is retryable; attempt 2 of activation 2","request_id":null,'
    '"runner_steps":null,"step":"after","takeover":{"at":1800001000.0,"by":"m-b","grace_factor":2.0,'
    '"heartbeat_age":1000.0,"kind":"running","lease_seconds":10.0,"outcome_published":false,"owner_stopped":false,'
    '"previous_owner":"m-a","process_alive":false,"recorded_host":"fakehost","rule":"process_gone",'
    '"this_host":"fakehost","unsafe_isolated":false,"unsafe_persistent":false,"workdir_mode":"persistent"},'
    '"total_attempts":2,"unclean_exits":1,"workspace_id":"00000000-0000-4000-8000-000000000001"}'
)


def test_a_frame_journalled_by_the_old_code_decodes_into_records_and_rewrites_byte_identical():
    takeover = codec.frame_from_json(json.loads(OLD_TAKEOVER))
    assert takeover.kind is StateKind.COMMITTING and takeover.owner_id == "m-here"
    assert takeover.process == ProcessRecord(
        host="node-here", pid=4000, start_ticks=28000, pgid=4000,
        control="/ws/.httk-workflow/attempts/00000000-0000-4000-8000-000000000002/"
                "0001-00000000-0000-4000-8000-000000000005")
    assert takeover.takeover is not None and takeover.takeover.rule == "outcome_published_stop"
    assert takeover.takeover.stopped_group == StoppedGroup(4000, "sigterm", "process group 4000 gone on host node-here",
                                                           0.0)
    assert takeover.takeover.grace_seconds is None and takeover.join is None and takeover.failure is None

    retry = codec.frame_from_json(json.loads(OLD_RETRY_AFTER_JOIN))
    assert retry.join is not None and retry.join.resolved == "satisfied" and retry.join.count is None
    assert [child.label for child in retry.join.children] == ["a", "b"]
    assert retry.join.children[1] == ChildRef("b", "cccccccc-0000-4000-8000-000000000002",
                                              "b--cccccccc-0000-4000-8000-000000000002", "kids/x")
    assert retry.failure == Failure("runner_exit", retry.failure.message,
                                    {"returncode": -9, "stderr": "", "takeover_rule": "process_gone"}, True)
    assert retry.owner is None and retry.process is None
    for text, frame in ((OLD_TAKEOVER, takeover), (OLD_RETRY_AFTER_JOIN, retry)):
        assert codec.dumps(codec.frame_to_json(frame)) == text


@pytest.mark.parametrize("path", [
    ("owner",), ("process",), ("failure",), ("takeover",), ("takeover", "stopped_group"), ("join",),
    ("join", "children", 0),
])
def test_an_unknown_member_inside_a_record_is_refused_with_a_path_naming_it(path):
    document = json.loads(FULL)
    target = document
    for step in path:
        target = target[step]
    target["xyz"] = 1
    with pytest.raises(codec.DocumentError) as caught:
        codec.frame_from_json(document)
    member = "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path) + ".xyz"
    assert caught.value.member == member
    assert str(caught.value).startswith(f"state frame @ {member}: unknown member; known: ")


@pytest.mark.parametrize(("path", "value", "problem"), [
    (("process", "pid"), "4242", "expected int, got string"),
    (("owner", "lease_seconds"), True, "expected number, got boolean"),
    (("join", "children"), "a", None),
    (("takeover", "stopped_group", "pgid"), None, "expected int, got null"),
])
def test_a_record_member_of_the_wrong_type_is_refused_naming_it(path, value, problem):
    document = json.loads(FULL)
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(codec.DocumentError) as caught:
        codec.frame_from_json(document)
    assert caught.value.member.startswith("$." + ".".join(path))
    if problem is not None:
        assert caught.value.problem == problem


def test_a_required_record_member_that_is_missing_is_refused_naming_it():
    document = json.loads(FULL)
    del document["owner"]["claimed_at"]
    with pytest.raises(codec.DocumentError, match=r"^state frame @ \$\.owner\.claimed_at: missing member$"):
        codec.frame_from_json(document)
