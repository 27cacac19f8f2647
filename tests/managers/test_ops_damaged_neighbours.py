"""Real managers and commands next to one damaged document of another manager or job.

A FIFO or a directory where an earlier manager's ``heartbeat.json`` or ``manager.json``
belongs must not block a new manager's recovery pass nor ``job why`` and ``workspace
managers`` (a blocking ``open`` of a FIFO never returns); a FIFO in one job's payload
fails that job's launch by name while the good job runs. Spec: 000 "Checking and
repairing"; docs/workflow_filesystem_api.md "Reading documents", "Attempts".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SUCCEED = """publish '"action":"succeed"'"""


def _spoil(path: Path, how: str) -> None:
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("document", ["heartbeat.json", "manager.json"])
@pytest.mark.parametrize("how", ["fifo", "directory"])
def test_another_managers_unreadable_document_blocks_no_manager_and_no_command(ops, document, how):
    first = ops.job(SUCCEED)
    earlier = ops.run()
    _spoil(Path(ops.handle.layout.managers) / earlier.manager_id / document, how)
    good = ops.job(SUCCEED)

    later = ops.run(timeout=60)
    assert ops.kind(good) == "succeeded"
    assert "Traceback" not in later.stderr
    why = ops.httk("job", "why", str(ops.root), first, timeout=30)
    assert why.stdout.startswith(f"{first}: succeeded")
    listed = ops.httk("workspace", "managers", str(ops.root), timeout=30).stdout
    assert later.manager_id in listed


def test_a_fifo_in_one_payload_fails_that_job_by_name_and_the_other_runs(ops):
    bad = ops.job(SUCCEED, priority=1)
    fifo = ops.payload(bad) / "inputs" / "data.fifo"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    good = ops.job(SUCCEED)

    manager = ops.run(timeout=60)
    assert ops.kind(good) == "succeeded"
    assert ops.kind(bad) == "failed"  # never left claimed and refused at every pass
    failure = ops.frame(bad).failure
    assert failure.code == "payload_unreadable"
    assert failure.message == (f"the payload cannot be copied into the workdir: {fifo} is not a regular file, "
                               "directory or symlink")
    assert "0 refused" in manager.stdout.splitlines()[-1]
    assert "payload_unreadable" in ops.httk("job", "why", str(ops.root), bad).stdout
