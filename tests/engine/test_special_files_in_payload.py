"""A FIFO in one job's payload or runner directory fails that job's launch by name; the others run.

Submission copies a payload and refuses a FIFO, so one only appears later (put there by
hand, or by a ``--move`` submission's owner). The workdir seeding and the runner copy
refuse it unread: the job fails with ``payload_unreadable`` (or ``runner_unavailable``)
naming the file, instead of being refused and left ``claimed`` at every pass.
Spec: docs/workflow_filesystem_api.md "Attempts"; docs/task_manager.md "One bad job never stops the others".
"""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.submission import submit
from httk.workflow.testing import memory_manager, memory_workspace
from httk.workflow.testing.manager import PAYLOAD_SOURCE


@pytest.mark.parametrize("where", ["input.fifo", "inputs/deep/input.fifo"])
def test_a_fifo_in_one_payload_fails_that_job_with_payload_unreadable(where):
    ports, handle, [bad, good] = memory_workspace(2)
    payload = handle.store.payload_dir(bad)
    fifo = f"{payload}/{where}"
    ports.fs.makedirs(fifo.rsplit("/", 1)[0])
    ports.fs.mkfifo(fifo)

    manager = memory_manager(handle)
    assert manager.run() == 0
    assert [marker.job_id for marker in handle.store.iter_markers(StateKind.SUCCEEDED)] == [good.job_id]
    [failed] = handle.store.iter_markers(StateKind.FAILED)
    assert failed.job_id == bad.job_id
    failure = handle.store.read_frame(failed).failure
    assert failure.code == "payload_unreadable"
    assert failure.message.startswith("the payload cannot be copied into the workdir: ")
    assert failure.message.endswith(f"{fifo} is not a regular file, directory or symlink")
    # Nothing half-seeded is left: the next attempt (after the operator removed the FIFO) seeds afresh.
    assert not ports.fs.exists(handle.layout.persistent_workdir(bad.job_id))
    assert [entry.name for entry in ports.fs.scandir(handle.layout.tmp)] == []


def test_a_fifo_in_a_runner_directory_fails_that_job_with_runner_unavailable():
    ports, handle, _ = memory_workspace(0, runner_path="runner")
    # Submission refuses a payload lacking its runner: submit it with one, then plant the FIFO in the copy.
    ports.fs.write_atomic(f"{PAYLOAD_SOURCE}/runner/run.sh", b"#!/bin/sh\n", durable=False)
    bad = submit(handle, PAYLOAD_SOURCE, "p").marker
    runner = f"{handle.store.payload_dir(bad)}/runner"
    ports.fs.mkfifo(f"{runner}/pipe")

    assert memory_manager(handle).run() == 0
    [failed] = handle.store.iter_markers(StateKind.FAILED)
    failure = handle.store.read_frame(failed).failure
    assert failure.code == "runner_unavailable"
    assert failure.message == (f"payload runner 'runner' cannot be copied: {runner}/pipe is not a regular file, "
                               "directory or symlink")
