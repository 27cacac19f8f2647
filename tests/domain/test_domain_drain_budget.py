"""The budget rule for an attempt its own manager stopped while draining: it is given back."""

from __future__ import annotations

from httk.workflow.domain.budgets import Counters, after_attempt, describe, uncharged
from httk.workflow.domain.model import RetryPolicy


def test_the_stopped_attempt_is_given_back_to_both_attempt_budgets() -> None:
    counters = Counters(activation_ordinal=2, attempts_in_activation=3, total_attempts=7)
    assert uncharged(counters) == Counters(activation_ordinal=2, attempts_in_activation=2, total_attempts=6)


def test_nothing_goes_below_zero() -> None:
    counters = Counters(activation_ordinal=1, attempts_in_activation=0, total_attempts=0)
    assert uncharged(counters) == counters


def test_a_one_attempt_budget_still_admits_the_rerun() -> None:
    # maximum_total_attempts 1: the walltime-killed first attempt must not use the only attempt up.
    policy = RetryPolicy(maximum_attempts_per_activation=1, maximum_total_attempts=1)
    after_claim = Counters(activation_ordinal=1, attempts_in_activation=1, total_attempts=1)
    assert not after_attempt(policy, after_claim, failure=None, explicit_retry=True).retry
    given_back = uncharged(after_claim)
    assert after_attempt(policy, given_back, failure=None, explicit_retry=True).retry
    assert describe(policy, given_back)["maximum_total_attempts"] == {
        "limit": 1, "used": 0, "remaining": 1, "exhausted": False,
    }
