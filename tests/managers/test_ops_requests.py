"""Operator requests end to end: pause, continue, override_step, and the life of a request file.

Requests are published by ``httk workflow job request`` against the job's exact
current marker and applied by whichever manager serves the job's executor; a
request that can never apply is retired with its reason. Spec: 000 "Inspect and
control".
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from httk.workflow.domain.lifecycle import Event
from httk.workflow.engine.requests import PER_TICK
from httk.workflow.operations.requests import publish_request

SUCCEED = "publish '\"action\":\"succeed\"'"
STEPS = '"runner_steps":["main","other"]'
FAIL_MAIN = (
    'publish \'"action":"fail","failure":{"code":"bad_input","message":"m","details":{},"retryable":false},'
    + STEPS + "'"
)
STEPPED = f"""case "$HTTK_WORKFLOW_STEP" in
  main) {FAIL_MAIN} ;;
  other) echo other >> ran; publish '"action":"succeed",{STEPS}' ;;
  *) publish '"action":"fail","failure":{{"code":"unknown_step","message":"no such step","retryable":false}}' ;;
esac"""


def _summary(manager) -> str:
    lines = manager.stdout.splitlines()
    assert " idle: " in lines[-1], manager.stdout
    return lines[-1]


def _make_ready(ops, job):
    """A manager serving another pool registers the job without claiming it."""
    ops.run("--pool", "elsewhere")
    assert ops.kind(job) == "ready"


def _raw_request(ops, job, action, *, step=None, name=None):
    """A request published without the client's checks (an older client's, or one that raced the
    client's read): the manager must hold the line on its own. Returns its path in ready/."""
    marker = ops.marker(job)
    request_id = str(uuid.uuid4())
    document = {
        "format": "httk-workflow-request", "format_version": 1, "request_id": request_id, "action": action,
        "job_id": marker.job_id, "job_key": str(marker.key), "placement": marker.placement,
        "kind": marker.kind.value, "generation": marker.generation, "record_ref": marker.ref,
        "marker": marker.name, "executor": "path", "operator": "me", "reason": "r", "step": step,
        "force": False, "created_at": 0.0,
    }
    ready = Path(ops.handle.layout.requests) / "ready"
    ready.mkdir(parents=True, exist_ok=True)
    path = ready / (name or f"{request_id}.json")
    path.write_text(json.dumps(document))
    return path


def _requests_tree(ops):
    """Every name under requests/, for checking that a refusal wrote nothing."""
    root = Path(ops.handle.layout.requests)
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


# -- pause and continue -------------------------------------------------------------------------
@pytest.mark.parametrize("start", ["submitted", "ready"])
def test_pause_before_any_attempt_then_continue(ops, start):
    job = ops.job("echo run >> ran\n" + SUCCEED)
    if start == "ready":
        _make_ready(ops, job)
    assert ops.kind(job) == start
    ops.request(job, "pause")

    manager = ops.run()
    assert ops.kind(job) == "paused"
    assert not (ops.workdir(job) / "ran").exists()
    assert "1 paused" in _summary(manager)
    frame = ops.frame(job)
    assert frame.event == "operator_pause" and frame.operator == "me" and frame.reason == "r"

    ops.request(job, "continue")
    manager = ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "ran").read_text() == "run\n"
    assert "1 succeeded" in _summary(manager)
    events = [entry["event"] for entry in ops.log(job)]
    assert "operator_continue" in events and events[-1] == "commit_succeed"


DEFERRED = f"""case "$HTTK_WORKFLOW_STEP" in
  main) touch started; wait_for go; publish '"action":"advance","next_step":"second"' ;;
  second) echo second >> ran; {SUCCEED} ;;
esac"""


def _defer_pause(ops):
    """A running job, a pause requested under it, then its attempt advances; returns (job, owner)."""
    job = ops.job(DEFERRED)
    manager = ops.start()
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    ops.request(job, "pause")
    ops.wait_until(lambda: ops.frame(job).pause_requested, 30, "the deferred pause to be recorded")
    assert ops.kind(job) == "running" and ops.frame(job).event == "defer_pause"
    (ops.workdir(job) / "go").touch()
    assert manager.wait(30) == 0, manager.stderr
    return job, manager


