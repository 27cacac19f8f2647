"""Fenced, verified cancellation of a running attempt with real process groups (spec 000 "Cancelling a running job").

The manager renames ``running`` → ``cancelling`` first, then SIGTERMs the
attempt's process group, SIGKILLs it after the grace, and only a verified exit
makes the job ``cancelled``; the terminal frame records who asked, why, and how
the exit was verified. A manager killed mid-cancellation leaves ``cancelling``
and the next manager finishes the procedure.
"""

from __future__ import annotations

import signal
import time

TWO_SLEEPS = 'touch started\nsleep 30 & sleep 30\n' + 'publish \'"action":"succeed"\''
IGNORES_TERM = "trap '' TERM\ntouch started\nsleep 30\npublish '\"action\":\"succeed\"'"


def _running_group(ops, job):
    """Wait until the runner of ``job`` has started; its recorded process group."""
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    pgid = ops.frame(job).process.pgid
    assert ops.group_members(pgid), "the runner's process group is not alive"
    return pgid


def test_cancel_terminates_the_whole_group_and_records_the_evidence(ops):
    job = ops.job(TWO_SLEEPS)
    manager = ops.start("--workers", "1")
    pgid = _running_group(ops, job)
    ops.wait_until(lambda: len(ops.group_members(pgid)) >= 3, 10, "bash and both sleeps")

    ops.request(job, "cancel")
    assert manager.wait(30) == 0, manager.stderr
    assert ops.kind(job) == "cancelled"
    assert ops.group_members(pgid) == [], "a process of the cancelled attempt survived"

    log = ops.log(job)
    events = [entry["event"] for entry in log]
    assert events[-2:] == ["operator_cancel", "cancel_verified"]
    assert log[-2]["kind"] == "cancelling"
    terminal = log[-1]
    assert terminal["kind"] == "cancelled"
    assert terminal["operator"] == "me" and terminal["reason"] == "r" and terminal["request_id"]
    evidence = terminal["notes"]["cancellation"]
    assert evidence["method"] == "sigterm"
    assert str(pgid) in evidence["verified"] and "gone" in evidence["verified"]
    assert terminal["process"] is None and terminal["owner"] is None
    applied = ops.requests("applied")
    assert [request["action"] for request in applied] == ["cancel"]
    assert "0 failed, 1 cancelled" in manager.stdout.splitlines()[-1]


def test_a_runner_ignoring_sigterm_is_killed_after_the_grace(ops):
    job = ops.job(IGNORES_TERM)
    manager = ops.start_script(workers=1, kill_grace=0.5)
    pgid = _running_group(ops, job)

    started = time.monotonic()
    ops.request(job, "cancel")
    assert manager.wait(30) == 0, manager.stderr
    assert time.monotonic() - started < 15
    assert ops.kind(job) == "cancelled"
    assert ops.group_members(pgid) == []
    evidence = ops.log(job)[-1]["notes"]["cancellation"]
    assert evidence["method"] == "sigkill", evidence
    assert evidence["seconds"] >= 0.5
    assert "ignored SIGTERM" in manager.stderr


def test_a_second_manager_finishes_a_cancellation_its_dead_owner_left(ops):
    job = ops.job(IGNORES_TERM)
    # Manager 1 waits a long grace before SIGKILL, so it is killed while the job is still cancelling.
    first = ops.start_script(workers=1, kill_grace=300.0, lease_seconds=1.0)
    pgid = _running_group(ops, job)
    runner_pid = ops.frame(job).process.pid
    first_id = first.manager_id

    ops.request(job, "cancel")
    ops.wait_kind(job, "cancelling")
    time.sleep(0.3)  # the SIGTERM is sent right after the rename; the runner ignores it
    first.signal(signal.SIGKILL)
    first.wait(10)
    assert ops.kind(job) == "cancelling"
    assert ops.pid_alive(runner_pid), "the orphaned runner should outlive its manager"
    assert ops.frame(job).owner.manager_id == first_id

    # Manager 2 may act only once manager 1's heartbeat is older than its lease.
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.5, 10, "manager 1's lease to expire")
    second = ops.start_script(workers=1, kill_grace=0.5, lease_seconds=1.0)
    assert second.wait(30) == 0, second.stderr
    assert ops.kind(job) == "cancelled"
    assert ops.group_members(pgid) == []
    terminal = ops.log(job)[-1]
    assert terminal["event"] == "cancel_verified"
    assert terminal["operator"] == "me" and terminal["reason"] == "r"
    assert terminal["notes"]["cancellation"]["method"] == "sigkill"
