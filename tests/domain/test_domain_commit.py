"""The commit decision: every branch of ``decide_commit`` and ``decide_drained``, with no I/O at all."""

from __future__ import annotations

from typing import Any

import pytest

from httk.workflow.domain.budgets import ACTIVATIONS_EXHAUSTED, ATTEMPTS_EXHAUSTED
from httk.workflow.domain.commit import (
    AttemptEnding,
    WaitRequest,
    activation_changes,
    decide_commit,
    decide_drained,
    released,
)
from httk.workflow.domain.frames import ChildRef, JoinRecord, Owner, StateFrame
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.domain.model import Failure, RetryPolicy

POLICY = RetryPolicy(maximum_attempts_per_activation=3, maximum_total_attempts=10, maximum_activations=5)
TRANSIENT = Failure("node_failure", "node died", retryable=True)
HARD = Failure("bad_input", "no POSCAR")
OWNER = Owner(manager_id="m-a", host="h", lease_seconds=60.0, claimed_at=1.0)
CHILDREN = (ChildRef("a", "id-a", "a--id-a", "kids"), ChildRef("b", "id-b", "b--id-b", "kids"))


def _frame(**members: Any) -> StateFrame:
    values: dict[str, Any] = {
        "workspace_id": "w", "job_id": "j", "job_key": "t--j", "placement": "p", "generation": 4,
        "kind": StateKind.COMMITTING, "event": "publish", "previous_record_ref": None, "created_at": 0.0,
        "priority": 0, "step": "main", "activation_id": "act-1", "activation_ordinal": 1,
        "attempt_id": "att-1", "attempt_ordinal": 1, "total_attempts": 1, "runner_steps": ("main",),
        "owner": OWNER,
    }
    values.update(members)
    return StateFrame(**values)


def test_a_success_releases_the_job_and_clears_its_failure_join_and_reason():
    decision = decide_commit(AttemptEnding("succeed"), _frame(failure=HARD, reason="old"), POLICY)
    assert decision.event == Event.COMMIT_SUCCEED and not decision.new_activation
    assert dict(decision.changes) == {"owner": None, "process": None, "failure": None, "join": None,
                                      "reason": None, "runner_steps": ("main",)}
    assert decision.summary == "succeeded"


def test_the_runner_steps_an_outcome_declares_replace_the_recorded_ones():
    decision = decide_commit(AttemptEnding("succeed", runner_steps=("a", "b")), _frame(), POLICY)
    assert decision.changes["runner_steps"] == ("a", "b")


def test_an_unclean_ending_and_applied_data_move_their_counters():
    frame = _frame(unclean_exits=2, data_generation=5)
    decision = decide_commit(AttemptEnding("succeed", unclean=True, data_applied=True), frame, POLICY)
    assert (decision.changes["unclean_exits"], decision.changes["data_generation"]) == (3, 6)
    plain = decide_commit(AttemptEnding("succeed"), frame, POLICY)
    assert "unclean_exits" not in plain.changes and "data_generation" not in plain.changes


def test_a_pause_outcome_pauses_with_its_reason_and_withdraws_a_pending_pause_request():
    decision = decide_commit(AttemptEnding("pause", reason="look at it"), _frame(pause_requested=True), POLICY)
    assert decision.event == Event.COMMIT_PAUSE
    assert decision.changes["reason"] == "look at it" and decision.changes["pause_requested"] is False


def test_a_wait_records_the_join_over_the_labels_it_names_in_their_order():
    wait = WaitRequest(step="after", when="at_least", count=1, on_impossible="rescue", labels=("b", "a"))
    decision = decide_commit(AttemptEnding("wait", join=wait, spawned=CHILDREN), _frame(failure=HARD), POLICY)
    assert decision.event == Event.COMMIT_WAIT and decision.summary == "waiting on 2 children"
    assert decision.changes["join"] == JoinRecord(step="after", when="at_least", count=1, on_impossible="rescue",
                                                  children=(CHILDREN[1], CHILDREN[0]), first_unresolved_at=None)
    assert decision.changes["failure"] is None and decision.changes["owner"] is None


def test_a_wait_without_labels_waits_for_every_child_the_attempt_spawned():
    decision = decide_commit(AttemptEnding("wait", join=WaitRequest("after"), spawned=CHILDREN), _frame(), POLICY)
    assert decision.changes["join"].children == CHILDREN


def test_a_wait_on_a_label_the_attempt_did_not_spawn_is_refused():
    ending = AttemptEnding("wait", join=WaitRequest("after", labels=("z",)), spawned=CHILDREN)
    with pytest.raises(ValueError, match="'z', which the attempt did not spawn"):
        decide_commit(ending, _frame(), POLICY)
    with pytest.raises(ValueError, match="a wait names its join"):
        decide_commit(AttemptEnding("wait"), _frame(), POLICY)


