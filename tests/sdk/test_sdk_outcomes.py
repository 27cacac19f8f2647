"""Runner registration, dispatch, and the exact outcome every ending publishes (spec 001, 002)."""

from __future__ import annotations

import json

import pytest

from httk.workflow import Attempt, Runner, codec

STEPS = ["finish", "start"]


def make_runner(handler) -> Runner:
    run = Runner("demo")
    run.step(name="start")(handler)

    @run.step
    def finish(a):
        a.succeed()

    return run


# --------------------------------------------------------------------------- registration


def test_step_registration_forms_and_duplicates():
    run = Runner("demo")

    @run.step
    def alpha(a):
        pass

    @run.step(name="beta-step")
    def anything(a):
        pass

    @run.step("gamma")
    def other(a):
        pass

    assert run.steps == frozenset({"alpha", "beta-step", "gamma"})
    assert run.workflow == "demo"
    assert alpha.__name__ == "alpha"  # the decorator returns the function itself
    with pytest.raises(ValueError, match="already registered"):
        run.step(name="alpha")(lambda a: None)
    with pytest.raises(ValueError, match="invalid step name"):
        run.step(name="bad step")(lambda a: None)
    assert run.description() == {
        "format": "httk-workflow-runner-description",
        "format_version": 1,
        "workflow": "demo",
        "steps": ["alpha", "beta-step", "gamma"],
    }


def test_describe_in_process_touches_nothing(capsys, monkeypatch, tmp_path):
    run = make_runner(lambda a: a.succeed())
    monkeypatch.chdir(tmp_path)
    assert run.main(["--describe"]) == 0
    monkeypatch.setenv("HTTK_WORKFLOW_DESCRIBE", "1")
    assert run.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [codec.dumps(run.description())] * 2
    assert list(tmp_path.iterdir()) == []


def test_description_prints_the_description_and_returns_it(capsys, monkeypatch, tmp_path):
    """Spec 002 row Runner.description: "Print this runner's own description and touch nothing else"."""
    import io

    run = make_runner(lambda a: a.succeed())
    monkeypatch.chdir(tmp_path)
    document = run.description()
    assert capsys.readouterr().out == codec.dumps(document) + "\n"
    assert document["steps"] == STEPS and document["workflow"] == "demo"
    other = io.StringIO()
    assert run.description(other) == document and other.getvalue() == codec.dumps(document) + "\n"
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []


def test_main_outside_a_manager_names_the_missing_variable(capsys):
    run = make_runner(lambda a: a.succeed())
    assert run.main([]) == 2
    err = capsys.readouterr().err
    assert "HTTK_WORKFLOW_CONTEXT is not set" in err and err.count("\n") == 1


def test_unexpected_arguments_are_refused(capsys):
    assert make_runner(lambda a: a.succeed()).main(["--frobnicate"]) == 2
    assert "unexpected arguments" in capsys.readouterr().err


# --------------------------------------------------------------------------- terminal calls


@pytest.mark.parametrize(
    ("call", "members"),
    [
        (lambda a: a.succeed(), {"action": "succeed"}),
        (lambda a: a.retry("the node went away"), {"action": "retry", "reason": "the node went away"}),
        (lambda a: a.pause("needs a human"), {"action": "pause", "reason": "needs a human"}),
        (lambda a: a.advance("finish"), {"action": "advance", "next_step": "finish", "priority": None}),
        (lambda a: a.advance("finish", priority=-3), {"action": "advance", "next_step": "finish", "priority": -3}),
        (
            lambda a: a.fail("relax_diverged", "site 3 did not relax", details={"site": 3}, retryable=True),
            {
                "action": "fail",
                "failure": {
                    "code": "relax_diverged",
                    "message": "site 3 did not relax",
                    "details": {"site": 3},
                    "retryable": True,
                },
            },
        ),
        (
            lambda a: a.fail("bad"),
            {"action": "fail", "failure": {"code": "bad", "message": "", "details": {}, "retryable": False}},
        ),
    ],
)
def test_each_terminal_call_publishes_exactly_its_outcome(make_attempt, call, members):
    attempt = make_attempt("start")
    assert make_runner(call).main([]) == 0
    action = members.pop("action")
    assert attempt.outcome() == attempt.expected(action, STEPS, **members)
    assert sorted(p.name for p in attempt.ready.iterdir()) == ["outcome.json"]
    assert attempt.drafts() == []
    steps_file = attempt.payload / ".httk-job" / "runner-steps.json"
    assert steps_file.read_bytes() == codec.encode({"steps": STEPS, "workflow": "demo"})


