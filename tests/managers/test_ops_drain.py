"""Draining on SIGTERM/SIGINT (spec 000 "Run": the batch system's walltime signal).

The first signal stops claiming, terminates the running attempts and keeps
committing their outcomes for ``--drain-timeout`` seconds before exiting
successfully; a second signal exits at once. Whatever is left behind is
recovered from its expired lease by the next manager. An attempt the manager
terminated itself, verified gone without an outcome, is given back to ``ready``
uncharged (``drain_release``): the walltime kill is not the job's fault.
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
    pgid = ops.frame(job).process.pgid
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
    # The terminated attempt was given back, not failed: ready again, and not charged.
    assert ops.kind(job) == "ready"
    frame = ops.frame(job)
    assert frame.event == "drain_release" and frame.failure is None
    assert frame.owner is None and frame.process is None and frame.total_attempts == 0
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


#: One attempt only: the first sleeps into the walltime, a rerun succeeds at once.
ONE_ATTEMPT = {"maximum_attempts_per_activation": 1, "maximum_total_attempts": 1}


@pytest.mark.parametrize("workdir_mode", ["persistent", "isolated"])
def test_a_one_attempt_job_stopped_at_walltime_runs_again_uncharged(ops, workdir_mode):
    job = ops.job(LONG_THEN_SUCCEED.replace("count", "$HTTK_WORKFLOW_WORKSPACE_DIR/count"),
                  workdir_mode=workdir_mode, **ONE_ATTEMPT)
    first = ops.start("--drain-timeout", "20")
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.root / "count").exists(), 30, "the runner to start")
    pgid = ops.frame(job).process.pgid
    manager_id = first.manager_id

    first.signal(signal.SIGTERM)  # what Slurm sends at walltime
    assert first.wait(20) == 0, first.stderr
    assert ops.group_members(pgid) == []
    assert "runner_exit" not in first.stderr
    assert ops.kind(job) == "ready"
    frame = ops.frame(job)
    assert frame.event == "drain_release"
    assert (frame.attempt_ordinal, frame.total_attempts, frame.unclean_exits) == (0, 0, 1)
    shown = json.loads(ops.httk("job", "show", str(ops.root), job, "--json").stdout)
    assert shown["budgets"]["maximum_total_attempts"] == {"limit": 1, "used": 0, "remaining": 1, "exhausted": False}
    why = json.loads(ops.httk("job", "why", str(ops.root), job, "--json").stdout)
    drained = [line for line in why["lines"] if "drain" in line]
    assert drained and f"manager {manager_id}" in drained[0] and "signal 15" in drained[0], why
    assert "within budget" in " ".join(why["lines"])

    ops.run()
    assert ops.kind(job) == "succeeded"
    frame = ops.frame(job)
    assert (frame.attempt_ordinal, frame.total_attempts, frame.failure) == (1, 1, None)
    assert (ops.root / "count").read_text().strip() == "2"  # it really ran twice
    log = ops.log(job)
    events = [entry["event"] for entry in log]
    assert events.count("launch") == 2 and "drain_release" in events and "commit_succeed" in events
    release = next(entry for entry in log if entry["event"] == "drain_release")
    assert release["reason"].startswith(f"drained: manager {manager_id}")
    text = ops.httk("job", "log", str(ops.root), job).stdout
    assert "drain_release -> ready" in text and "drained: manager" in text
    # Every attempt kept its own control directory, in the order they ran.
    attempts = sorted(path.name for path in (Path(ops.handle.layout.attempts) / job).iterdir())
    assert [name[:4] for name in attempts] == ["0001", "0002"] and attempts[1].endswith(frame.attempt_id)


#: Publishes its outcome from its TERM trap, while the drain is committing.
PUBLISH_ON_TERM = """on_term() { publish '"action":"succeed"'; exit 0; }
trap on_term TERM
touch started; sleep 30 & wait"""


def test_an_outcome_published_during_the_drain_timeout_is_committed(ops):
    job = ops.job(PUBLISH_ON_TERM, **ONE_ATTEMPT)
    manager = ops.start("--drain-timeout", "20")
    _started(ops, job)
    manager.signal(signal.SIGTERM)
    assert manager.wait(20) == 0, manager.stderr
    # The runner's own answer is committed as it would be at any other time.
    assert ops.kind(job) == "succeeded"
    frame = ops.frame(job)
    assert frame.event == "commit_succeed" and frame.total_attempts == 1
    assert "drain_release" not in [entry["event"] for entry in ops.log(job)]
