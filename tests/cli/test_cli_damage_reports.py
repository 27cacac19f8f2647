"""fsck, ``workspace status`` and ``job show`` report the damage a manager sees, with one set of codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from disk_support import disk_snapshot as tree
from httk.workflow.domain.lifecycle import Event
from httk.workflow.store.journal import RecordRef, segment_path


@pytest.fixture
def handle(cli, workspace):
    """The workspace through the CLI's own container (the one its commands use)."""
    return cli.container.workspaces().open(workspace)


@pytest.fixture
def submitted(cli, workspace, payload):
    return cli("job", "submit", workspace, str(payload), "--placement", "p").stdout.strip()


def job_json(workspace: str, key: str) -> Path:
    return Path(workspace) / "p" / key / "job.json"


def registered_and_corrupt(handle, key: str) -> None:
    """Register the job (generation 1), then flip a byte of that frame in the journal."""
    store = handle.store
    marker = store.find(key)
    marker, _ = store.transition(marker, store.read_job(marker).frame, Event.REGISTER, step="main")
    record = RecordRef.parse(marker.ref)
    path = Path(segment_path(handle.layout.journal, record.writer, record.segment))
    data = bytearray(path.read_bytes())
    data[record.offset + 12] ^= 0x01
    path.write_bytes(bytes(data))


# -- fsck --------------------------------------------------------------------------------------
def test_fsck_reports_an_unreadable_job_json_and_writes_nothing(cli, workspace, submitted):
    job_json(workspace, submitted).write_text("{not json")
    before = tree(workspace)
    result = cli("workspace", "fsck", workspace, "--json", code=1)
    report = json.loads(result.stdout)
    assert report["clean"] is False and report["left_for_operator"] == 1
    [problem] = report["problems"]
    assert problem["code"] == "invalid_job" and problem["job"] == submitted
    assert problem["path"] == str(job_json(workspace, submitted)) and problem["action"] == "reported"
    text = cli("workspace", "fsck", workspace, code=1).stdout
    assert "invalid_job" in text and "clean" not in text
    assert tree(workspace) == before


def test_fsck_reports_a_missing_job_json_and_repair_leaves_it_for_an_operator(cli, workspace, submitted):
    job_json(workspace, submitted).unlink()
    before = tree(workspace)
    report = json.loads(cli("workspace", "fsck", workspace, "--repair", "--json", code=1).stdout)
    [problem] = report["problems"]
    assert problem["code"] == "missing_payload" and problem["action"].startswith("unrepairable")
    assert report["left_for_operator"] == 1
    assert tree(workspace) == before


# -- workspace status --------------------------------------------------------------------------
def test_status_lists_a_corrupt_frame_and_an_unreadable_job_json(cli, workspace, handle, submitted, make_payload,
                                                                   tmp_path):
    registered_and_corrupt(handle, submitted)
    other = make_payload(tmp_path / "other")
    broken = cli("job", "submit", workspace, str(other), "--placement", "p").stdout.strip()
    job_json(workspace, broken).write_text("[]")
    report = cli.json("workspace", "status", workspace)
    codes = {(entry["code"], entry["job"]) for entry in report["damage"]}
    assert codes == {("checksum_mismatch", submitted), ("invalid_job", broken)}
    assert report["counts"]["ready"] == 1 and report["counts"]["submitted"] == 1
    text = cli("workspace", "status", workspace).stdout
    assert "damage checksum_mismatch" in text and "damage invalid_job" in text
    assert f"run 'httk workflow workspace fsck {workspace}'" in text


def test_status_and_fsck_agree(cli, workspace, handle, submitted):
    registered_and_corrupt(handle, submitted)
    status = cli.json("workspace", "status", workspace)["damage"]
    fsck = json.loads(cli("workspace", "fsck", workspace, "--json", code=1).stdout)["problems"]
    assert [(d["code"], d["job"], d["path"]) for d in status] == [(p["code"], p["job"], p["path"]) for p in fsck]


# -- job show ----------------------------------------------------------------------------------
def last_change(text: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith("last change")]
    return line


def test_show_names_the_damage_of_an_unreadable_job_json_at_generation_0(cli, workspace, submitted):
    job_json(workspace, submitted).write_text("{not json")
    line = last_change(cli("job", "show", workspace, submitted, code=1).stdout)
    assert "None" not in line and "invalid_job" in line and "httk workflow workspace fsck" in line


def test_show_names_the_damage_of_an_unreadable_frame(cli, workspace, handle, submitted):
    registered_and_corrupt(handle, submitted)
    line = last_change(cli("job", "show", workspace, submitted, code=1).stdout)
    assert "checksum_mismatch" in line and "httk workflow workspace fsck" in line


def test_show_of_a_fresh_job_names_its_submission(cli, workspace, submitted):
    line = last_change(cli("job", "show", workspace, submitted).stdout)
    # The submission's time is its id reservation's (generation 0 has no frame to hold one).
    assert re.search(r"submit at \d{4}-\d\d-\d\d", line), line