def test_advance_merges_state_before_publication(make_attempt):
    attempt = make_attempt("start")
    seen = {}

    def handler(a):
        a.state["kept"] = 1
        a.advance("finish", state={"failed": ["site-1"], "kept": 2})
        seen["state"] = a.state.read()
        seen["published"] = a.published

    make_runner(handler).main([])
    assert seen == {"state": {"failed": ["site-1"], "kept": 2}, "published": True}
    assert attempt.outcome()["next_step"] == "finish"


def test_durable_attempt_publishes_the_same_bytes(make_attempt):
    attempt = make_attempt("start", durable=True)
    make_runner(lambda a: a.succeed()).main([])
    assert attempt.outcome() == attempt.expected("succeed", STEPS)


def test_second_terminal_call_is_refused_before_touching_anything(make_attempt):
    attempt = make_attempt("start")
    errors = []

    def handler(a):
        a.succeed()
        for late in (lambda: a.fail("late"), lambda: a.advance("finish"), lambda: a.put("x", "y")):
            try:
                late()
            except RuntimeError as error:
                errors.append(str(error))

    assert make_runner(handler).main([]) == 0
    assert attempt.outcome() == attempt.expected("succeed", STEPS)
    assert len(errors) == 3
    assert all("already published" in message for message in errors)
    assert attempt.drafts() == []


def test_an_existing_outcome_ready_is_never_replaced(make_attempt):
    attempt = make_attempt("start")
    (attempt.ready).mkdir()
    outcome = []

    def handler(a):
        outcome.append(a.published)
        with pytest.raises(RuntimeError, match="already published"):
            a.succeed()

    # main sees an outcome already in place and adds no no_outcome failure of its own.
    assert make_runner(handler).main([]) == 0
    assert outcome == [True]
    assert list(attempt.ready.iterdir()) == []


def _sdk_failure(code: str, message: str) -> dict:
    """The failure member of an outcome ``Runner.main`` publishes for a runner problem: no details, not retryable."""
    return {"code": code, "message": message, "details": {}, "retryable": False}


def test_unknown_step_fails_naming_the_registered_steps(make_attempt):
    attempt = make_attempt("colect")
    assert make_runner(lambda a: a.succeed()).main([]) == 0
    failure = _sdk_failure("unknown_step", "step 'colect' is not implemented; registered steps: finish, start")
    assert attempt.outcome() == attempt.expected("fail", STEPS, failure=failure)


def test_returning_without_an_outcome_fails_and_discards_the_draft(make_attempt):
    from httk.workflow import ChildSpec

    attempt = make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="finish"), label="orphan")

    assert make_runner(handler).main([]) == 0
    failure = _sdk_failure("no_outcome", "step 'start' returned without publishing an outcome")
    assert attempt.outcome() == attempt.expected("fail", STEPS, failure=failure)
    assert not (attempt.ready / "children").exists()
    assert attempt.drafts() == []


def test_a_raising_handler_leaves_error_json_and_no_outcome(make_attempt):
    from httk.workflow import ChildSpec

    attempt = make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="finish"), label="half")
        assert attempt.drafts(), "the draft exists while the handler runs"
        raise ValueError("the structure is not a crystal")

    with pytest.raises(ValueError, match="not a crystal"):
        make_runner(handler).main([])
    assert not attempt.ready.exists()
    assert attempt.drafts() == []
    data = (attempt.control / "error.json").read_bytes()
    error = json.loads(data)
    assert data == codec.encode(error)
    assert set(error) == {"format", "format_version", "step", "exception", "message", "traceback"}
    assert error["format"] == "httk-workflow-runner-error"
    assert error["format_version"] == 1
    assert (error["step"], error["exception"], error["message"]) == (
        "start",
        "ValueError",
        "the structure is not a crystal",
    )
    assert "Traceback" in error["traceback"] and "ValueError" in error["traceback"]


@pytest.mark.parametrize("code", [0, None, False])
def test_sys_exit_0_in_a_handler_is_a_return_so_no_outcome(make_attempt, code):
    """Spec 002: a handler that ends without publishing is no_outcome, as `exit 0` in a Bash handler is."""
    import sys

    from httk.workflow import ChildSpec

    attempt = make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="finish"), label="orphan")
        sys.exit(code)

    assert make_runner(handler).main([]) == 0
    failure = _sdk_failure("no_outcome", "step 'start' returned without publishing an outcome")
    assert attempt.outcome() == attempt.expected("fail", STEPS, failure=failure)
    assert not (attempt.control / "error.json").exists() and attempt.drafts() == []


