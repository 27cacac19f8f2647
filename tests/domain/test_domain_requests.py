"""The request plan: what each operator request does to a job in each exact state, budgets included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from httk.workflow.domain.budgets import Start, counters_of, may_start
from httk.workflow.domain.frames import JoinRecord, StateFrame
from httk.workflow.domain.lifecycle import TERMINAL_KINDS, TRANSITIONS, Event, StateKind
from httk.workflow.domain.model import RetryPolicy
from httk.workflow.domain.requests import ACTIONS, plan_request


def frame(kind: StateKind = StateKind.READY, **values: object) -> StateFrame:
    base: dict[str, object] = {
        "workspace_id": "w", "job_id": "j", "job_key": "j", "placement": "p", "generation": 1, "kind": kind,
        "event": "e", "previous_record_ref": None, "created_at": 0.0, "priority": 0, "step": "main",
        "activation_ordinal": 1,
    }
    base.update(values)
    return StateFrame(**base)  # type: ignore[arg-type]


POLICY = RetryPolicy()
ONE_ATTEMPT = RetryPolicy(maximum_total_attempts=1)


# --- terminal jobs: nothing applies, and the refusal names the state ------------------------------
@pytest.mark.parametrize("kind", sorted(TERMINAL_KINDS - {StateKind.FAILED}))
@pytest.mark.parametrize("action", ACTIONS)
def test_nothing_applies_to_a_succeeded_or_cancelled_job(kind: StateKind, action: str) -> None:
    plan = plan_request(action, kind, frame(kind), POLICY, step="main" if action == "override_step" else None)
    assert not plan.applies and plan.event is None
    assert f"a {kind.value} job is finished" in plan.refusal


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_a_failed_job_cannot_be_paused_or_cancelled(action: str) -> None:
    plan = plan_request(action, StateKind.FAILED, frame(StateKind.FAILED), POLICY)
    assert not plan.applies and "a failed job is finished" in plan.refusal


def test_a_failed_job_can_be_continued_or_overridden_within_its_budget() -> None:
    failed = frame(StateKind.FAILED, attempt_ordinal=3, total_attempts=3)
    plan = plan_request("continue", StateKind.FAILED, failed, POLICY)
    assert plan.event == Event.OPERATOR_CONTINUE and dict(plan.changes) == {"attempt_ordinal": 0, "failure": None}
    plan = plan_request("override_step", StateKind.FAILED, failed, POLICY, step="other")
    assert plan.event == Event.OPERATOR_OVERRIDE_STEP and plan.activation_step == "other"


# --- the budget rule binds every request that leads to an attempt ---------------------------------
def test_override_step_beyond_the_total_budget_is_refused() -> None:
    spent = frame(StateKind.FAILED, attempt_ordinal=1, total_attempts=1)
    plan = plan_request("override_step", StateKind.FAILED, spent, ONE_ATTEMPT, step="other")
    assert not plan.applies
    assert "override_step does not fit the retry budget" in plan.refusal
    assert "maximum_total_attempts exhausted: 1 of 1" in plan.refusal


def test_override_step_beyond_the_activation_budget_is_refused() -> None:
    policy = RetryPolicy(maximum_activations=2)
    plan = plan_request("override_step", StateKind.PAUSED, frame(StateKind.PAUSED, activation_ordinal=2),
                        policy, step="other")
    assert not plan.applies and "maximum_activations exhausted: 2 of 2" in plan.refusal


def test_override_step_of_an_unregistered_job_is_its_first_activation() -> None:
    # activation_ordinal 0: the override starts activation 1, which a one-activation budget allows.
    submitted = frame(StateKind.SUBMITTED, activation_ordinal=0)
    plan = plan_request("override_step", StateKind.SUBMITTED, submitted, RetryPolicy(maximum_activations=1),
                        step="other")
    assert plan.event == Event.OPERATOR_OVERRIDE_STEP


@pytest.mark.parametrize("kind", [StateKind.FAILED, StateKind.PAUSED])
def test_continue_beyond_the_total_budget_is_refused(kind: StateKind) -> None:
    plan = plan_request("continue", kind, frame(kind, attempt_ordinal=1, total_attempts=1), ONE_ATTEMPT)
    assert not plan.applies and "continue does not fit the retry budget" in plan.refusal


def test_continue_of_a_paused_job_is_not_bound_by_the_per_activation_budget() -> None:
    # The runner paused itself after its one attempt: the operator's continue grants another.
    paused = frame(StateKind.PAUSED, attempt_ordinal=1, total_attempts=1)
    plan = plan_request("continue", StateKind.PAUSED, paused, RetryPolicy(maximum_attempts_per_activation=1))
    assert plan.event == Event.OPERATOR_CONTINUE and dict(plan.changes) == {"pause_requested": False}


def test_an_unreadable_definition_refuses_what_needs_the_budget() -> None:
    failed = frame(StateKind.FAILED)
    assert "job.json is unreadable" in plan_request("continue", StateKind.FAILED, failed, None).refusal
    assert "job.json is unreadable" in plan_request("override_step", StateKind.FAILED, failed, None,
                                                    step="x").refusal
    assert plan_request("pause", StateKind.READY, frame(), None).applies


# --- the other states ---------------------------------------------------------------------------
def test_a_paused_waiting_job_resumes_its_join_without_a_budget_check() -> None:
    paused = frame(StateKind.PAUSED, join=JoinRecord(step="gather"), total_attempts=1)
    plan = plan_request("continue", StateKind.PAUSED, paused, ONE_ATTEMPT)
    assert plan.event == Event.OPERATOR_RESUME_WAIT


@pytest.mark.parametrize("kind", [StateKind.CLAIMED, StateKind.RUNNING, StateKind.COMMITTING])
def test_owned_jobs_defer_a_pause_and_a_continue_withdraws_it(kind: StateKind) -> None:
    plan = plan_request("pause", kind, frame(kind), POLICY)
    assert plan.event == Event.DEFER_PAUSE and dict(plan.changes) == {"pause_requested": True}
    plan = plan_request("continue", kind, frame(kind, pause_requested=True), POLICY)
    assert plan.event == Event.DEFER_PAUSE and dict(plan.changes) == {"pause_requested": False}
    assert not plan_request("continue", kind, frame(kind), POLICY).applies
    refused = plan_request("override_step", kind, frame(kind), POLICY, step="x")
    assert f"the step of a {kind.value} job cannot be overridden" in refused.refusal


def test_cancel_of_a_running_job_is_fenced_by_the_applying_manager() -> None:
    plan = plan_request("cancel", StateKind.RUNNING, frame(StateKind.RUNNING), POLICY)
    assert plan.event == Event.OPERATOR_CANCEL and plan.takes_ownership
    plan = plan_request("cancel", StateKind.CLAIMED, frame(StateKind.CLAIMED), POLICY)
    assert plan.event == Event.OPERATOR_CANCEL and not plan.takes_ownership and dict(plan.changes) == {"owner": None}
    assert "already being cancelled" in plan_request("cancel", StateKind.CANCELLING,
                                                     frame(StateKind.CANCELLING), POLICY).refusal


def test_a_bad_step_or_action_is_refused() -> None:
    assert "invalid step name" in plan_request("override_step", StateKind.READY, frame(), POLICY,
                                               step="9x").refusal
    assert "unknown action" in plan_request("explode", StateKind.READY, frame(), POLICY).refusal


@given(kind=st.sampled_from(list(StateKind)), action=st.sampled_from(ACTIONS), pause=st.booleans(),
       total=st.integers(0, 3), ordinal=st.integers(0, 3))
def test_every_plan_is_a_legal_transition_or_a_reason(
    kind: StateKind, action: str, pause: bool, total: int, ordinal: int
) -> None:
    policy = RetryPolicy(maximum_total_attempts=2, maximum_activations=2)
    job = frame(kind, pause_requested=pause, total_attempts=total, attempt_ordinal=min(ordinal, total),
                activation_ordinal=ordinal)
    plan = plan_request(action, kind, job, policy, step="other")
    if plan.applies:
        assert (kind, plan.event) in TRANSITIONS and not plan.refusal
        if plan.event in (Event.OPERATOR_CONTINUE, Event.OPERATOR_OVERRIDE_STEP):
            # Nothing an operator asks for can lead to an attempt beyond the total budget.
            assert total < 2
    else:
        assert plan.refusal and kind.value in plan.refusal or "budget" in plan.refusal


# --- may_start: the one rule every path asks -------------------------------------------------------
@pytest.mark.parametrize(
    ("start", "per", "activations", "allowed"),
    [
        (Start.NEXT_ATTEMPT, 2, None, False),  # per-activation spent
        (Start.NEXT_ATTEMPT, None, 2, True),  # activations do not bind a retry
        (Start.NEW_ACTIVATION, 2, 2, False),  # activations spent
        (Start.NEW_ACTIVATION, 2, None, True),  # per-activation does not bind a new activation
        (Start.OPERATOR, 2, 2, True),  # only the total binds the operator's decision
        (Start.CLAIM, 2, 2, True),  # and the claim's last check
    ],
)
def test_may_start_applies_each_budget_to_its_starts(
    start: Start, per: int | None, activations: int | None, allowed: bool
) -> None:
    policy = RetryPolicy(maximum_attempts_per_activation=per, maximum_total_attempts=5,
                         maximum_activations=activations)
    counters = counters_of(frame(activation_ordinal=2, attempt_ordinal=2, total_attempts=4))
    assert may_start(policy, counters, start).allowed is allowed


@pytest.mark.parametrize("start", list(Start))
def test_the_total_budget_binds_every_start(start: Start) -> None:
    counters = counters_of(frame(activation_ordinal=1, attempt_ordinal=0, total_attempts=1))
    decision = may_start(ONE_ATTEMPT, counters, start)
    assert not decision.allowed and decision.failure_code == "attempts_exhausted"
    assert "maximum_total_attempts exhausted: 1 of 1" in decision.reason