def test_pause_of_a_running_job_is_deferred_until_the_attempt_advances(ops):
    job, manager = _defer_pause(ops)
    # The attempt advanced, and the recorded pause stopped the job before the next step.
    assert ops.kind(job) == "paused"
    frame = ops.frame(job)
    assert frame.event == "commit_pause" and frame.step == "second" and not frame.pause_requested
    assert frame.total_attempts == 1
    assert not (ops.workdir(job) / "ran").exists()
    assert "1 paused" in _summary(manager)

    ops.request(job, "continue")
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "ran").read_text() == "second\n"


COUNTING = """n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
if [ "$n" -eq 1 ]; then
  publish '"action":"fail","failure":{"code":"bad_input","message":"first","details":{},"retryable":false}'
else
  publish '"action":"succeed"'
fi"""


def test_continue_of_a_failed_job_within_the_budget_runs_it_again(ops):
    job = ops.job(COUNTING, maximum_total_attempts=2)
    ops.run()
    assert ops.kind(job) == "failed"
    assert ops.frame(job).failure.code == "bad_input"

    ops.request(job, "continue")
    _make_ready(ops, job)  # the request is applied by any manager serving the executor
    frame = ops.frame(job)
    assert frame.event == "operator_continue" and frame.failure is None and frame.attempt_ordinal == 0
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "count").read_text() == "2\n"
    assert ops.frame(job).total_attempts == 2


def test_continue_beyond_the_total_budget_is_refused_on_the_client_and_retired_by_the_manager(ops):
    job = ops.job(COUNTING, maximum_total_attempts=1)
    ops.run()
    assert ops.kind(job) == "failed"
    before = _requests_tree(ops)

    refused = ops.request(job, "continue", code=2)
    assert refused.stderr.startswith("error: cannot continue job ")
    assert "retry budget" in refused.stderr and "maximum_total_attempts" in refused.stderr
    assert _requests_tree(ops) == before

    # The manager applies the same rule to a request that did not pass through this client.
    _raw_request(ops, job, "continue")
    ops.run()
    assert ops.kind(job) == "failed"
    assert (ops.workdir(job) / "count").read_text() == "1\n"
    assert ops.requests("ready") == []
    [retired] = ops.requests("retired")
    assert retired["action"] == "continue" and retired["operator"] == "me"
    assert "retry budget" in retired["retired_reason"]
    assert "maximum_total_attempts" in retired["retired_reason"]


# -- override_step ------------------------------------------------------------------------------
def test_override_step_is_prevalidated_against_recorded_runner_steps(ops):
    job = ops.job(STEPPED)
    ops.run()
    assert ops.kind(job) == "failed"
    assert tuple(ops.frame(job).runner_steps) == ("main", "other")

    refused = ops.request(job, "override_step", "--step", "bogus", code=2)
    assert refused.stderr.startswith("error: ")
    assert "'bogus'" in refused.stderr and "main, other" in refused.stderr and "--force" in refused.stderr
    assert ops.requests("ready") == [] and ops.requests("tmp") == []

    # --force downgrades the refusal to a note; the runner, not the manager, then refuses the step.
    forced = ops.request(job, "override_step", "--step", "bogus", "--force")
    assert "note:" in forced.stderr and "--force" in forced.stderr
    [request] = ops.requests("ready")
    assert request["step"] == "bogus" and request["force"] is True
    ops.run()
    assert ops.kind(job) == "failed"
    frame = ops.frame(job)
    assert frame.step == "bogus" and frame.failure.code == "unknown_step"

    # A recorded step applies without any note: the failed job is ready at the new step.
    allowed = ops.request(job, "override_step", "--step", "other")
    assert "note:" not in allowed.stderr
    before = ops.frame(job).activation_ordinal
    _make_ready(ops, job)
    frame = ops.frame(job)
    assert frame.event == "operator_override_step" and frame.step == "other"
    assert frame.activation_ordinal == before + 1 and frame.failure is None
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "ran").read_text() == "other\n"


