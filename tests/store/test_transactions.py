"""Transactional outcomes: staged data operations applied exactly once, never outside the data tree."""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner
from memory_support import crash_first_run, frame_of, kinds

DATA = "/ws/.httk-workflow/data"


def manifest(*operations):
    return {"format": "httk-workflow-transaction", "format_version": 1, "operations": list(operations)}


def put(op_id, destination, source=None):
    return {"id": op_id, "op": "put", "destination": destination, "source": source or f"files/{op_id}"}


def run_with(tree, *, outside=None):
    ports, handle, [marker] = memory_workspace(data_mode="transactional")
    if outside:
        for path, data in outside.items():
            ports.fs.makedirs(path.rsplit("/", 1)[0])
            ports.fs.write_atomic(path, data, durable=True)
    status = memory_manager(handle, scripted_runner(ports.fs, lambda launch: tree)).run()
    return ports, handle, marker, status


def current(marker):
    return f"{DATA}/{marker.job_id}/current"


def failed_with(handle, code):
    assert kinds(handle) == {"failed": 1}, kinds(handle)
    assert frame_of(handle, StateKind.FAILED).failure.code == code


def test_puts_and_removes_apply_and_bump_the_data_generation():
    tree = {
        "outcome.json": outcome_document(),
        "transaction/manifest.json": manifest(put("op-0001", "a/b.txt"), put("op-0002", "c"),
                                              {"id": "op-0003", "op": "remove", "destination": "c"},
                                              {"id": "op-0004", "op": "remove", "destination": "z",
                                               "missing_ok": True}),
        "transaction/files/op-0001": b"one",
        "transaction/files/op-0002": b"two",
    }
    ports, handle, marker, _ = run_with(tree)
    assert kinds(handle) == {"succeeded": 1}
    assert ports.fs.read_bytes(f"{current(marker)}/a/b.txt") == b"one"
    assert not ports.fs.exists(f"{current(marker)}/c")
    assert frame_of(handle, StateKind.SUCCEEDED).data_generation == 1


@pytest.mark.parametrize("destination", ["../escape", "/abs", "a/../../x", "", ".", None, 7])
def test_bad_destinations_are_transaction_errors(destination):
    tree = {"outcome.json": outcome_document(), "transaction/manifest.json": manifest(put("op-0001", destination)),
            "transaction/files/op-0001": b"x"}
    ports, handle, marker, _ = run_with(tree)
    failed_with(handle, "transaction_error")
    assert not ports.fs.exists(f"{DATA}/{marker.job_id}/escape")


def test_op_id_with_a_slash_is_a_transaction_error():
    tree = {"outcome.json": outcome_document(), "transaction/manifest.json": manifest(put("a/b", "x", "files/op")),
            "transaction/files/op": b"x"}
    _ports, handle, _marker, _ = run_with(tree)
    failed_with(handle, "transaction_error")


def test_manifest_operations_not_an_array_is_a_protocol_error():
    tree = {"outcome.json": outcome_document(), "transaction/manifest.json": {"operations": {"id": "op-0001"}}}
    _ports, handle, _marker, _ = run_with(tree)
    failed_with(handle, "protocol_error")


def test_a_transaction_on_a_job_without_data_mode_is_a_protocol_error():
    ports, handle, [marker] = memory_workspace()
    tree = {"outcome.json": outcome_document(), "transaction/manifest.json": manifest(put("op-0001", "x")),
            "transaction/files/op-0001": b"x"}
    memory_manager(handle, scripted_runner(ports.fs, lambda launch: tree)).run()
    failed_with(handle, "protocol_error")
    assert not ports.fs.exists(f"{current(marker)}/x")


def test_put_source_outside_the_staging_area_is_refused():
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest(put("op-0001", "stolen", "../../../../../../../../secret/key"))}
    ports, handle, marker, _ = run_with(tree, outside={"/secret/key": b"s3cret"})
    assert not ports.fs.exists(f"{current(marker)}/stolen")
    failed_with(handle, "transaction_error")


