"""Recorded batch-system sessions: their format, where they are found, how one is replayed or recorded.

A scenario is a JSON document
``{"format": "httk-workflow-batch-scenario", "format_version": 1, "batch_system", "source", "steps"}``;
each step is one call of the BatchSystem port with what it must return and the
commands it ran then, as :class:`~httk.workflow.testing.Exchange` documents:

- ``{"op": "submit", "script", "workdir", "expect": JOB_ID, "exchanges"}``
- ``{"op": "status", "job_ids", "expect": {ID: {"state", "finished", "succeeded"}}, "exchanges"}``
- ``{"op": "cancel", "job_ids", "exchanges"}``

An exchange's ``stdout`` or ``stderr`` may be ``{"file": PATH}`` (relative to the
scenario), so a published sample is kept once (tests/data/pbs). Scenarios live in
``tests/contract/recordings/<batch system>/*.json`` and in every
directory named by ``$HTTK_CONTRACT_RECORDINGS`` (``os.pathsep``-separated, same
layout), so an integrator replays their own recordings without copying them here.
``python tests/contract/batch_scenarios.py`` records one against a real scheduler
(docs/integrators.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from httk.workflow.ports import BatchJobStatus
from httk.workflow.testing import RecordingTransport, ReplayTransport
from httk.workflow.testing.replay import load_exchanges

SCENARIO_FORMAT = "httk-workflow-batch-scenario"
HERE = Path(__file__).resolve().parent / "recordings"


def directories() -> list[Path]:
    extra = [Path(item) for item in os.environ.get("HTTK_CONTRACT_RECORDINGS", "").split(os.pathsep) if item]
    return [HERE, *extra]


def scenarios(batch_name: str) -> list[Path]:
    """Every recorded scenario of ``batch_name``, in name order."""
    return sorted(path for directory in directories() for path in (directory / batch_name).glob("*.json"))


def status_document(status: BatchJobStatus) -> dict[str, Any]:
    return {"state": status.state, "finished": status.finished, "succeeded": status.succeeded}


def replay(batch_class: type, path: Path) -> None:
    """Run every step of the scenario at ``path`` against ``batch_class`` over a ReplayTransport."""
    document = json.loads(path.read_text())
    assert document.get("format") == SCENARIO_FORMAT, f"{path}: not a {SCENARIO_FORMAT} document"
    assert document.get("batch_system") == batch_class.name, f"{path}: recorded for {document.get('batch_system')}"
    for number, step in enumerate(document["steps"], 1):
        step = {**step, "exchanges": [inline(path, exchange) for exchange in step["exchanges"]]}
        transport = ReplayTransport.from_document(step)
        batch = batch_class(transport, timeout=30)
        where = f"{path.name} step {number} ({step['op']})"
        if step["op"] == "submit":
            got: Any = batch.submit(step["script"], workdir=step["workdir"])
        elif step["op"] == "status":
            got = {job_id: status_document(status) for job_id, status in batch.status(step["job_ids"]).items()}
        elif step["op"] == "cancel":
            got = batch.cancel(step["job_ids"])
        else:
            raise AssertionError(f"{where}: unknown op")
        assert got == step.get("expect"), f"{where}: got {got!r}, recorded {step.get('expect')!r}"
        transport.assert_done()
        load_exchanges(step)  # the recorded exchanges themselves are well formed


def inline(path: Path, exchange: dict[str, Any]) -> dict[str, Any]:
    """An exchange whose ``stdout``/``stderr`` may be ``{"file": RELATIVE}``: a sample kept once, beside its README."""
    return {key: (path.parent / value["file"]).read_text() if isinstance(value, dict) else value
            for key, value in exchange.items()}


# -- recording -------------------------------------------------------------------------------------
def record(batch_class: type, transport: Any, workdir: str, httk: list[str], source: str,
           wait: float = 60.0) -> dict[str, Any]:
    """Submit one manager script that exits at once, poll it to the end, cancel it: the scenario document."""
    steps: list[dict[str, Any]] = []

    def step(op: str, call: Any, **fields: Any) -> Any:
        recorder = RecordingTransport(transport)
        result = call(batch_class(recorder, timeout=60))
        if op == "status":
            expect: Any = {job_id: status_document(status) for job_id, status in result.items()}
        else:
            expect = result
        exchanges = recorder.document(source)["exchanges"]
        steps.append({"op": op, **fields, "expect": expect, "exchanges": exchanges})
        return result

    script = batch_class(transport).compose_script(workdir.rsplit("/.httk-workflow", 1)[0], {}, [], httk, workers=1)
    job_id = step("submit", lambda batch: batch.submit(script, workdir=workdir), script=script, workdir=workdir)
    deadline = time.monotonic() + wait
    while True:
        statuses = step("status", lambda batch: batch.status([job_id]), job_ids=[job_id])
        if statuses[job_id].finished or time.monotonic() > deadline:
            break
        time.sleep(1)
    step("cancel", lambda batch: batch.cancel([job_id]), job_ids=[job_id])
    return {"format": SCENARIO_FORMAT, "format_version": 1, "batch_system": batch_class.name, "source": source,
            "steps": steps}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Record a batch system's session against its real scheduler.")
    parser.add_argument("batch_system", help="the entry-point name (slurm, pbs, your plug-in's)")
    parser.add_argument("workdir", help="an absolute directory on the target for the script and its output")
    parser.add_argument("output", help="the scenario file to write (recordings/<batch system>/<name>.json)")
    parser.add_argument("--source", required=True, help="where and against which scheduler version")
    parser.add_argument("--ssh", metavar="HOST", help="record over SSH to HOST (default: this machine)")
    parser.add_argument("--httk", default="true", help="the 'httk' the script execs (default: true, so it exits)")
    options = parser.parse_args(argv)
    from httk.workflow.adapters.plugins import EntryPointCatalog

    batch_class = EntryPointCatalog().batch_system(options.batch_system)
    if batch_class is None:
        parser.error(f"no batch system {options.batch_system!r} is installed")
    if options.ssh:
        from httk.workflow.adapters.transport_ssh import SshTransport

        transport: Any = SshTransport(options.ssh)
    else:
        from httk.workflow.adapters.transport_local import LocalTransport

        transport = LocalTransport()
    document = record(batch_class, transport, options.workdir, [options.httk], options.source)
    Path(options.output).parent.mkdir(parents=True, exist_ok=True)
    Path(options.output).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
