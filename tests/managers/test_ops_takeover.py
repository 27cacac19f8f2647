"""Taking over a dead manager's attempts with real processes (spec 000 "Taking over another manager's attempt").

Manager 1 is SIGKILLed mid-run under a one-second lease; manager 2 recovers
what it left. A runner whose process is provably gone is relaunched; one that
already published its outcome is committed, never rerun; one still alive on
this host with a persistent workdir is adopted, never doubled. The evidence of
every takeover is in the job's state frames.
"""

from __future__ import annotations

import json
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

    live = [job for job in jobs if ops.kind(job) == "running" and ops.pid_alive(ops.frame(job).process.pid)]
    assert len(live) == 2, "both attempts should outlive their manager"
    killed, finishing = live
    # One attempt dies with its node; the other finishes and publishes with no manager to commit it.
    os.killpg(ops.frame(killed).process.pgid, signal.SIGKILL)
    for job in live:
        pid = ops.frame(job).process.pid
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
    first_id, process = ops.orphan(job)
    assert ops.pid_alive(process.pid)
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")

    second = ops.start("--idle", "--lease-seconds", "1", "--workers", "2")
    log = Path(ops.handle.layout.managers) / second.manager_id / "log"
    ops.wait_until(lambda: log.exists() and "process is alive" in log.read_text(), 30, "the adoption decision")
    time.sleep(1.0)  # several more passes over the running job
    frame = ops.frame(job)
    assert ops.kind(job) == "running"
    assert frame.process == process and frame.owner.manager_id == first_id and frame.total_attempts == 1
    assert counter.read_text().count("start") == 1
    assert len(list(Path(ops.handle.layout.job_attempts(job)).iterdir())) == 1

    (ops.workdir(job) / "go").touch()
    ops.wait_kind(job, "succeeded", timeout=30)
    frame = ops.frame(job)
    assert frame.total_attempts == 1 and frame.takeover.rule == "outcome_published"
    assert [line.split()[0] for line in counter.read_text().splitlines()] == ["start", "end"]
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0, second.stderr


# -- an until-idle manager stays for the work it will take over (issue 9) -----------------------------------


def _summary(manager) -> str:
    return next(line for line in manager.stdout.splitlines() if " idle: " in line)


def test_a_manager_started_right_after_a_sigkill_waits_for_the_isolated_takeover_and_finishes(ops, tmp_path):
    """The reported case: the owner SIGKILLed, its isolated attempt still sleeping, the next manager until idle.

    It must not exit "idle" with the job counted as running elsewhere: the takeover table will admit a
    relaunch once the heartbeat has been silent for 2 x 2 s, so it stays, relaunches the job in a fresh
    isolated workdir, and commits the new attempt.
    """
    counter, first_attempt = tmp_path / "counter", tmp_path / "first-attempt"
    job = ops.job(f"""echo "$HTTK_WORKFLOW_ATTEMPT_ID $HTTK_WORKFLOW_WORKDIR" >> "{counter}"
if [ ! -e "{first_attempt}" ]; then touch "{first_attempt}"; sleep 120; fi
publish '"action":"succeed"'""", workdir_mode="isolated")
    first = ops.start("--lease-seconds", "2")
    first_id = first.manager_id
    ops.wait_kind(job, "running")
    ops.wait_until(first_attempt.exists, 30, "the first attempt to start sleeping")
    process = ops.frame(job).process
    first.signal(signal.SIGKILL)
    first.wait(10)
    assert ops.pid_alive(process.pid), "the attempt outlives its manager"

    second = ops.start("--lease-seconds", "2")  # the default --takeover-grace-factor 2.0
    assert second.wait(60) == 0, second.stderr
    assert ops.kind(job) == "succeeded", second.stdout + second.stderr
    summary = _summary(second)
    assert "1 succeeded" in summary and "0 running elsewhere" in summary and "0 awaiting takeover" in summary

    frame = ops.frame(job)
    assert frame.total_attempts == 2
    evidence = _first_takeover(ops, job)["takeover"]
    assert evidence["rule"] == "heartbeat_silent" and evidence["previous_owner"] == first_id
    assert evidence["process_alive"] is True and evidence["heartbeat_age"] >= 4.0
    (attempt_1, workdir_1), (attempt_2, workdir_2) = (line.split() for line in counter.read_text().splitlines())
    assert attempt_1 != attempt_2 and workdir_1 != workdir_2
    attempts = Path(ops.handle.layout.job_attempts(job))
    assert all(Path(workdir).is_relative_to(attempts) for workdir in (workdir_1, workdir_2))
    # The abandoned attempt is fenced: the takeover made it fail, whatever it publishes later.
    failures = [entry["failure"] for entry in ops.log(job) if entry.get("event") == "commit_retry"]
    assert "taken over (heartbeat_silent)" in failures[0]["message"]