def test_override_step_before_the_first_attempt_is_allowed_with_a_note(ops):
    job = ops.job(STEPPED)
    _make_ready(ops, job)
    assert ops.frame(job).runner_steps is None

    allowed = ops.request(job, "override_step", "--step", "other")
    assert "note:" in allowed.stderr and "pre-validated" in allowed.stderr
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "ran").read_text() == "other\n"
    assert [request["action"] for request in ops.requests("applied")] == ["override_step"]


def test_override_step_beyond_the_total_budget_never_starts_an_attempt(ops):
    job = ops.job(STEPPED, maximum_total_attempts=1)
    ops.run()
    assert ops.kind(job) == "failed" and ops.frame(job).total_attempts == 1
    before = _requests_tree(ops)

    refused = ops.request(job, "override_step", "--step", "other", code=2)
    assert "override_step does not fit the retry budget" in refused.stderr
    assert "maximum_total_attempts exhausted: 1 of 1" in refused.stderr
    assert _requests_tree(ops) == before

    # A request that did not pass this client is retired by the manager with the same reason.
    _raw_request(ops, job, "override_step", step="other")
    ops.run()
    assert ops.kind(job) == "failed"
    assert not (ops.workdir(job) / "ran").exists()
    frame = ops.frame(job)
    assert frame.total_attempts == 1 and frame.step == "main"
    [retired] = ops.requests("retired")
    assert retired["action"] == "override_step"
    assert "override_step does not fit the retry budget: maximum_total_attempts exhausted: 1 of 1" in (
        retired["retired_reason"])
    assert ops.requests("applied") == []


def test_a_ready_job_over_its_total_budget_fails_at_the_claim_without_running(ops):
    job = ops.job("echo run >> ran\n" + SUCCEED, maximum_total_attempts=1)
    _make_ready(ops, job)
    # A ready job whose total budget is already spent (left by an older version, or edited by hand).
    marker = ops.marker(job)
    ops.handle.store.transition(marker, ops.frame(job), Event.FSCK_REPAIR, total_attempts=1)

    manager = ops.run()
    assert ops.kind(job) == "failed"
    assert not (ops.workdir(job) / "ran").exists()
    frame = ops.frame(job)
    assert frame.event == "launch_failed" and frame.total_attempts == 1
    assert frame.failure.code == "attempts_exhausted"
    assert "maximum_total_attempts exhausted: 1 of 1" in frame.failure.message
    assert "1 failed" in _summary(manager)


# -- requests that can never apply are refused on the client ----------------------------------
def _finished(ops, kind):
    if kind == "succeeded":
        job = ops.job(SUCCEED)
    elif kind == "failed":
        job = ops.job(FAIL_MAIN)
    else:
        job = ops.job(SUCCEED)
        ops.request(job, "cancel")
    ops.run()
    assert ops.kind(job) == kind
    return job


@pytest.mark.parametrize(
    ("kind", "action"),
    [("succeeded", "pause"), ("succeeded", "continue"), ("succeeded", "cancel"), ("succeeded", "override_step"),
     ("failed", "pause"), ("failed", "cancel"), ("cancelled", "pause"), ("cancelled", "continue")],
)
def test_a_request_that_cannot_apply_to_a_finished_job_is_refused_and_writes_nothing(ops, kind, action):
    job = _finished(ops, kind)
    before = _requests_tree(ops)
    extra = ("--step", "other") if action == "override_step" else ()
    refused = ops.request(job, action, *extra, code=2)
    assert refused.stderr.startswith(f"error: cannot {action} job ")
    assert f"a {kind} job is finished" in refused.stderr
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    assert _requests_tree(ops) == before


def test_override_step_needs_a_step_and_a_step_needs_override(ops):
    job = ops.job(SUCCEED)
    assert "--step" in ops.request(job, "override_step", code=2).stderr
    assert "--step" in ops.request(job, "pause", "--step", "x", code=2).stderr
    assert ops.requests("ready") == []


