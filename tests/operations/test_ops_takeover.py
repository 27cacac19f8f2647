"""Taking over a dead manager's attempts with real processes (spec 000 "Taking over another manager's attempt").

Manager 1 is SIGKILLed mid-run under a one-second lease; manager 2 recovers
what it left. A runner whose process is provably gone is relaunched; one that
already published its outcome is committed, never rerun; one still alive on
this host with a persistent workdir is adopted, never doubled. The evidence of
every takeover is in the job's state frames.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path


def _counting_runner(counter: Path, locks: Path, seconds: float) -> str:
    """Appends start/end lines to a shared counter; ``flock`` catches two live attempts of one job."""
    return f"""exec 9>>"{locks}/$HTTK_WORKFLOW_JOB_ID"
flock -n 9 || echo "$HTTK_WORKFLOW_JOB_ID concurrent $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
echo "$HTTK_WORKFLOW_JOB_ID start $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
sleep {seconds}
echo "$HTTK_WORKFLOW_JOB_ID end $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
publish '"action":"succeed"'"""


def _lines(counter: Path) -> list[tuple[str, str, str]]:
    if not counter.exists():
        return []
    return [tuple(line.split()) for line in counter.read_text().splitlines() if line]  # type: ignore[misc]


def _first_takeover(ops, job):
    frames = [entry for entry in ops.log(job) if entry.get("takeover")]
    assert frames, f"job {job} has no takeover frame"
    return frames[0]


def test_a_killed_manager_is_taken_over_without_losing_or_doubling_work(ops, tmp_path):
    counter, locks = tmp_path / "counter", tmp_path / "locks"
    locks.mkdir()
    jobs = [ops.job(_counting_runner(counter, locks, 1.5)) for _ in range(6)]
    first = ops.start("--workers", "2", "--lease-seconds", "1")
    first_id = first.manager_id

    def two_live_attempts():
        lines = _lines(counter)
        ended = {job for job, what, _ in lines if what == "end"}
        started = [job for job, what, _ in lines if what == "start" and job not in ended]
        return len(ended) >= 1 and len(started) == 2 and all(ops.kind(job) == "running" for job in started)

    ops.wait_until(two_live_attempts, 30, "one finished job and two live attempts")
    first.signal(signal.SIGKILL)
    first.wait(10)

    live = [job for job in jobs if ops.kind(job) == "running" and ops.pid_alive(ops.frame(job).process["pid"])]
    assert len(live) == 2, "both attempts should outlive their manager"
    killed, finishing = live
    # One attempt dies with its node; the other finishes and publishes with no manager to commit it.
    os.killpg(ops.frame(killed).process["pgid"], signal.SIGKILL)
    for job in live:
        pid = ops.frame(job).process["pid"]
        ops.wait_until(lambda pid=pid: not ops.pid_alive(pid), 10, "an orphaned attempt to end")
    assert ops.kind(killed) == ops.kind(finishing) == "running"
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")

    second = ops.start("--workers", "2", "--lease-seconds", "1")
    assert second.wait(60) == 0, second.stderr
    second_id = second.manager_id
    assert [ops.kind(job) for job in jobs] == ["succeeded"] * 6, second.stdout

    lines = _lines(counter)
    per_job: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for job, what, attempt in lines:
        per_job[job][what].append(attempt)
    assert not any(events["concurrent"] for events in per_job.values()), lines
    assert set(per_job) == set(jobs), "every job ran at least once"
    # Every job's work completed exactly once: nothing lost, nothing completed twice.
    assert all(len(per_job[job]["end"]) == 1 for job in jobs), lines

    # The killed attempt: started, never ended, relaunched as a new attempt by manager 2.
    assert len(per_job[killed]["start"]) == 2
    assert per_job[killed]["start"][0] not in per_job[killed]["end"]
    frame = _first_takeover(ops, killed)
    evidence = frame["takeover"]
    assert frame["event"] == "publish" and frame["kind"] == "committing"
    assert evidence["rule"] == "process_gone" and evidence["process_alive"] is False
    assert evidence["heartbeat_age"] > 1.0 and evidence["lease_seconds"] == 1.0
    assert evidence["previous_owner"] == first_id and evidence["by"] == second_id
    assert ops.frame(killed).total_attempts == 2
    assert ops.frame(killed).unclean_exits == 1

    # The attempt that finished under no manager is committed from its outcome, never rerun.
    assert per_job[finishing]["start"] == per_job[finishing]["end"]
    evidence = _first_takeover(ops, finishing)["takeover"]
    assert evidence["rule"] == "outcome_published" and evidence["previous_owner"] == first_id
    assert ops.frame(finishing).total_attempts == 1


def test_a_live_persistent_attempt_of_a_dead_manager_is_adopted_not_relaunched(ops, tmp_path):
    counter = tmp_path / "counter"
    job = ops.job(f"""echo "start $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
touch started; wait_for go
echo "end $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
publish '"action":"succeed"'""")
    first = ops.start("--lease-seconds", "1")
    first_id = first.manager_id
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    process = ops.frame(job).process
    first.signal(signal.SIGKILL)
    first.wait(10)
    assert ops.pid_alive(process["pid"])
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")

    second = ops.start("--idle", "--lease-seconds", "1", "--workers", "2")
    log = Path(ops.handle.layout.managers) / second.manager_id / "log"
    ops.wait_until(lambda: log.exists() and "process is alive" in log.read_text(), 30, "the adoption decision")
    time.sleep(1.0)  # several more passes over the running job
    frame = ops.frame(job)
    assert ops.kind(job) == "running"
    assert frame.process == process and frame.owner["manager_id"] == first_id and frame.total_attempts == 1
    assert counter.read_text().count("start") == 1
    assert len(list(Path(ops.handle.layout.job_attempts(job)).iterdir())) == 1

    (ops.workdir(job) / "go").touch()
    ops.wait_kind(job, "succeeded", timeout=30)
    frame = ops.frame(job)
    assert frame.total_attempts == 1 and frame.takeover["rule"] == "outcome_published"
    assert [line.split()[0] for line in counter.read_text().splitlines()] == ["start", "end"]
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0, second.stderr
