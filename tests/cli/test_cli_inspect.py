"""``job show`` and ``job log`` on jobs with history: joins, failures, budgets, and damaged frames."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from httk.workflow.domain.frames import ChildRef, JoinRecord
from httk.workflow.domain.lifecycle import Event
from httk.workflow.domain.model import Failure
from httk.workflow.store.journal import RecordRef, segment_path


@pytest.fixture
def handle(cli, workspace):
    """The workspace through the CLI's own container (the one its commands use)."""
    return cli.container.workspaces().open(workspace)


def advance(handle, key, *steps):
    """Apply ``(event, changes)`` transitions to job ``key`` through the store; returns the last marker."""
    store = handle.store
    marker = store.find(key.split("--")[-1])
    for event, changes in steps:
        marker, _frame = store.transition(marker, store.read_job(marker).frame, event, **changes)
    return marker


def corrupt(handle, ref):
    """Flip one byte inside the JSON body of the frame ``ref`` names."""
    record = RecordRef.parse(ref)
    path = Path(segment_path(handle.layout.journal, record.writer, record.segment))
    data = bytearray(path.read_bytes())
    data[record.offset + 12] ^= 0x01
    path.write_bytes(bytes(data))


CLAIM = {"activation_ordinal": 1, "attempt_ordinal": 1, "total_attempts": 1, "attempt_id": "a1"}


@pytest.fixture
def submitted(cli, workspace, payload):
    return cli("job", "submit", workspace, str(payload), "--placement", "p", "--tag", "si").stdout.strip()


def test_show_a_waiting_job_with_children(cli, workspace, handle, submitted):
    done, pending = str(uuid.uuid4()), str(uuid.uuid4())
    join = JoinRecord(step="gather", children=(ChildRef("c1", done, f"c1--{done}", "p/c"),
                                               ChildRef("c2", pending, pending, "p/c")))
    marker = advance(
        handle,
        submitted,
        (Event.REGISTER, {}),
        (Event.CLAIM, CLAIM),
        (Event.LAUNCH, {}),
        (Event.PUBLISH, {}),
        (Event.COMMIT_WAIT, {"join": join, "runner_steps": ("gather", "main")}),
    )
    notes = Path(workspace) / ".httk-workflow" / "joins" / marker.job_id
    notes.mkdir(parents=True)
    note = {"kind": "succeeded", "failure": None, "job_key": f"c1--{done}", "placement": "p/c", "label": "c1"}
    (notes / f"{done}.json").write_text(json.dumps(note))
    report = cli.json("job", "show", workspace, submitted)
    assert report["kind"] == "waiting" and report["generation"] == 5
    assert report["runner_steps"] == ["gather", "main"]
    # c2 has no note and no marker (nothing was ever submitted under it): unresolvable, not a made-up "pending".
    assert [(child["label"], child["kind"]) for child in report["children"]] == [("c1", "succeeded"),
                                                                                 ("c2", "unresolvable")]
    assert report["children"][0]["placement"] == "p/c"
    budgets = report["budgets"]
    assert budgets["maximum_attempts_per_activation"]["used"] == 1
    assert budgets["maximum_total_attempts"] == {"limit": None, "used": 1, "remaining": None, "exhausted": False}
    text = cli("job", "show", workspace, submitted).stdout
    assert "join:" in text and "c2" in text and "unresolvable" in text


def test_show_and_log_a_failed_job(cli, workspace, handle, submitted):
    failure = Failure("boom", "it broke")
    advance(
        handle,
        submitted,
        (Event.REGISTER, {}),
        (Event.CLAIM, CLAIM),
        (Event.LAUNCH, {}),
        (Event.PUBLISH, {}),
        (Event.COMMIT_FAIL, {"failure": failure, "reason": "runner failed"}),
    )
    report = cli.json("job", "show", workspace, submitted)
    assert report["kind"] == "failed"
    assert report["failure"] == {"code": "boom", "message": "it broke", "details": {}, "retryable": False}
    assert "boom: it broke" in cli("job", "show", workspace, submitted).stdout
    entries = cli.json("job", "log", workspace, submitted)
    assert [entry["event"] for entry in entries] == [
        "submit",
        "register",
        "claim",
        "launch",
        "publish",
        "commit_fail",
    ]
    assert [entry["generation"] for entry in entries] == [0, 1, 2, 3, 4, 5]
    assert entries[-1]["failure"]["code"] == "boom"
    newest = cli.json("job", "log", workspace, submitted, "--limit", "2")
    assert [entry["event"] for entry in newest] == ["publish", "commit_fail"]
    text = cli("job", "log", workspace, submitted).stdout.splitlines()
    assert len(text) == 6 and "failure=boom" in text[-1] and "reason=runner failed" in text[-1]


