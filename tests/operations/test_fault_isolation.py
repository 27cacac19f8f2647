"""One damaged document is a report about its own job or manager, never a stalled or failing command.

A manager's ``manager.json`` or ``heartbeat.json``, a failed attempt's ``error.json``
and a state-tree name that is not UTF-8 are damaged the ways a shared filesystem
or a hostile runner can damage them; ``job why`` of another job, ``workspace
managers``, ``workspace status`` and ``workspace fsck`` still answer, name the
damaged thing, and what they return can be printed and encoded as JSON.
Spec: 000 "Checking and repairing"; docs/workflow_filesystem_api.md "Reading documents".
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.manifest import read_beat, read_manifest
from httk.workflow.operations import diagnosis, inspection
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import SubmissionError, submit
from httk.workflow.testing import (
    InMemoryFilesystem,
    memory_manager,
    memory_workspace,
    outcome_document,
    scripted_runner,
)
from httk.workflow.testing.manager import PAYLOAD_SOURCE


def _fifo(fs: InMemoryFilesystem, path: str) -> None:
    fs.mkfifo(path)


def _directory(fs: InMemoryFilesystem, path: str) -> None:
    fs.makedirs(f"{path}/inside")


def _symlink(fs: InMemoryFilesystem, path: str) -> None:
    fs.symlink("/etc/passwd", path)


def _binary(fs: InMemoryFilesystem, path: str) -> None:
    fs.write_atomic(path, b"\xff\xfe\x00" * 50, durable=False)


def _wrong_type(fs: InMemoryFilesystem, path: str) -> None:
    fs.write_atomic(path, b"[1, 2]", durable=False)


def _huge(fs: InMemoryFilesystem, path: str) -> None:
    fs.write_atomic(path, b" " * (17 * 1024 * 1024), durable=False)


DAMAGE: dict[str, Callable[[InMemoryFilesystem, str], None]] = {
    "fifo": _fifo, "directory": _directory, "symlink": _symlink, "binary": _binary, "wrong_type": _wrong_type,
    "huge": _huge,
}


def _replace(fs: InMemoryFilesystem, path: str, how: str) -> None:
    if fs.lstat(path) is not None:
        fs.remove(path)
    DAMAGE[how](fs, path)


def _two_jobs_one_failed():
    """A workspace with a succeeded job and a failed one, after manager ``m-a`` ran both."""
    ports, handle, markers = memory_workspace(2)
    failing = str(markers[1].key)

    def script(launch):
        failed = launch.env["HTTK_WORKFLOW_JOB_ID"] in failing
        return {"outcome.json": outcome_document("fail", failure={"code": "boom", "message": "no"}) if failed
                else outcome_document()}

    memory_manager(handle, scripted_runner(ports.fs, script), manager_id="m-a").run()
    [good] = handle.store.iter_markers(StateKind.SUCCEEDED)
    [bad] = handle.store.iter_markers(StateKind.FAILED)
    return ports, handle, good, bad


@pytest.mark.parametrize("document", ["manager.json", "heartbeat.json"])
@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_one_managers_damaged_document_leaves_the_others_and_job_why_working(document, how):
    ports, handle, good, _bad = _two_jobs_one_failed()
    memory_manager(handle, manager_id="m-b").run()  # a second manager, whose documents stay whole
    _replace(ports.fs, f"{handle.layout.managers}/m-a/{document}", how)

    if document == "manager.json":
        assert read_manifest(ports.fs, handle.layout, "m-a") is None  # unreadable: never a hang or an OSError
    else:
        assert read_beat(ports.fs, handle.layout, "m-a") is None
    listed = {manager["manager_id"] for manager in diagnosis.managers(handle)}
    assert "m-b" in listed
    assert diagnosis.why(handle, good)["summary"] == "succeeded; nothing to do"
    # A later manager still serves the workspace (recovery reads every heartbeat).
    memory_manager(handle, manager_id="m-c").run()


@pytest.mark.parametrize("how", ["fifo", "directory", "symlink"])
def test_an_unreadable_error_json_is_named_by_job_why_and_never_blocks_it(how):
    ports, handle, _good, bad = _two_jobs_one_failed()
    [attempt] = ports.fs.scandir(handle.layout.job_attempts(bad.job_id))
    path = f"{attempt.path}/error.json"
    _replace(ports.fs, path, how)

    report = diagnosis.why(handle, bad)
    assert report["summary"] == "failed: boom: no"
    [line] = [line for line in report["lines"] if line.startswith("error.json of the last attempt")]
    assert path in line and "not a regular file" in line


BAD_BYTE = "\udcff"  # how the OS hands over the byte 0xff of a file name


def _encodable(value) -> None:
    json.dumps(value, ensure_ascii=False).encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    codec.dumps(value).encode("utf-8")


@pytest.mark.parametrize("where", ["marker_name", "placement_directory"])
def test_a_state_tree_name_that_is_not_utf8_is_reported_printably_and_the_rest_served(where):
    ports, handle, markers = memory_workspace(2)
    fs, victim = ports.fs, markers[1]
    old = handle.store.marker_path(victim)
    if where == "marker_name":
        new = f"{handle.layout.kind_dir(StateKind.SUBMITTED)}/p/{BAD_BYTE}{victim.name}"
    else:
        fs.makedirs(f"{handle.layout.kind_dir(StateKind.SUBMITTED)}/{BAD_BYTE}")
        new = f"{handle.layout.kind_dir(StateKind.SUBMITTED)}/{BAD_BYTE}/{victim.name}"
    fs.rename(old, new, durable=False)

    status = inspection.status(handle)
    _encodable(status)
    [damage] = status["damage"]
    assert damage["code"] == "unparseable_name" and "\\xff" in damage["path"]
    report = Fsck(handle).run()
    _encodable(report)
    problems = {problem["code"]: problem for problem in report["problems"]}
    assert sorted(problems) == ["orphaned_payload", "unparseable_name"]  # its payload has no marker now
    assert "\\xff" in problems["unparseable_name"]["path"]
    # Nothing below an undecodable placement is a job: no frame could ever record it.
    assert [marker.job_id for marker in handle.store.iter_markers(StateKind.SUBMITTED)] == [markers[0].job_id]
    memory_manager(handle).run()
    assert [marker.job_id for marker in handle.store.iter_markers(StateKind.SUCCEEDED)] == [markers[0].job_id]


@pytest.mark.parametrize("spoil", [
    lambda name: name.replace(".g0.", ".gZZ."),  # a number no store writes
    lambda name: name.rsplit(".", 1)[0],  # a field missing
    lambda name: name.replace(".p0.", ".p0x."),
    lambda name: f"{name}{BAD_BYTE}",  # not UTF-8
], ids=["generation", "missing_field", "priority", "not_utf8"])
def test_a_selector_of_a_job_whose_marker_name_is_damaged_names_the_damage(spoil):
    ports, handle, [bad, good] = memory_workspace(2)
    old = handle.store.marker_path(bad)
    ports.fs.rename(old, f"{old.rsplit('/', 1)[0]}/{spoil(bad.name)}", durable=False)

    assert inspection.resolve_job(handle, good.job_id) == good
    with pytest.raises(inspection.SelectorError) as refused:
        inspection.resolve_job(handle, bad.job_id)
    message = str(refused.value)
    assert "a damaged marker name holds it" in message and "workspace fsck" in message
    message.encode("utf-8")  # printable whatever the name holds
    with pytest.raises(inspection.SelectorError, match="no job matches selector 'ffff' in workspace /ws$"):
        inspection.resolve_job(handle, "ffff")


def test_a_placement_that_is_not_utf8_is_refused_at_submission_and_nothing_is_written():
    ports, handle, _ = memory_workspace(1)

    def state() -> dict[str, list[str]]:
        return {kind.value: sorted(entry.name for entry in ports.fs.scandir(handle.layout.kind_dir(kind)))
                for kind in StateKind}

    before, ids = state(), sorted(entry.name for entry in ports.fs.scandir(handle.layout.ids))
    refusal = r"invalid placement 'q\\udcff': it is not UTF-8.*choose a UTF-8 placement"
    with pytest.raises(SubmissionError, match=refusal):
        submit(handle, PAYLOAD_SOURCE, f"q{BAD_BYTE}")
    assert state() == before
    assert sorted(entry.name for entry in ports.fs.scandir(handle.layout.ids)) == ids
    assert not ports.fs.exists(f"{handle.root}/q{BAD_BYTE}")
    assert [entry.name for entry in ports.fs.scandir(handle.layout.tmp)] == []