# -- the life of a request file -----------------------------------------------------------------
def test_a_request_against_an_older_generation_is_retired(ops):
    job = ops.job(SUCCEED)
    _make_ready(ops, job)
    # Two requests against the same ready generation: the first applies, the second finds the job moved on.
    first = ops.request(job, "pause", "--json")
    second = ops.request(job, "pause", "--json")
    assert '"generation":1' in first.stdout and '"generation":1' in second.stdout
    manager = ops.run()
    assert ops.kind(job) == "paused"
    assert [request["action"] for request in ops.requests("applied")] == ["pause"]
    [retired] = ops.requests("retired")
    assert retired["generation"] == 1
    assert "moved on from ready generation 1" in retired["retired_reason"]
    assert ops.requests("ready") == []
    assert "1 paused" in _summary(manager)
    log = (ops.root / ".httk-workflow" / "managers" / manager.manager_id / "log").read_text()
    assert f"request {retired['request_id']} retired: job moved on" in log


def test_a_delayed_request_cannot_touch_a_newer_state(ops):
    job = ops.job(SUCCEED)
    stale = ops.handle.store.read_job(ops.marker(job))  # what a slow client read: submitted generation 0
    ops.run()
    assert ops.kind(job) == "succeeded"
    generation = ops.marker(job).generation

    publish_request(ops.handle, stale, "pause", operator="me", reason="late")
    ops.run()
    assert ops.kind(job) == "succeeded" and ops.marker(job).generation == generation
    [retired] = ops.requests("retired")
    assert "moved on from submitted generation 0" in retired["retired_reason"]


def test_a_request_for_an_unserved_executor_stays_ready(ops):
    job = ops.job(SUCCEED, executor="slurm")
    ops.request(job, "pause")
    manager = ops.run()
    assert ops.kind(job) == "submitted"
    [request] = ops.requests("ready")
    assert request["executor"] == "slurm" and request["action"] == "pause"
    assert ops.requests("retired") == [] and ops.requests("applied") == []
    assert "1 need executor slurm" in _summary(manager)


def test_an_unreadable_request_is_quarantined(ops):
    ready = ops.root / ".httk-workflow" / "requests" / "ready"
    ready.mkdir(parents=True, exist_ok=True)
    (ready / "garbage.json").write_text("{not json")
    (ready / "alien.json").write_text('{"format":"something-else","kind":"ready","placement":"p","marker":"x"}\n')
    manager = ops.run()
    assert ops.requests("ready") == []
    quarantine = ready.parent / "quarantine"
    assert sorted(path.name for path in quarantine.iterdir()) == [
        "alien.json", "alien.json.audit.json", "garbage.json", "garbage.json.audit.json"]
    assert (quarantine / "garbage.json").read_text() == "{not json"  # kept as it was published
    audits = {name: json.loads((quarantine / f"{name}.audit.json").read_text())
              for name in ("garbage.json", "alien.json")}
    assert "unreadable request" in audits["garbage.json"]["quarantine_reason"]
    assert "httk-workflow-request" in audits["alien.json"]["quarantine_reason"]
    assert manager.stderr.count("quarantine") == 2  # a warning each, on the console


def test_a_request_claimed_by_a_dead_manager_returns_to_ready_and_applies(ops):
    job = ops.job(SUCCEED)
    _make_ready(ops, job)
    document = json.loads(ops.request(job, "pause", "--json").stdout)
    requests = ops.root / ".httk-workflow" / "requests"
    dead = requests / "claimed" / "m-000000000000"
    dead.mkdir(parents=True)
    name = f"{document['request_id']}.json"
    (requests / "ready" / name).rename(dead / name)

    manager = ops.run()
    assert ops.kind(job) == "paused"
    assert [request["request_id"] for request in ops.requests("applied")] == [document["request_id"]]
    assert not (dead / name).exists()
    log = (ops.root / ".httk-workflow" / "managers" / manager.manager_id / "log").read_text()
    assert "returned to ready from stale manager m-000000000000" in log


# -- requests are never stranded ----------------------------------------------------------------
def _rename_ready(ops, document, name):
    ready = Path(ops.handle.layout.requests) / "ready"
    (ready / f"{document['request_id']}.json").rename(ready / name)