def test_show_and_why_lead_with_the_latest_attempts_headlines(cli, workspace, handle, submitted):
    """Spec 002: a headline event is meant to be read first when the job is inspected."""
    marker = advance(handle, submitted, (Event.REGISTER, {}), (Event.CLAIM, CLAIM), (Event.LAUNCH, {}),
                     (Event.PUBLISH, {}), (Event.COMMIT_FAIL, {"failure": Failure("boom", "it broke")}))
    Path(handle.layout.attempt_dir(marker.job_id, 1, "a1")).mkdir(parents=True)
    log = Path(handle.layout.persistent_workdir(marker.job_id)) / ".httk-runner" / "runlog.jsonl"
    log.parent.mkdir(parents=True)
    head = {"format": "httk-workflow-runlog-event", "format_version": 1, "files": [], "step": "main",
            "label": "energy", "time": 0.0}
    events = [{**head, "kind": "headline", "message": "from another attempt", "attempt_id": "a0"},
              {**head, "kind": "headline", "message": "E = -12.5 eV", "attempt_id": "a1"},
              {**head, "kind": "note", "message": "just a note", "attempt_id": "a1"}]
    log.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    shown = cli.json("job", "show", workspace, submitted)["headlines"]
    assert shown == [{"time": 0.0, "step": "main", "label": "energy", "message": "E = -12.5 eV"}]
    text = cli("job", "show", workspace, submitted).stdout.splitlines()
    at = text.index("headlines (latest attempt):")
    assert text[at + 1].endswith("[main] energy: E = -12.5 eV") and "note" not in text[at + 2]
    why = cli("job", "why", workspace, submitted).stdout.splitlines()
    assert why[1] == "  latest headline (step 'main'): energy: E = -12.5 eV"
    assert cli.json("job", "why", workspace, submitted)["headline"]["message"] == "E = -12.5 eV"


def test_damaged_current_frame_is_reported_not_raised(cli, workspace, handle, submitted):
    marker = advance(handle, submitted, (Event.REGISTER, {}), (Event.CLAIM, CLAIM), (Event.RELEASE_CLAIM, {}))
    corrupt(handle, marker.ref)
    shown = cli("job", "show", workspace, submitted, "--json", code=1)
    report = json.loads(shown.stdout)
    assert report["damage"]["code"] == "checksum_mismatch"
    assert report["kind"] == "ready" and report["job_digest"] is not None
    assert "checksum_mismatch" in cli("job", "show", workspace, submitted, code=1).stdout
    logged = json.loads(cli("job", "log", workspace, submitted, "--json", code=1).stdout)
    assert logged[-1]["damage"]["code"] == "checksum_mismatch" and logged[-1]["generation"] == 3
    # What remains readable is still shown, found by scanning the journal past the broken link.
    assert [entry.get("event") for entry in logged[:-1]] == ["submit", "register", "claim"]
    assert logged[-2]["recovered_by_scan"] is True


def test_damaged_middle_frame_keeps_the_rest_of_the_history(cli, workspace, handle, submitted):
    advance(handle, submitted, (Event.REGISTER, {}))
    middle = advance(handle, submitted, (Event.CLAIM, CLAIM))
    advance(handle, submitted, (Event.RELEASE_CLAIM, {}))
    corrupt(handle, middle.ref)
    assert cli.json("job", "show", workspace, submitted)["damage"] is None
    result = cli("job", "log", workspace, submitted, code=1)
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert "DAMAGED checksum_mismatch" in lines[2] and "release_claim -> ready" in lines[3]
    assert "register -> ready" in lines[1]


def test_status_counts_every_kind(cli, workspace, handle, submitted, make_payload, tmp_path):
    advance(handle, submitted, (Event.REGISTER, {}))
    other = make_payload(tmp_path / "other")
    cli("job", "submit", workspace, str(other), "--placement", "q")
    counts = cli.json("workspace", "status", workspace)["counts"]
    assert counts["ready"] == 1 and counts["submitted"] == 1 and counts["failed"] == 0


def test_an_unreadable_job_json_is_reported(cli, workspace, submitted):
    job_file = Path(workspace) / "p" / submitted / "job.json"
    job_file.write_text("{not json")
    result = cli("job", "show", workspace, submitted, "--json", code=1)
    report = json.loads(result.stdout)
    assert report["job_error"]["code"] == "invalid_job" and "not JSON" in report["job_error"]["message"]
    assert report["kind"] == "submitted" and report["budgets"] is None and report["job_digest"] is not None
    assert "invalid_job" in cli("job", "show", workspace, submitted, code=1).stdout
