"""Every ending of an attempt, through real attempts: outcomes, retries, crashes and runner problems.

Spec 001 "What an attempt publishes" and the ``Runner.main`` ending table;
spec 002 rows Runner.main (no_outcome, unknown_step), Attempt (error.json),
Attempt.published, Attempt.advance/succeed/fail/retry/pause, and "Every ending
is an outcome"; docs/workflow_filesystem_api.md "The outcome".
"""

from __future__ import annotations

import json
import shutil

import pytest


def outcome_of(control) -> dict:
    return json.loads((control / "outcome.ready" / "outcome.json").read_text(encoding="utf-8"))


ALWAYS_RETRY = """
run = Runner("e2e")


@run.step
def main(a):
    a.retry(f"attempt {a.context.attempt_ordinal} wants another")
"""


def test_retry_until_the_attempt_budget_then_attempts_exhausted(harness) -> None:
    ref = harness.publish(ALWAYS_RETRY)
    job = harness.submit(ref, maximum_attempts_per_activation=3)
    show = harness.finish(job, "failed")
    assert show["failure"]["code"] == "attempts_exhausted"
    assert "maximum_attempts_per_activation" in show["failure"]["message"]
    assert show["total_attempts"] == 3 and show["attempt_ordinal"] == 3
    controls = harness.attempts(job)
    assert [control.name[:4] for control in controls] == ["0001", "0002", "0003"]
    assert [outcome_of(control)["reason"] for control in controls] == [
        "attempt 1 wants another",
        "attempt 2 wants another",
        "attempt 3 wants another",
    ]
    assert harness.events(job).count("commit_retry") == 2 and harness.events(job)[-1] == "commit_fail"


FLAKY = """
run = Runner("e2e")


@run.step
def main(a):
    failures = a.input("failures")
    if a.context.attempt_ordinal <= failures:
        a.fail(a.input("code"), "flaky", details={"attempt": a.context.attempt_ordinal},
               retryable=a.input("retryable"))
    else:
        save(a, {"restart": dict(a.context.restart)})
        a.succeed()
"""


def test_a_retryable_failure_is_retried_and_can_succeed(harness) -> None:
    ref = harness.publish(FLAKY)
    job = harness.submit(ref, inputs={"failures": 1, "code": "flaky", "retryable": True})
    show = harness.finish(job, "succeeded")
    assert show["total_attempts"] == 2 and show["failure"] is None
    first = outcome_of(harness.attempts(job)[0])
    assert first["action"] == "fail"
    assert first["failure"] == {"code": "flaky", "message": "flaky", "details": {"attempt": 1}, "retryable": True}
    restart = harness.report(job)["restart"]
    assert restart["unclean"] is False and restart["last_failure"]["code"] == "flaky"


def test_a_retryable_failure_keeps_its_code_when_the_budget_runs_out(harness) -> None:
    ref = harness.publish(FLAKY)
    job = harness.submit(
        ref, inputs={"failures": 9, "code": "flaky", "retryable": True}, maximum_attempts_per_activation=2
    )
    assert harness.run() == 0
    show = harness.show(job)
    assert show["kind"] == "failed" and show["total_attempts"] == 2
    assert show["failure"]["code"] == "flaky" and show["failure"]["details"]["attempt"] == 2
    assert "maximum_attempts_per_activation" in show["failure"]["details"]["budget"]


@pytest.mark.parametrize(("code", "attempts", "kind"), [("node_failure", 2, "succeeded"), ("bad_input", 1, "failed")])
def test_retry_on_lists_the_codes_that_are_retried(harness, code: str, attempts: int, kind: str) -> None:
    ref = harness.publish(FLAKY)
    job = harness.submit(
        ref, inputs={"failures": 1, "code": code, "retryable": False}, retry_on=("node_failure",)
    )
    assert harness.run() == 0
    show = harness.show(job)
    assert show["kind"] == kind and show["total_attempts"] == attempts, harness.describe(job)
    if kind == "failed":
        assert show["failure"]["code"] == "bad_input" and show["failure"]["retryable"] is False