def test_sys_exit_0_after_publishing_keeps_the_outcome(make_attempt):
    import sys

    attempt = make_attempt("start")

    def handler(a):
        a.succeed()
        sys.exit(0)

    assert make_runner(handler).main([]) == 0
    assert attempt.outcome() == attempt.expected("succeed", STEPS)


@pytest.mark.parametrize(("code", "status"), [(7, 7), ("bad input", 1)])
def test_a_nonzero_sys_exit_is_a_handler_exit_like_bash_exit_n(make_attempt, code, status):
    """Bash `exit 7` leaves error.json with HandlerExit and exits 7; sys.exit(7) does the same."""
    import sys

    from httk.workflow import ChildSpec

    attempt = make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="finish"), label="half")
        sys.exit(code)

    with pytest.raises(SystemExit) as exited:
        make_runner(handler).main([])
    assert exited.value.code == code
    assert not attempt.ready.exists() and attempt.drafts() == []
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["step"], error["exception"]) == ("start", "HandlerExit")
    assert error["message"] == f"the handler exited with status {status} (sys.exit({code!r}))"


# --------------------------------------------------------------------------- step checks and joins


def test_every_published_step_name_is_checked_at_the_call(make_attempt):
    from httk.workflow import ChildSpec, RunnerRef

    make_attempt("start")
    messages = []

    def handler(a):
        for call in (
            lambda: a.advance("colect"),
            lambda: a.gather("colect"),
            lambda: a.spawn(ChildSpec(step="colect"), label="c"),
        ):
            with pytest.raises(ValueError) as caught:
                call()
            messages.append(str(caught.value))
        # A child that runs another runner may name steps this runner does not know.
        a.spawn(ChildSpec(step="other", runner=RunnerRef.installed("tools/other.py", "cd" * 32)), label="x")
        with pytest.raises(ValueError, match="on_impossible"):
            a.gather("finish", on_impossible="tirage")
        assert not a.published
        a.gather("finish")

    assert make_runner(handler).main([]) == 0
    assert all("registered steps: finish, start" in message for message in messages)
    assert "'colect'" in messages[0]


def test_steps_are_unchecked_when_the_attempt_has_no_step_set(make_attempt):
    attempt = make_attempt("start")
    a = Attempt.initialize()
    a.advance("anything")
    assert attempt.outcome() == attempt.expected("advance", None, next_step="anything", priority=None)


@pytest.mark.parametrize(
    ("kwargs", "join"),
    [
        ({}, {"when": "all_succeeded", "count": None, "on_impossible": None}),
        (
            {"when": "all_terminal", "on_impossible": "start"},
            {"when": "all_terminal", "count": None, "on_impossible": "start"},
        ),
        ({"when": "any_succeeded"}, {"when": "any_succeeded", "count": None, "on_impossible": None}),
        ({"when": "at_least", "count": 2}, {"when": "at_least", "count": 2, "on_impossible": None}),
    ],
)
def test_gather_serialises_its_condition(make_attempt, kwargs, join):
    from httk.workflow import ChildSpec

    attempt = make_attempt("start")

    def handler(a):
        for label in ("b", "a", "c"):
            a.spawn(ChildSpec(step="finish"), label=label)
        a.gather("finish", **kwargs)

    make_runner(handler).main([])
    expected_join = {"step": "finish", "children": ["b", "a", "c"], **join}
    assert attempt.outcome() == attempt.expected("wait", STEPS, join=expected_join)
    assert [child["label"] for child in attempt.spawned()["children"]] == ["b", "a", "c"]


def test_gather_refusals(make_attempt):
    from httk.workflow import ChildSpec

    make_attempt("start")

    def handler(a):
        with pytest.raises(ValueError, match="none were spawned"):
            a.gather("finish")
        a.spawn(ChildSpec(step="finish"), label="only")
        with pytest.raises(ValueError, match="count"):
            a.gather("finish", when="at_least")
        with pytest.raises(ValueError, match="only 1 spawned"):
            a.gather("finish", when="at_least", count=2)
        with pytest.raises(ValueError, match="takes no count"):
            a.gather("finish", count=1)
        with pytest.raises(ValueError, match="invalid join condition"):
            a.gather("finish", when="most")
        a.gather("finish", when="at_least", count=1)

    assert make_runner(handler).main([]) == 0


def test_advance_refuses_a_priority_the_manager_would_refuse(make_attempt):
    make_attempt("start")

    def handler(a):
        # The outcome parser and every marker name bound priorities to 64 bits; the SDK refuses first.
        with pytest.raises(ValueError, match="64-bit range"):
            a.advance("finish", priority=2**63)
        a.advance("finish", priority=2**63 - 1)

    assert make_runner(handler).main([]) == 0