def test_put_through_a_previously_installed_symlink_cannot_escape():
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest(put("op-0001", "link"), put("op-0002", "link/evil")),
            "transaction/files/op-0001": ("link", "/victim"),
            "transaction/files/op-0002": b"pwned"}
    ports, _handle, _marker, _ = run_with(tree, outside={"/victim/keep": b"k"})
    assert not ports.fs.exists("/victim/evil")


def test_put_with_a_missing_source_is_a_transaction_error():
    tree = {"outcome.json": outcome_document(), "transaction/manifest.json": manifest(put("op-0001", "x"))}
    _ports, handle, _marker, _ = run_with(tree)
    failed_with(handle, "transaction_error")


def test_duplicate_operation_ids_are_refused():
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest(put("op-0001", "a", "files/a"), put("op-0001", "b", "files/b")),
            "transaction/files/a": b"a", "transaction/files/b": b"b"}
    ports, handle, marker, _ = run_with(tree)
    assert ports.fs.exists(f"{current(marker)}/b") or kinds(handle) == {"failed": 1}


@pytest.mark.parametrize("op_id", ["", ".", ".."])
def test_dot_operation_ids_are_refused(op_id):
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest(put("op-0001", "first"), put(op_id, "second", "files/s")),
            "transaction/files/op-0001": b"1", "transaction/files/s": b"2"}
    _ports, handle, _marker, _ = run_with(tree)
    failed_with(handle, "transaction_error")


def test_an_invalid_manifest_does_not_change_published_data():
    ports, handle, [marker] = memory_workspace(data_mode="transactional")
    ports.fs.write_atomic(f"{current(marker)}/keep", b"old", durable=True)
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest({"id": "op-0001", "op": "frobnicate", "destination": "keep"})}
    memory_manager(handle, scripted_runner(ports.fs, lambda launch: tree)).run()
    failed_with(handle, "transaction_error")
    assert ports.fs.read_bytes(f"{current(marker)}/keep") == b"old"


def _crash_replay(points):
    """Run to commit, crash at ``points`` operations into the commit, recover with a second manager."""
    ports, handle, [marker] = memory_workspace(data_mode="transactional")
    ports.fs.write_atomic(f"{current(marker)}/a", b"old-a", durable=True)
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": manifest(put("op-0001", "a"), put("op-0002", "b/c"),
                                                  {"id": "op-0003", "op": "remove", "destination": "a"},
                                                  put("op-0004", "a")),
            "transaction/files/op-0001": b"new-a", "transaction/files/op-0002": b"c",
            "transaction/files/op-0004": b"final-a"}

    fresh, crashed = crash_first_run(handle, scripted_runner(ports.fs, lambda _launch: tree), points)
    rerun = scripted_runner(ports.fs, lambda launch: {"outcome.json": outcome_document("fail", failure={
        "code": "rerun", "message": "the attempt ran twice"})})
    try:
        memory_manager(fresh, rerun, manager_id="m-b", lease_seconds=10.0).run()
        error = None
    except Exception as raised:  # the recovering manager must never crash
        error = raised
    return ports, fresh, marker, crashed, error


def test_transaction_replay_after_a_crash_at_every_point_applies_exactly_once():
    failures = []
    points = 0
    while points < 120:
        ports, handle, marker, crashed, error = _crash_replay(points)
        if error is not None:
            failures.append((points, repr(error)))
            points += 1
            continue
        state = kinds(handle)
        try:
            if state == {"succeeded": 1}:
                data = current(marker)
                assert ports.fs.read_bytes(f"{data}/a") == b"final-a"
                assert ports.fs.read_bytes(f"{data}/b/c") == b"c"
        except AssertionError as error:
            failures.append((points, repr(error)))
        if state != {"succeeded": 1}:
            # a crash before the outcome was durable may legitimately rerun the attempt, which then fails
            frame = frame_of(handle, StateKind.FAILED) if state == {"failed": 1} else None
            if frame is None or frame.failure.code != "rerun":
                failures.append((points, state, frame.failure if frame else None))
        if not crashed:
            break
        points += 1
    assert points > 10
    assert failures == []