def test_maximum_activations_bounds_advances(harness) -> None:
    ref = harness.publish(
        """
        run = Runner("e2e")


        @run.step
        def main(a):
            a.state["activations"] = a.state.get("activations", 0) + 1
            a.advance("main")
        """
    )
    job = harness.submit(ref, maximum_activations=3)
    assert harness.run() == 0
    show = harness.show(job)
    assert show["kind"] == "failed" and show["failure"]["code"] == "activations_exhausted"
    assert harness.state(job) == {"activations": 3}


SIGKILL_FIRST = """
import signal

run = Runner("e2e")


@run.step
def main(a):
    if a.context.attempt_ordinal == 1:
        a.state["killed_attempt"] = a.context.attempt_id
        a.spawn(ChildSpec(step="main"), label="never-created")
        os.kill(os.getpid(), signal.SIGKILL)
    save(a, {"restart": dict(a.context.restart), "attempt": a.context.attempt_ordinal})
    a.succeed()
"""


def test_a_runner_killed_mid_attempt_is_retried_and_succeeds(harness) -> None:
    ref = harness.publish(SIGKILL_FIRST)
    job = harness.submit(ref)
    show = harness.finish(job, "succeeded")
    assert show["total_attempts"] == 2 and show["unclean_exits"] == 1
    first, second = harness.attempts(job)
    assert not (first / "outcome.ready").exists() and not (first / "error.json").exists()
    log = harness.log(job)
    failed_commit = [entry for entry in log if entry.get("event") == "commit_retry"]
    assert failed_commit[0]["failure"]["code"] == "runner_exit"
    assert "killed by signal 9" in failed_commit[0]["failure"]["message"]
    report = harness.report(job)
    assert report["attempt"] == 2
    assert report["restart"]["unclean"] is True
    assert report["restart"]["last_failure"]["code"] == "runner_exit"
    assert len(harness.jobs()) == 1  # the child spawned into the killed attempt's draft was never created


def test_restart_evidence_names_the_previous_attempt(harness) -> None:
    ref = harness.publish(SIGKILL_FIRST)
    job = harness.submit(ref)
    assert harness.run() == 0
    assert harness.report(job)["restart"]["previous_attempt_id"] == harness.state(job)["killed_attempt"]


PUBLISH_TWICE = """
run = Runner("e2e")


@run.step
def main(a):
    (a.workdir / "x.txt").write_text("x", encoding="utf-8")
    a.succeed()
    refusals = {"published": a.published}
    for name, call in [
        ("fail", lambda: a.fail("second", "a second outcome")),
        ("advance", lambda: a.advance("main")),
        ("retry", lambda: a.retry("again")),
        ("pause", lambda: a.pause("stop")),
        ("spawn", lambda: a.spawn(ChildSpec(step="main"), label="late")),
    ]:
        try:
            call()
            refusals[name] = None
        except RuntimeError as error:
            refusals[name] = str(error)
    save(a, refusals)
    if a.input("reraise"):
        a.fail("second", "this one escapes the handler")
"""


@pytest.mark.parametrize("reraise", [False, True], ids=["caught", "escapes"])
def test_a_second_outcome_is_refused_and_the_first_is_committed(harness, reraise: bool) -> None:
    ref = harness.publish(PUBLISH_TWICE)
    job = harness.submit(ref, inputs={"reraise": reraise})
    show = harness.finish(job, "succeeded")
    assert show["total_attempts"] == 1
    [control] = harness.attempts(job)
    assert outcome_of(control)["action"] == "succeed"
    report = harness.report(job)
    assert report["published"] is True
    for name in ("fail", "advance", "retry", "pause", "spawn"):
        assert "already published its outcome" in report[name], name
    assert (control / "error.json").exists() is reraise
    if reraise:
        error = json.loads((control / "error.json").read_text(encoding="utf-8"))
        assert error["exception"] == "RuntimeError"
    assert len(harness.jobs()) == 1
    assert not [path for path in control.iterdir() if path.name.startswith("outcome.tmp.")]


