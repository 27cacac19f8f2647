"""Draining on SIGTERM/SIGINT (spec 000 "Run": the batch system's walltime signal).

The first signal stops claiming, terminates the running attempts and keeps
committing their outcomes for ``--drain-timeout`` seconds before exiting
successfully; a second signal exits at once. Whatever is left behind is
recovered from its expired lease by the next manager.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

#: First attempt: a long sleep (terminated by the drain); any later attempt succeeds at once.
LONG_THEN_SUCCEED = """n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
if [ "$n" -eq 1 ]; then touch started; sleep 30; fi
publish '"action":"succeed"'"""
#: Same, but the first attempt ignores SIGTERM (as do the sleeps it starts).
STUBBORN_THEN_SUCCEED = """n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
if [ "$n" -eq 1 ]; then trap '' TERM; touch started; sleep 30; fi
publish '"action":"succeed"'"""


def _started(ops, job):
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    pgid = ops.frame(job).process["pgid"]
    assert ops.group_members(pgid)
    return pgid


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_drains_terminates_the_attempt_and_exits_zero(ops, signum):
    job = ops.job(LONG_THEN_SUCCEED, priority=1)
    # Claimed after the first one ends: a draining manager claims nothing new, so it stays unclaimed.
    other = ops.job("publish '\"action\":\"succeed\"'")
    manager = ops.start("--workers", "1", "--drain-timeout", "20")
    pgid = _started(ops, job)

    started = time.monotonic()
    manager.signal(signum)
    assert manager.wait(20) == 0, manager.stderr
    assert time.monotonic() - started < 10
    assert ops.group_members(pgid) == []
    # The terminated attempt was committed: retryable runner_exit, so the job is ready again.
    assert ops.kind(job) == "ready"
    frame = ops.frame(job)
    assert frame.event == "commit_retry" and frame.failure["code"] == "runner_exit"
    assert frame.owner is None and frame.process is None
    assert ops.kind(other) == "ready" and ops.frame(other).total_attempts == 0
    assert "draining" in manager.stderr
    lines = manager.stdout.splitlines()
    assert len(lines) == 2 and " idle: " in lines[1]
    beat = json.loads((Path(ops.handle.layout.managers) / manager.manager_id / "heartbeat.json").read_text())
    assert beat["stopped"] is True

    ops.run()
    assert ops.kind(job) == "succeeded" and ops.kind(other) == "succeeded"


def test_drain_timeout_exits_zero_leaving_a_stubborn_attempt_to_lease_recovery(ops):
    job = ops.job(STUBBORN_THEN_SUCCEED)
    manager = ops.start("--drain-timeout", "1")
    pgid = _started(ops, job)

    started = time.monotonic()
    manager.signal(signal.SIGTERM)
    assert manager.wait(20) == 0, manager.stderr
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 10, elapsed
    # The manager left the attempt as it was: still running, its process alive, its job still `running`.
    assert ops.group_members(pgid)
    assert ops.kind(job) == "running"
    assert "drain complete" in (Path(ops.handle.layout.managers) / manager.manager_id / "log").read_text()
    assert " idle: " in manager.stdout.splitlines()[-1]


def test_an_attempt_left_by_a_drained_manager_is_recovered_by_the_next(ops):
    job = ops.job(STUBBORN_THEN_SUCCEED)
    first = ops.start("--drain-timeout", "0.5", "--lease-seconds", "1")
    pgid = _started(ops, job)
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0, first.stderr
    assert ops.kind(job) == "running"
    # The attempt's process then dies (say, the batch system kills the allocation).
    os.killpg(pgid, signal.SIGKILL)
    ops.wait_until(lambda: not ops.group_members(pgid), 10, "the orphaned attempt to die")

    second = ops.start("--lease-seconds", "1")
    status = second.wait(60)
    assert status == 0, second.stderr
    assert ops.kind(job) == "succeeded"
    takeovers = [entry["takeover"] for entry in ops.log(job) if entry.get("takeover")]
    assert takeovers and takeovers[0]["rule"] == "process_gone"


def test_a_second_signal_exits_at_once(ops):
    job = ops.job(STUBBORN_THEN_SUCCEED)
    manager = ops.start("--drain-timeout", "60")
    pgid = _started(ops, job)

    manager.signal(signal.SIGTERM)
    ops.wait_until(lambda: "draining" in manager.stderr, 10, "the drain to begin")
    started = time.monotonic()
    manager.signal(signal.SIGTERM)
    status = manager.wait(10)
    assert time.monotonic() - started < 5
    # What a second signal does today: SystemExit(130) from the handler, no summary line, nothing committed.
    assert status == 130, (status, manager.stderr)
    assert "second signal" in manager.stderr
    assert len(manager.stdout.splitlines()) == 1  # the banner only
    assert ops.kind(job) == "running"
    assert ops.group_members(pgid), "the stubborn attempt is left to lease recovery"