def test_a_live_persistent_attempt_keeps_the_next_manager_awake_until_it_publishes(ops, tmp_path):
    """Adopting is a takeover too: the until-idle manager watches the orphan and commits its outcome, once."""
    counter = tmp_path / "counter"
    job = ops.job(f"""echo "start $HTTK_WORKFLOW_ATTEMPT_ID" >> "{counter}"
touch started; wait_for go
publish '"action":"succeed"'""")
    first = ops.start("--lease-seconds", "2")
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    first.signal(signal.SIGKILL)
    first.wait(10)

    second = ops.start("--lease-seconds", "2")
    log = Path(ops.handle.layout.managers) / second.manager_id / "log"
    ops.wait_until(lambda: log.exists() and "adopting the attempt" in log.read_text(), 30, "the adoption")
    time.sleep(0.5)
    assert second.popen.poll() is None, "an adopted attempt keeps the manager awake"
    (ops.workdir(job) / "go").touch()
    assert second.wait(30) == 0, second.stderr
    assert ops.kind(job) == "succeeded"
    assert ops.frame(job).total_attempts == 1 and counter.read_text().count("start") == 1
    assert "0 running elsewhere" in _summary(second)


def test_a_cancellation_left_by_a_sigkilled_manager_keeps_the_next_one_awake_until_it_is_verified(ops):
    """Started while the dead owner's lease still runs, the next manager waits for it and finishes the cancel."""
    job = ops.job("trap '' TERM\ntouch started\nsleep 60\npublish '\"action\":\"succeed\"'")
    first = ops.start_script(workers=1, kill_grace=300.0, lease_seconds=2.0)
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    pgid = ops.frame(job).process.pgid
    ops.request(job, "cancel")
    ops.wait_kind(job, "cancelling")
    first.signal(signal.SIGKILL)
    first.wait(10)

    second = ops.start_script(workers=1, kill_grace=0.5, lease_seconds=2.0)
    assert second.wait(60) == 0, second.stderr
    assert ops.kind(job) == "cancelled", second.stdout + second.stderr
    assert ops.group_members(pgid) == []
    assert ops.log(job)[-1]["notes"]["cancellation"]["method"] == "sigkill"


def test_work_under_a_live_manager_is_running_elsewhere_and_keeps_nobody_waiting(ops):
    """The other side: a live owner renews its lease, so an until-idle manager leaves without waiting for it."""
    job = ops.job("touch started; wait_for go\npublish '\"action\":\"succeed\"'")
    owner = ops.start("--idle", "--lease-seconds", "30")
    ops.wait_kind(job, "running")
    started = time.monotonic()
    visitor = ops.run("--lease-seconds", "2", timeout=25)
    assert time.monotonic() - started < 25, "the visitor must not wait out the live owner's 30 s lease"
    summary = _summary(visitor)
    assert "1 running elsewhere" in summary and "0 awaiting takeover" in summary and "0 stranded" in summary
    assert ops.kind(job) == "running" and ops.frame(job).owner.manager_id == owner.manager_id

    why = json.loads(ops.httk("job", "why", str(ops.root), job, "--json").stdout)
    assert why["summary"] == f"running under the live lease of manager {owner.manager_id}"
    (ops.workdir(job) / "go").touch()
    ops.wait_kind(job, "succeeded", timeout=30)
    owner.signal(signal.SIGTERM)
    assert owner.wait(20) == 0, owner.stderr


def test_a_persistent_attempt_whose_runner_died_but_whose_group_lives_on_is_not_relaunched(ops, tmp_path):
    """The recorded process is gone, but a member of its process group still writes the persistent workdir.

    "Provably gone" means the whole group: relaunching beside the stray would give the shared
    directory a second writer. The next manager adopts until the group is gone, then relaunches.
    """
    ran_once, release = tmp_path / "ran-once", tmp_path / "release"
    job = ops.job(f"""if [ -e "{ran_once}" ]; then publish '"action":"succeed"'; exit 0; fi
touch "{ran_once}"
( while [ ! -e "{release}" ]; do echo stray >> stray.log; sleep 0.1; done ) &
touch started; wait_for go
exit 3""")
    first_id, process = ops.orphan(job)
    (ops.workdir(job) / "go").touch()
    ops.wait_until(lambda: not ops.pid_alive(process.pid), 10, "the runner itself to exit")
    assert ops.group_members(process.pgid), "the stray outlives the runner"
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")

    second = ops.start("--idle", "--lease-seconds", "1")
    log = Path(ops.handle.layout.managers) / second.manager_id / "log"
    ops.wait_until(lambda: log.exists() and "process is alive" in log.read_text(), 30, "the adoption decision")
    time.sleep(1.0)  # several more passes while the stray writes the workdir
    assert ops.kind(job) == "running" and ops.frame(job).total_attempts == 1, log.read_text()

    release.touch()
    ops.wait_kind(job, "succeeded", timeout=30)
    assert ops.group_members(process.pgid) == []
    assert _first_takeover(ops, job)["takeover"]["rule"] == "process_gone"
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0, second.stderr