def _paused(ops):
    """A paused job that has not run yet, and views of its submitted state for stale requests."""
    job = ops.job("echo run >> ran\n" + SUCCEED)
    stale = ops.handle.store.read_job(ops.marker(job))  # submitted generation 0
    ops.request(job, "pause")
    ops.run()
    assert ops.kind(job) == "paused"
    return job, stale


def test_a_continue_behind_more_than_one_tick_of_retired_requests_is_applied(ops):
    job, stale = _paused(ops)
    # More stale requests than one tick examines, all sorting before the continue.
    for number in range(PER_TICK + 6):
        _rename_ready(ops, publish_request(ops.handle, stale, "pause", operator="me", reason="late"),
                      f"00-stale-{number:03d}.json")
    _rename_ready(ops, json.loads(ops.request(job, "continue", "--json").stdout), "zz-valid.json")

    manager = ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "ran").read_text() == "run\n"
    assert ops.requests("ready") == []
    assert len(ops.requests("retired")) == PER_TICK + 6
    assert [request["action"] for request in ops.requests("applied")] == ["pause", "continue"]
    assert "1 succeeded" in _summary(manager)


def test_requests_for_an_unserved_executor_do_not_starve_the_others(ops):
    unserved = ops.job(SUCCEED, executor="slurm")
    job, _stale = _paused(ops)
    document = json.loads(ops.request(unserved, "pause", "--json").stdout)
    ready = Path(ops.handle.layout.requests) / "ready"
    first = ready / f"{document['request_id']}.json"
    for number in range(PER_TICK + 6):
        (ready / f"00-slurm-{number:03d}.json").write_bytes(first.read_bytes())
    first.unlink()
    _rename_ready(ops, json.loads(ops.request(job, "continue", "--json").stdout), "zz-valid.json")

    manager = ops.run()  # exits idle: requests nobody here can serve do not keep it awake
    assert ops.kind(job) == "succeeded" and ops.kind(unserved) == "submitted"
    assert len(ops.requests("ready")) == PER_TICK + 6
    assert [request["job_id"] for request in ops.requests("applied")] == [job, job]
    assert ops.requests("retired") == []
    assert "1 succeeded" in _summary(manager)


def test_entries_that_are_not_request_documents_are_quarantined_unread_and_never_block(ops, tmp_path):
    job = ops.job(SUCCEED)
    _make_ready(ops, job)
    ready = Path(ops.handle.layout.requests) / "ready"
    ready.mkdir(parents=True, exist_ok=True)
    (ready / "notes.txt").write_text("not a request")
    (ready / "dir.json").mkdir()
    (ready / "dir.json" / "inside").write_text("kept")
    os.mkfifo(ready / "fifo.json")
    # A link to a valid request elsewhere is never followed (it would pause the job).
    outside = _raw_request(ops, job, "pause", name="outside.json").rename(tmp_path / "outside.json")
    (ready / "link.json").symlink_to(outside)
    _raw_request(ops, job, "pause", name="zz-valid.json")
    # Diagnosis reads pending requests the same safe way: no hang on the FIFO, no crash on the directory.
    why = ops.httk("job", "why", str(ops.root), job, timeout=20)
    assert why.stdout.count("pending request: pause by me") == 1

    manager = ops.run(timeout=30)
    assert ops.kind(job) == "paused"
    assert sorted(path.name for path in ready.iterdir()) == []
    quarantine = ready.parent / "quarantine"
    assert (quarantine / "dir.json" / "inside").read_text() == "kept"
    assert (quarantine / "fifo.json").is_fifo()
    assert (quarantine / "link.json").is_symlink() and os.readlink(quarantine / "link.json") == str(outside)
    assert (quarantine / "notes.txt").read_text() == "not a request"
    for name in ("dir.json", "fifo.json", "link.json", "notes.txt"):
        audit = json.loads((quarantine / f"{name}.audit.json").read_text())
        assert audit["entry"] == name and "not a request document" in audit["quarantine_reason"]
        assert audit["quarantine_by"] == manager.manager_id
    assert "1 paused" in _summary(manager)
    assert manager.stderr.count("quarantined") == 4  # a warning each, on the console
