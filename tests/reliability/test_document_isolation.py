"""Per-job fault isolation in memory (issue 10, "the rule"): safe document reads, bounded numbers, containment.

Every read of a document another actor wrote goes through ``read_document`` (no
final symlink, never blocking, a regular file, a size bound): a directory, FIFO,
symlink or oversized file is a named refusal of that one job. Numbers parsed
from marker names and record references are bounded, so they become damage
codes rather than ``OverflowError``/``MemoryError``. A wait outcome is checked
with the SDK's own join rule before it is committed. An unexpected exception
while handling one job refuses that job once and the manager serves the rest.
The in-memory filesystem raises :class:`SimulatedHang` (not an ``Exception``)
for a blocking read of a FIFO, so any reader that would hang fails these tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import ValidationError, check_join_condition
from httk.workflow.engine.attempts import LaunchSettings
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.engine.outcome_reader import read_outcome
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store import journal as journal_module
from httk.workflow.store.journal import FrameDamage, JournalReader, JournalWriter, RecordRef
from httk.workflow.store.markers import Marker, MarkerNameError
from httk.workflow.store.store import JobDamage
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import FakeProcessControl, InMemoryFilesystem, memory_ports

ROOT = "/ws"
KEY = "0b1e7c52-5a3e-4c53-9a2b-6c1d2e3f4a5b"
SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})


def _workspace(jobs: int = 2):
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT, durable=False)
    ports.fs.write_atomic("/src/p/job.json", JobSpec(name="j", workflow="w", runner_path="run.sh").to_bytes(),
                          durable=False)
    ports.fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=False)
    markers = [submit(handle, "/src/p", "p").marker for _ in range(jobs)]
    return ports, handle, markers


def _outcome(action: str = "succeed", **members: Any) -> bytes:
    return codec.encode({"format": "httk-workflow-outcome", "format_version": 1, "action": action, **members})


def _succeeding(fs):
    def behaviour(launch: Any) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        fs.write_atomic(f"{control}/outcome.tmp.1/outcome.json", _outcome(), durable=False)
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=False)
        return 0

    return behaviour


def _manager(ports, handle, behaviour) -> Manager:
    proc = FakeProcessControl(ports.clock, behaviour, uid=ports.fs.uid)
    return Manager(handle, proc, SETTINGS, ManagerConfig(), manager_id="m-a", out=lambda line: None)


def _kind(handle, job_id: str) -> StateKind:
    marker = handle.store.find(job_id)
    assert marker is not None
    return marker.kind


# -- job.json ------------------------------------------------------------------------------------

@pytest.mark.parametrize("poison", ["directory", "fifo", "symlink", "too large"])
def test_a_job_json_that_is_not_a_small_regular_file_is_invalid_job_and_the_other_job_runs(poison):
    ports, handle, [bad, good] = _workspace()
    fs = ports.fs
    path = f"{handle.store.payload_dir(bad)}/job.json"
    data = fs.read_bytes(path)
    fs.remove(path)
    if poison == "directory":
        fs.makedirs(path)
    elif poison == "fifo":
        fs.mkfifo(path)
    elif poison == "symlink":
        fs.write_atomic("/elsewhere/job.json", data, durable=False)
        fs.symlink("/elsewhere/job.json", path)
    else:
        fs.write_atomic(path, b" " * (16 * 1024 * 1024) + data, durable=False)
    with pytest.raises(JobDamage) as caught:
        handle.store.read_spec(bad)
    assert caught.value.code == "invalid_job" and path in caught.value.message

    manager = _manager(ports, handle, _succeeding(fs))
    assert manager.run() == 0
    assert _kind(handle, good.job_id) == StateKind.SUCCEEDED
    assert _kind(handle, bad.job_id) == StateKind.SUBMITTED
    assert list(manager.refused) == [str(bad.key)]
    summary = manager.summary()
    assert "1 with an unreadable definition" in summary and "1 refused" in summary
    note = codec.decode_object(fs.read_bytes(f"{manager.manager_dir}/refused/{bad.key}.json"), "note")
    assert note["kind"] == "submitted" and "cannot register" in note["reason"]


# -- outcomes ------------------------------------------------------------------------------------

CONTROL = "/ws/control"


def _read(fs: InMemoryFilesystem, files: dict[str, Any], returncode: int = 0):
    for name, content in files.items():
        path = f"{CONTROL}/{name}"
        if content == "fifo":
            fs.makedirs(path.rsplit("/", 1)[0])
            fs.mkfifo(path)
        elif content == "dir":
            fs.makedirs(path)
        else:
            fs.write_atomic(path, content, durable=False)
    return read_outcome(fs, CONTROL, returncode)


SPAWN = codec.encode({"format": "httk-workflow-spawn", "format_version": 1, "children": [
    {"label": "a", "job_id": KEY, "job_key": KEY, "placement": "kids", "payload": f"jobs/{KEY}"}]})
CHILD = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()


@pytest.mark.parametrize("files, words", [
    ({"outcome.ready/outcome.json": "fifo"}, "outcome.json is a FIFO"),
    ({"outcome.ready/outcome.json": "dir"}, "outcome.json is a directory"),
    ({"outcome.ready/outcome.json": _outcome(), "outcome.ready/children/spawn.json": "fifo"}, "spawn.json is a FIFO"),
    ({"outcome.ready/outcome.json": _outcome(), "outcome.ready/children/spawn.json": SPAWN,
      f"outcome.ready/children/jobs/{KEY}/job.json": "fifo"}, "job.json is a FIFO"),
    ({"outcome.ready/outcome.json": _outcome(), "outcome.ready/transaction/manifest.json": "fifo"},
     "manifest.json is a FIFO"),
    ({"outcome.ready/outcome.json": b" " * (16 * 1024 * 1024 + 1)}, "more than the 16777216-byte bound"),
])
def test_an_outcome_document_that_is_not_a_small_regular_file_is_protocol_error(files, words):
    result = _read(InMemoryFilesystem(), files)
    assert result.failure is not None and result.failure.code == "protocol_error"
    assert words in result.failure.message


def test_an_unreadable_error_json_or_stderr_log_still_gives_the_runner_error():
    fs = InMemoryFilesystem()
    fs.makedirs(f"{CONTROL}/stderr.log")
    result = _read(fs, {"error.json": "fifo"}, returncode=1)
    assert result.failure.code == "runner_error"
    assert "error.json is a FIFO" in result.failure.message


def _join_outcome(join: dict[str, Any], *, spawn: bool = True):
    files: dict[str, Any] = {"outcome.ready/outcome.json": _outcome("wait", join=join)}
    if spawn:
        files["outcome.ready/children/spawn.json"] = SPAWN
        files[f"outcome.ready/children/jobs/{KEY}/job.json"] = CHILD
    return _read(InMemoryFilesystem(), files)


@pytest.mark.parametrize("join, spawn, rule", [
    ({"when": "all_succeeded", "count": 2}, True, ("all_succeeded", 2, 1)),
    ({"when": "at_least", "count": 2}, True, ("at_least", 2, 1)),
    ({"when": "at_least", "count": 0}, True, ("at_least", 0, 1)),
    ({"when": "most"}, True, ("most", None, 1)),
    ({"when": "all_succeeded"}, False, ("all_succeeded", None, 0)),
])
def test_a_wait_outcome_is_checked_with_the_sdk_join_rule(join, spawn, rule):
    result = _join_outcome({"step": "after", "children": [], **join}, spawn=spawn)
    assert result.failure is not None and result.failure.code == "protocol_error"
    with pytest.raises(ValidationError) as sdk_rule:  # the function the SDK's gather calls
        check_join_condition(*rule[:2], children=rule[2])
    assert str(sdk_rule.value) in result.failure.message


def test_a_wait_outcome_the_sdk_would_publish_is_accepted():
    result = _join_outcome({"step": "after", "when": "at_least", "count": 1, "on_impossible": None,
                            "children": ["a"]})
    assert result.failure is None and result.action == "wait" and result.join.count == 1


@pytest.mark.parametrize("join, words", [
    ({"step": "after", "children": ["a", "a"]}, "listed twice"),
    ({"step": "after", "children": [], "mode": "x"}, "$.join.mode: unknown member"),
])
def test_a_join_with_a_repeated_label_or_an_unknown_member_is_refused(join, words):
    result = _join_outcome(join)
    assert result.failure.code == "protocol_error" and words in result.failure.message


def test_an_advance_priority_outside_64_bits_is_refused():
    result = _read(InMemoryFilesystem(), {"outcome.ready/outcome.json": _outcome(
        "advance", next_step="two", priority=10**250)})
    assert result.failure.code == "protocol_error" and "64-bit range" in result.failure.message


# -- marker names and record references ----------------------------------------------------------

@pytest.mark.parametrize("name", [
    f"{KEY}.p{2**63}.g1.init",
    f"{KEY}.p{10**250}.g1.init",
    f"{KEY}.p+0.g1.init",
    f"{KEY}.p00.g1.init",
    f"{KEY}.p0.g{'z' * 14}.init",
    f"{KEY}.p0.g{'1' * 5000}.init",
])
def test_a_marker_name_with_an_out_of_range_or_non_canonical_number_is_unparseable(name):
    with pytest.raises(MarkerNameError):
        Marker.parse("ready", "p", name)


def test_the_extreme_64_bit_priorities_parse():
    for priority in (2**63 - 1, -(2**63)):
        assert Marker.parse("ready", "p", f"{KEY}.p{priority}.g1.init").priority == priority


@pytest.mark.parametrize("ref", [
    "0123456789ab~1~16~1099511627776~00000000",  # a 1 TiB frame
    f"0123456789ab~1~{2**64}~100~00000000",  # an offset past off_t
    f"0123456789ab~{2**70}~16~100~00000000",  # an absurd segment number
    "0123456789ab~0~16~100~00000000",  # segments count from 1
    "0123456789ab~1~0~100~00000000",  # a frame never overlaps the segment header
    "0123456789ab~1~16~3~00000000",  # shorter than a frame's framing
])
def test_a_record_reference_out_of_range_is_unparseable_damage(ref):
    with pytest.raises(ValueError, match="record reference"):
        RecordRef.parse(ref)
    reader = JournalReader(InMemoryFilesystem(), "/j", deadline_seconds=0.0)
    with pytest.raises(FrameDamage) as caught:
        reader.read(ref)
    assert caught.value.code == "unparseable_name"


@pytest.mark.parametrize("poison", ["dir", "fifo"])
def test_a_segment_that_is_not_a_regular_file_is_missing_segment_damage(poison):
    fs = InMemoryFilesystem()
    writer = JournalWriter(fs, "/j", "0123456789ab", segment_bytes=1 << 20, durable=False)
    ref = writer.append({"x": 1})
    writer.close()
    path = journal_module.segment_path("/j", "0123456789ab", 1)
    fs.remove(path)
    fs.makedirs(path) if poison == "dir" else fs.mkfifo(path)
    reader = JournalReader(fs, "/j", deadline_seconds=0.0)
    with pytest.raises(FrameDamage) as caught:
        reader.read(ref)
    assert caught.value.code == "missing_segment" and "not a regular file" in caught.value.message
    [(none, damage)] = list(reader.iter_segment(path))
    assert none is None and damage.code == "missing_segment"


def test_a_writer_refuses_a_frame_no_reader_would_accept(monkeypatch):
    monkeypatch.setattr(journal_module, "MAX_FRAME_BYTES", 200)
    fs = InMemoryFilesystem()
    writer = JournalWriter(fs, "/j", "0123456789ab", segment_bytes=1 << 20, durable=False)
    with pytest.raises(ValueError, match="exceeds the 200-byte bound"):
        writer.append({"x": "y" * 300})
    assert list(fs.scandir("/j")) == []  # nothing was written


# -- containment of unexpected exceptions ----------------------------------------------------------

def test_an_unexpected_exception_for_one_job_refuses_it_once_and_the_manager_serves_the_rest(monkeypatch, caplog):
    ports, handle, [bad, good] = _workspace()
    manager = _manager(ports, handle, _succeeding(ports.fs))
    register = manager.register

    def flaky(marker: Marker) -> None:
        if marker.job_id == bad.job_id:
            raise RuntimeError("a bug in registration")
        register(marker)

    monkeypatch.setattr(manager, "register", flaky)
    with caplog.at_level("ERROR", logger="httk.workflow.manager"):
        assert manager.run() == 0
    assert _kind(handle, good.job_id) == StateKind.SUCCEEDED
    assert _kind(handle, bad.job_id) == StateKind.SUBMITTED
    lines = [record.getMessage() for record in caplog.records if str(bad.key) in record.getMessage()]
    # Logged once with the job key and the exception's type and message, though every pass met it.
    assert lines == [f"job {bad.key}: refused: registration failed: RuntimeError: a bug in registration"]
    assert "1 refused" in manager.summary()


def test_a_launch_interrupted_after_the_runner_started_keeps_its_gate_shut(monkeypatch):
    ports, handle, [only] = _workspace(jobs=1)
    proc = FakeProcessControl(ports.clock, _succeeding(ports.fs), uid=ports.fs.uid)
    manager = Manager(handle, proc, SETTINGS, ManagerConfig(), manager_id="m-a", out=lambda line: None)
    transition = handle.store.transition

    def failing(marker, frame, event, **changes):
        if event.value == "launch":
            raise OSError(28, "No space left on device")
        return transition(marker, frame, event, **changes)

    monkeypatch.setattr(handle.store, "transition", failing)
    assert manager.run() == 0
    assert proc.processes and all(p.abandoned and not p.released for p in proc.processes)  # none ever ran
    assert "the claim failed: OSError" in manager.refused[str(only.key)]