RAISE_AFTER_SPAWN = """
run = Runner("e2e")


@run.step
def main(a):
    a.spawn(ChildSpec(step="main"), label="first")
    a.spawn(ChildSpec(step="main"), label="second")
    a.state["spawned"] = True
    raise ValueError("the step broke after spawning")
"""


def test_a_raising_step_spawns_nothing_and_leaves_error_json(harness) -> None:
    ref = harness.publish(RAISE_AFTER_SPAWN)
    job = harness.submit(ref, maximum_attempts_per_activation=1, placement="proj/raise")
    show = harness.finish(job, "failed")
    failure = show["failure"]
    assert failure["code"] == "runner_error" and failure["retryable"] is True
    assert "ValueError" in failure["message"] and "the step broke after spawning" in failure["message"]
    assert failure["details"]["step"] == "main" and failure["details"]["exception"] == "ValueError"
    assert failure["details"]["returncode"] != 0
    [control] = harness.attempts(job)
    error = json.loads((control / "error.json").read_text(encoding="utf-8"))
    assert error["format"] == "httk-workflow-runner-error" and error["format_version"] == 1
    assert error["step"] == "main" and error["exception"] == "ValueError"
    assert error["message"] == "the step broke after spawning"
    assert "Traceback" in error["traceback"] and "raise ValueError" in error["traceback"]
    # the draft was discarded: no outcome, no child payload, no child job anywhere in the workspace
    assert not (control / "outcome.ready").exists()
    assert [path.name for path in control.iterdir() if path.name.startswith("outcome")] == []
    assert [entry["job_id"] for entry in harness.jobs()] == [job.job_id]
    assert sorted(path.name for path in (harness.root / "proj" / "raise").iterdir()) == [str(job.key)]
    assert not (harness.root / ".httk-workflow" / "joins").exists() or not any(
        (harness.root / ".httk-workflow" / "joins").iterdir()
    )
    assert harness.state(job) == {"spawned": True}  # state is not part of the draft


def test_a_raising_step_is_retried_within_the_budget(harness) -> None:
    ref = harness.publish(RAISE_AFTER_SPAWN)
    job = harness.submit(ref, maximum_attempts_per_activation=2)
    assert harness.run() == 0
    show = harness.show(job)
    assert show["kind"] == "failed" and show["total_attempts"] == 2 and show["unclean_exits"] == 2
    assert show["failure"]["code"] == "runner_error"
    assert all((control / "error.json").exists() for control in harness.attempts(job))
    assert len(harness.jobs()) == 1


NO_OUTCOME = """
run = Runner("e2e")


@run.step
def main(a):
    a.spawn(ChildSpec(step="main"), label="forgotten")
"""


def test_a_step_that_returns_without_publishing_fails_no_outcome(harness) -> None:
    ref = harness.publish(NO_OUTCOME)
    job = harness.submit(ref)
    show = harness.finish(job, "failed")
    assert show["failure"]["code"] == "no_outcome" and "'main' returned without publishing" in show["failure"][
        "message"
    ]
    assert show["total_attempts"] == 1  # not retryable
    [control] = harness.attempts(job)
    assert not (control / "outcome.ready" / "children").exists()
    assert len(harness.jobs()) == 1


RAW_UNKNOWN_STEP = """
run = Runner("e2e")


@run.step
def main(a):
    # Bypass a.advance (which would refuse the name) and publish a raw outcome naming an unknown step.
    publish_raw(a, action="advance", next_step="nope", priority=None, runner_steps=["main"])
"""


def test_an_unknown_step_is_reported_by_the_sdk_on_the_next_attempt(harness) -> None:
    ref = harness.publish(RAW_UNKNOWN_STEP)
    job = harness.submit(ref)
    show = harness.finish(job, "failed")
    assert show["step"] == "nope"
    assert show["failure"]["code"] == "unknown_step"
    assert "'nope' is not implemented" in show["failure"]["message"]
    assert "registered steps: main" in show["failure"]["message"]
    first, second = harness.attempts(job)
    assert outcome_of(first)["next_step"] == "nope"
    assert outcome_of(second)["action"] == "fail" and outcome_of(second)["step"] == "nope"
    assert harness.events(job)[-3:] == ["launch", "publish", "commit_fail"]