def test_an_advance_starts_the_next_activation_and_leaves_its_id_to_the_applier():
    frame = _frame(activation_ordinal=2, attempt_ordinal=2, total_attempts=4, failure=HARD, reason="r")
    decision = decide_commit(AttemptEnding("advance", step="relax", priority=9), frame, POLICY)
    assert decision.event == Event.COMMIT_ADVANCE and decision.new_activation
    assert dict(decision.changes) == {
        "owner": None, "process": None, "step": "relax", "activation_ordinal": 3, "attempt_ordinal": 0,
        "attempt_id": None, "join": None, "failure": None, "reason": None, "runner_steps": ("main",), "priority": 9,
    }
    assert "activation_id" not in decision.changes and decision.summary == "advanced to 'relax'"


def test_an_advance_under_a_pause_request_advances_and_pauses():
    decision = decide_commit(AttemptEnding("advance", step="relax"), _frame(pause_requested=True), POLICY)
    assert decision.event == Event.COMMIT_PAUSE and decision.new_activation
    assert decision.changes["step"] == "relax" and decision.changes["pause_requested"] is False
    assert "priority" not in decision.changes


def test_an_advance_past_the_activation_budget_fails_the_job():
    decision = decide_commit(AttemptEnding("advance", step="relax"), _frame(activation_ordinal=5), POLICY)
    assert decision.event == Event.COMMIT_FAIL and not decision.new_activation
    failure = decision.changes["failure"]
    assert failure.code == ACTIVATIONS_EXHAUSTED and "maximum_activations exhausted" in failure.message
    assert decision.changes["reason"] == failure.message == decision.summary


def test_an_explicit_retry_within_the_budget_retries_with_the_runners_reason():
    decision = decide_commit(AttemptEnding("retry", reason="flaky node"), _frame(), POLICY)
    assert decision.event == Event.COMMIT_RETRY and decision.summary == "retrying: flaky node"
    assert decision.changes["reason"] == "flaky node" and decision.changes["failure"] is None


def test_a_retryable_failure_is_retried_and_kept_as_the_last_failure():
    decision = decide_commit(AttemptEnding("fail", failure=TRANSIENT), _frame(), POLICY)
    assert decision.event == Event.COMMIT_RETRY
    assert decision.changes["failure"] == TRANSIENT and decision.changes["reason"].startswith("retrying:")


def test_a_retry_under_a_pause_request_is_deferred_as_a_pause():
    decision = decide_commit(AttemptEnding("fail", failure=TRANSIENT), _frame(pause_requested=True), POLICY)
    assert decision.event == Event.COMMIT_PAUSE and decision.summary == "retry deferred by a pause request"
    assert decision.changes["pause_requested"] is False


def test_a_failure_that_asks_no_retry_fails_the_job_as_published():
    decision = decide_commit(AttemptEnding("fail", failure=HARD), _frame(), POLICY)
    assert decision.event == Event.COMMIT_FAIL and decision.summary == "failed: bad_input"
    assert decision.changes["failure"] == HARD and decision.changes["reason"] is None


def test_a_retryable_failure_past_the_attempt_budget_fails_with_the_budget_named():
    decision = decide_commit(AttemptEnding("fail", failure=TRANSIENT), _frame(attempt_ordinal=3, total_attempts=3),
                             POLICY)
    assert decision.event == Event.COMMIT_FAIL
    failure = decision.changes["failure"]
    assert failure.code == "node_failure" and "maximum_attempts_per_activation" in failure.details["budget"]
    assert decision.changes["reason"] == failure.details["budget"]


def test_an_explicit_retry_past_the_total_budget_fails_as_attempts_exhausted():
    decision = decide_commit(AttemptEnding("retry"), _frame(total_attempts=10), POLICY)
    assert decision.event == Event.COMMIT_FAIL
    failure = decision.changes["failure"]
    assert failure.code == ATTEMPTS_EXHAUSTED and failure.message.startswith("retry refused: maximum_total_attempts")


def test_a_decision_is_frozen():
    decision = decide_commit(AttemptEnding("succeed"), _frame(), POLICY)
    with pytest.raises(TypeError):
        decision.changes["failure"] = HARD  # type: ignore[index]


def test_a_drained_attempt_is_given_back_uncharged_and_counted_unclean():
    decision = decide_drained(_frame(attempt_ordinal=2, total_attempts=5, unclean_exits=1), "drained: signal 15")
    assert decision.event == Event.DRAIN_RELEASE and not decision.new_activation
    assert dict(decision.changes) == {"owner": None, "process": None, "attempt_ordinal": 1, "total_attempts": 4,
                                      "unclean_exits": 2, "reason": "drained: signal 15"}


def test_a_drained_attempt_under_a_pause_request_is_paused():
    decision = decide_drained(_frame(pause_requested=True), "drained")
    assert decision.event == Event.DRAIN_PAUSE and decision.changes["pause_requested"] is False
    assert decision.changes["total_attempts"] == 0


def test_the_change_builders_end_the_attempts_ownership():
    assert released(reason="r") == {"owner": None, "process": None, "reason": "r"}
    assert activation_changes(_frame(activation_ordinal=3), "next", failure=None) == {
        "owner": None, "process": None, "step": "next", "activation_ordinal": 4, "attempt_ordinal": 0,
        "attempt_id": None, "failure": None,
    }
