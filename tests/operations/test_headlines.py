"""``job show`` and ``job why`` report the latest attempt's headline events first (spec 002 row
``httk_workflow_runlog_headline``: "meant to be read first when the job is inspected").

The run log is ``<workdir>/.httk-runner/runlog.jsonl``; a persistent workdir keeps the
events of every attempt, so only the latest attempt's headlines are shown, at most
``HEADLINES_SHOWN`` of them, newest last; notes and torn lines are not headlines.
"""

from __future__ import annotations

from typing import Any

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations import diagnosis, inspection
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, write_tree
from httk.workflow.testing.process import Launch


def _event(launch: Launch, kind: str, message: str, when: float) -> bytes:
    return codec.encode({
        "format": "httk-workflow-runlog-event", "format_version": 1, "kind": kind, "label": "progress",
        "message": message, "files": [], "time": when, "step": "start",
        "attempt_id": launch.env["HTTK_WORKFLOW_ATTEMPT_ID"],
    }) + b"\n"


def _runner(fs: Any):
    """First attempt: one headline, then retry. Second: seven headlines and a note, then fail."""
    attempts: list[str] = []

    def behaviour(launch: Launch) -> int:
        attempts.append(launch.env["HTTK_WORKFLOW_ATTEMPT_ID"])
        log = f"{launch.env['HTTK_WORKFLOW_WORKDIR']}/.httk-runner/runlog.jsonl"
        try:
            old = fs.read_bytes(log)
        except FileNotFoundError:
            old = b""
        if len(attempts) == 1:
            lines = _event(launch, "headline", "first attempt", 1.0)
            outcome = outcome_document("retry", reason="again")
        else:
            lines = b"".join(_event(launch, "headline", f"h{n}", 10.0 + n) for n in range(7))
            lines += _event(launch, "note", "not a headline", 30.0) + b'{"torn'
            outcome = outcome_document("fail", failure={"code": "bad", "message": "no", "details": {},
                                                        "retryable": False})
        fs.write_atomic(log, old + lines, durable=False)
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        write_tree(fs, f"{control}/outcome.tmp.1", {"outcome.json": outcome})
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=False)
        return 0

    return behaviour


def test_show_and_why_report_the_latest_attempts_headlines():
    ports, handle, [marker] = memory_workspace(workdir_mode="persistent", maximum_attempts_per_activation=3)
    manager = memory_manager(handle, _runner(ports.fs))
    for _ in range(40):
        manager.tick()
        ports.clock.advance(5.0)
        if list(handle.store.iter_markers(StateKind.FAILED)):
            break
    [failed] = list(handle.store.iter_markers(StateKind.FAILED))
    shown = inspection.show_job(handle, failed)
    assert [event["message"] for event in shown["headlines"]] == ["h2", "h3", "h4", "h5", "h6"]
    assert shown["headlines"][-1] == {"time": 16.0, "step": "start", "label": "progress", "message": "h6"}
    report = diagnosis.why(handle, failed)
    assert report["headline"]["message"] == "h6"
    assert report["lines"][0] == "latest headline (step 'start'): progress: h6"


def test_a_job_without_a_run_log_shows_no_headlines():
    _ports, handle, [marker] = memory_workspace()
    assert inspection.show_job(handle, marker)["headlines"] == []
    assert diagnosis.why(handle, marker)["headline"] is None
