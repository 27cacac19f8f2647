"""A published outcome of a dead manager's attempt is committed only once its process group is gone.

Spec 000 "Taking over another manager's attempt": a takeover may give the job a
next attempt, and in a persistent workdir that attempt must not share the
directory with a survivor of the last one ("cancelled asserts that nothing is
still writing the workdir"; a manager's own reap kills the strays of its exited
runners for the same reason). Real processes: the runner publishes, leaves a
child in its process group writing the workdir, and exits; its manager was
SIGKILLed before, so the next manager takes the attempt over.
"""

from __future__ import annotations

from pathlib import Path

#: Step ``main`` leaves a stray in its group that stamps the workdir, publishes ``advance``, and exits;
#: step ``second`` records when it starts. TRAP is replaced by the stray's signal disposition.
RUNNER = """if [ "$HTTK_WORKFLOW_STEP" = second ]; then
  echo "second $(date +%s.%N)" >> "{counter}"
  publish '"action":"succeed"'; exit 0
fi
touch started; wait_for go
( TRAP while true; do date +%s.%N >> stray.log; sleep 0.05; done ) &
echo $! > stray.pid
wait_for stray.log
publish '"action":"advance","next_step":"second"'
exit 0"""


def _orphan_published_with_a_stray(ops, tmp_path: Path, trap: str) -> tuple[str, dict, Path]:
    counter = tmp_path / "counter"
    job = ops.job(RUNNER.format(counter=counter).replace("TRAP", trap))
    first_id, process = ops.orphan(job)
    (ops.workdir(job) / "go").touch()
    ops.wait_until(lambda: not ops.pid_alive(process.pid), 10, "the runner to publish and exit")
    stray = int((ops.workdir(job) / "stray.pid").read_text())
    assert stray in ops.group_members(process.pgid), "the stray outlives the runner"
    assert ops.kind(job) == "running"
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")
    return job, process, counter


def _last_stamp(workdir: Path) -> float:
    return float((workdir / "stray.log").read_text().split()[-1])


def test_a_published_outcome_is_committed_after_its_stray_is_stopped_and_the_job_advances_once(ops, tmp_path):
    job, process, counter = _orphan_published_with_a_stray(ops, tmp_path, trap="")

    second = ops.run("--lease-seconds", "1")
    assert ops.kind(job) == "succeeded", second.stdout + second.stderr
    assert ops.group_members(process.pgid) == [], "the stray was stopped"
    log = ops.log(job)
    commit = next(entry for entry in log if entry.get("takeover"))
    evidence = commit["takeover"]
    # The frame records the verdict that admitted the takeover, then how the group was stopped.
    assert commit["event"] == "publish" and evidence["rule"] == "outcome_published_stop"
    assert evidence["process_alive"] is True
    assert evidence["stopped_group"]["pgid"] == process.pgid
    assert evidence["stopped_group"]["method"] == "sigterm"
    # The stray wrote nothing after the commit began, and the next step ran once, after it was gone.
    assert _last_stamp(ops.workdir(job)) < commit["created_at"]
    [(word, started)] = [line.split() for line in counter.read_text().splitlines()]
    assert word == "second" and float(started) > _last_stamp(ops.workdir(job))
    assert ops.frame(job).total_attempts == 2
    assert [entry["event"] for entry in log].count("commit_advance") == 1, [entry["event"] for entry in log]


def test_a_stray_that_ignores_sigterm_is_killed_after_the_grace_before_the_commit(ops, tmp_path):
    job, process, counter = _orphan_published_with_a_stray(ops, tmp_path, trap="trap '' TERM;")

    second = ops.start_script(workers=1, kill_grace=0.5, lease_seconds=1.0)
    assert second.wait(60) == 0, second.stderr
    assert ops.kind(job) == "succeeded", second.stdout + second.stderr
    assert ops.group_members(process.pgid) == []
    commit = next(entry for entry in ops.log(job) if entry.get("takeover"))
    assert commit["takeover"]["stopped_group"]["method"] == "sigkill"
    assert _last_stamp(ops.workdir(job)) < commit["created_at"]
    assert len(counter.read_text().splitlines()) == 1