def test_pause_stops_the_job_with_its_reason(harness) -> None:
    ref = harness.publish(
        """
        run = Runner("e2e")


        @run.step
        def main(a):
            a.pause("waiting for an operator to check the structure")
        """
    )
    job = harness.submit(ref)
    show = harness.finish(job, "paused")
    assert show["reason"] == "waiting for an operator to check the structure"
    assert outcome_of(harness.attempts(job)[0])["action"] == "pause"


def test_advance_priority_changes_the_job_priority(harness) -> None:
    ref = harness.publish(
        """
        run = Runner("e2e")


        @run.step
        def main(a):
            a.advance("second", priority=9)


        @run.step
        def second(a):
            a.succeed()
        """
    )
    job = harness.submit(ref)
    assert harness.run() == 0
    show = harness.show(job)
    assert show["kind"] == "succeeded" and show["priority"] == 9


RUNNER = """
run = Runner("e2e")


@run.step
def main(a):
    a.succeed()
"""


def test_a_tampered_runner_object_fails_runner_mismatch(harness) -> None:
    ref = harness.publish(RUNNER)
    job = harness.submit(ref)  # submission refuses a tampered object: tamper after it
    stored = harness.root / ".httk-workflow" / "runners" / "objects" / ref["sha256"]
    [runner_file] = list(stored.iterdir())
    runner_file.chmod(0o644)
    runner_file.write_text(runner_file.read_text(encoding="utf-8") + "# tampered\n", encoding="utf-8")
    show = harness.finish(job, "failed")
    assert show["failure"]["code"] == "runner_mismatch"
    assert show["failure"]["details"]["expected"] == ref["sha256"]
    assert show["failure"]["details"]["actual"] != ref["sha256"]
    assert harness.events(job)[-1] == "launch_failed"
    [control] = harness.attempts(job)
    assert not (control / "stdout.log").exists()  # the runner never ran


def test_a_missing_runner_fails_runner_unavailable(harness) -> None:
    ref = harness.publish(RUNNER)
    missing = harness.submit(ref)  # submission refuses a missing runner: remove it after
    shutil.rmtree(harness.root / ".httk-workflow" / "runners" / "objects" / ref["sha256"])
    # Submission refuses a payload lacking its runner too: submit it with one, then remove the copy's.
    payload_runner = harness.submit({"source": "payload", "path": "bin/run.py", "sha256": None},
                                    files={"bin/run.py": RUNNER})
    shutil.rmtree(harness.root / payload_runner.placement / str(payload_runner.key) / "bin")
    installed = harness.submit({"source": "installed", "path": "run.py", "sha256": ref["sha256"]})
    assert harness.run() == 0
    for job in (missing, payload_runner, installed):
        show = harness.show(job)
        assert show["kind"] == "failed", harness.describe(job)
        assert show["failure"]["code"] == "runner_unavailable"
        assert harness.events(job)[-1] == "launch_failed"
    assert "--runner-search-path" in harness.show(installed)["failure"]["message"]


MALFORMED_FAILURE = """
run = Runner("e2e")


@run.step
def main(a):
    publish_raw(a, action="fail", failure={"message": "a failure without a code"})
"""

SILENT_EXIT = """
import sys

sys.exit(0)  # a program that never binds its attempt and publishes nothing
"""


@pytest.mark.parametrize(
    ("body", "message"),
    [(MALFORMED_FAILURE, "malformed outcome"), (SILENT_EXIT, "exited 0 without publishing an outcome")],
    ids=["malformed-failure", "exit-0-without-outcome"],
)
def test_protocol_errors_fail_the_job_without_retrying(harness, body: str, message: str) -> None:
    ref = harness.publish(body, sdk_main="Runner(" in body)
    job = harness.submit(ref)
    show = harness.finish(job, "failed")
    assert show["failure"]["code"] == "protocol_error" and message in show["failure"]["message"]
    assert show["total_attempts"] == 1
