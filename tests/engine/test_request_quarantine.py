"""Operator requests: malformed documents in ready/ must be quarantined, never crash the manager."""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.requests import publish_request
from httk.workflow.testing import FakeProcessControl, memory_manager, memory_workspace, scripted_runner
from memory_support import kinds

READY = "/ws/.httk-workflow/requests/ready"


def setup():
    ports, handle, [marker] = memory_workspace()
    # One process control for every manager of a test: each attempt succeeds.
    proc = FakeProcessControl(ports.clock, scripted_runner(ports.fs), uid=ports.fs.uid)
    return ports, handle, marker, proc


def valid_request(handle, marker, action="pause"):
    view = handle.store.read_job(marker)
    document = publish_request(handle, view, action, operator="me", reason="r")
    handle.fs.remove(f"{READY}/{document['request_id']}.json")
    return document


def drop(ports, name, data):
    ports.fs.write_atomic(f"{READY}/{name}", data, durable=True)


def quarantined(ports):
    """The quarantined entries (each kept as published, its reason in ``<name>.audit.json`` beside it)."""
    names = [entry.name for entry in ports.fs.scandir("/ws/.httk-workflow/requests/quarantine")]
    entries = [name for name in names if not name.endswith(".audit.json")]
    assert sorted(names) == sorted([*entries, *(f"{name}.audit.json" for name in entries)])
    return entries


def settle(handle, proc):
    m = memory_manager(handle, process=proc)
    m.publish_manifest()
    m.heartbeat(force=True)
    m.requests.process()
    return m


def test_a_pause_request_applies_once_and_a_replayed_copy_is_retired():
    ports, handle, marker, proc = setup()
    document = valid_request(handle, marker)
    drop(ports, "a.json", codec.encode(document))
    settle(handle, proc)
    assert kinds(handle) == {"paused": 1}
    drop(ports, "b.json", codec.encode(document))
    settle(handle, proc)
    assert kinds(handle) == {"paused": 1}
    assert [entry.name for entry in ports.fs.scandir("/ws/.httk-workflow/requests/retired")] == ["b.json"]


@pytest.mark.parametrize("data", [b"\xff\xfe garbage", b"[]\n", b"", b"{\"format\": 1"])
def test_unreadable_requests_are_quarantined(data):
    ports, handle, _marker, proc = setup()
    drop(ports, "bad.json", data)
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]
    assert memory_manager(handle, process=proc).run() == 0
    assert kinds(handle) == {"succeeded": 1}


@pytest.mark.parametrize("member,value", [("kind", "nonsense"), ("kind", None), ("marker", "x"),
                                          ("action", "explode"), ("format", "other")])
def test_requests_with_a_bad_member_are_quarantined(member, value):
    ports, handle, marker, proc = setup()
    document = {**valid_request(handle, marker), member: value}
    drop(ports, "bad.json", codec.encode(document))
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]


@pytest.mark.parametrize("value", [7, None, ["a"]])
def test_request_with_a_non_string_marker_is_quarantined(value):
    ports, handle, marker, proc = setup()
    document = {**valid_request(handle, marker), "marker": value}
    drop(ports, "bad.json", codec.encode(document))
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]


def test_request_with_an_unhashable_executor_is_quarantined():
    ports, handle, marker, proc = setup()
    document = {**valid_request(handle, marker), "executor": ["path"]}
    drop(ports, "bad.json", codec.encode(document))
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]


@pytest.mark.parametrize("data", [b'{"n": ' + b"1" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000])
def test_pathological_json_requests_are_quarantined(data):
    ports, handle, _marker, proc = setup()
    drop(ports, "bad.json", data)
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]


def test_request_with_a_nan_reason_is_quarantined():
    ports, handle, marker, proc = setup()
    document = valid_request(handle, marker)
    text = codec.dumps({**document, "reason": "PLACEHOLDER"}).replace('"PLACEHOLDER"', "NaN")
    drop(ports, "bad.json", text.encode())
    settle(handle, proc)
    assert kinds(handle) == {"submitted": 1}
    assert quarantined(ports) == ["bad.json"]


def test_request_with_a_traversing_placement_is_quarantined():
    ports, handle, marker, proc = setup()
    document = {**valid_request(handle, marker), "placement": "../../p"}
    drop(ports, "bad.json", codec.encode(document))
    settle(handle, proc)
    assert quarantined(ports) == ["bad.json"]


def test_cancel_of_a_ready_job_is_immediate_and_final():
    ports, handle, marker, proc = setup()
    m = memory_manager(handle, process=proc, workers=0)
    m.publish_manifest()
    m.tick()  # registers: submitted -> ready
    [ready] = list(handle.store.iter_markers(StateKind.READY))
    document = valid_request(handle, ready, "cancel")
    drop(ports, "c.json", codec.encode(document))
    assert memory_manager(handle, process=proc).run() == 0
    assert kinds(handle) == {"cancelled": 1}
    assert proc.processes == []
