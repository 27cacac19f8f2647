"""Retry budgets at every edge: one below the limit, exactly at it, unlimited."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from httk.workflow.domain.budgets import (
    ACTIVATIONS_EXHAUSTED,
    ATTEMPTS_EXHAUSTED,
    BudgetDecision,
    Counters,
    Verdict,
    after_attempt,
    can_advance,
    continue_fits,
    describe,
)
from httk.workflow.domain.model import Failure, RetryPolicy

TRANSIENT = Failure(code="node_failure", message="node died", retryable=True)
HARD = Failure(code="bad_input", message="no POSCAR")
LISTED = Failure(code="walltime", message="killed at walltime")


def _counters(ordinal: int = 1, in_activation: int = 1, total: int = 1) -> Counters:
    return Counters(activation_ordinal=ordinal, attempts_in_activation=in_activation, total_attempts=total)


def _unlimited(**limits: int | None) -> RetryPolicy:
    base: dict[str, int | None] = {
        "maximum_attempts_per_activation": None,
        "maximum_total_attempts": None,
        "maximum_activations": None,
    }
    base.update(limits)
    return RetryPolicy(**base)  # type: ignore[arg-type]


# --- after_attempt: is a retry wanted? ---------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "explicit", "retry_on", "wanted"),
    [
        (None, False, (), False),
        (None, True, (), True),
        (HARD, False, (), False),
        (HARD, True, (), True),
        (TRANSIENT, False, (), True),
        (LISTED, False, (), False),
        (LISTED, False, ("walltime",), True),
        (HARD, False, ("walltime",), False),
    ],
)
def test_retry_is_wanted_only_when_asked(
    failure: Failure | None, explicit: bool, retry_on: tuple[str, ...], wanted: bool
) -> None:
    policy = RetryPolicy(maximum_attempts_per_activation=None, retry_on=retry_on)
    d = after_attempt(policy, _counters(), failure=failure, explicit_retry=explicit)
    assert d.retry is wanted
    assert d.failure_code is None
    assert d.verdict == (Verdict.ALLOWED if wanted else Verdict.NOT_WANTED)
    assert d.reason


def test_unwanted_retry_is_not_charged_even_when_exhausted() -> None:
    policy = RetryPolicy(maximum_attempts_per_activation=1)
    d = after_attempt(policy, _counters(in_activation=5), failure=HARD, explicit_retry=False)
    assert (d.retry, d.failure_code) == (False, None)


# --- after_attempt: does the retry fit? --------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "used", "retry"),
    [(3, 1, True), (3, 2, True), (3, 3, False), (3, 4, False), (1, 1, False), (None, 10_000, True)],
)
def test_per_activation_budget(limit: int | None, used: int, retry: bool) -> None:
    policy = _unlimited(maximum_attempts_per_activation=limit)
    d = after_attempt(
        policy, _counters(in_activation=used, total=used), failure=TRANSIENT, explicit_retry=False
    )
    assert d.retry is retry
    if not retry:
        assert d.failure_code == ATTEMPTS_EXHAUSTED and d.verdict == Verdict.EXHAUSTED
        assert "maximum_attempts_per_activation" in d.reason and f"{used} of {limit}" in d.reason


@pytest.mark.parametrize(
    ("limit", "used", "retry"),
    [(5, 3, True), (5, 4, True), (5, 5, False), (5, 6, False), (None, 10_000, True)],
)
def test_total_budget_on_retry(limit: int | None, used: int, retry: bool) -> None:
    policy = _unlimited(maximum_total_attempts=limit)
    d = after_attempt(
        policy, _counters(ordinal=3, in_activation=1, total=used), failure=None, explicit_retry=True
    )
    assert d.retry is retry
    if not retry:
        assert d.failure_code == ATTEMPTS_EXHAUSTED
        assert "maximum_total_attempts" in d.reason and f"{used} of {limit}" in d.reason


def test_activations_do_not_limit_a_retry() -> None:
    policy = _unlimited(maximum_activations=2)
    d = after_attempt(policy, _counters(ordinal=2), failure=TRANSIENT, explicit_retry=False)
    assert d.retry


def test_default_policy_allows_three_attempts_per_activation() -> None:
    policy = RetryPolicy()
    assert after_attempt(
        policy, _counters(in_activation=2, total=2), failure=TRANSIENT, explicit_retry=False
    ).retry
    assert not after_attempt(
        policy, _counters(in_activation=3, total=3), failure=TRANSIENT, explicit_retry=False
    ).retry


# --- can_advance ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "ordinal", "allowed"),
    [(3, 1, True), (3, 2, True), (3, 3, False), (3, 4, False), (None, 999, True)],
)
def test_activation_budget(limit: int | None, ordinal: int, allowed: bool) -> None:
    d = can_advance(_unlimited(maximum_activations=limit), _counters(ordinal=ordinal, total=ordinal))
    assert d.allowed is allowed and d.retry is allowed
    assert d.failure_code == (None if allowed else ACTIVATIONS_EXHAUSTED)


@pytest.mark.parametrize(("limit", "total", "allowed"), [(4, 3, True), (4, 4, False), (None, 10_000, True)])
def test_advance_needs_a_total_attempt(limit: int | None, total: int, allowed: bool) -> None:
    d = can_advance(_unlimited(maximum_total_attempts=limit), _counters(ordinal=2, total=total))
    assert d.allowed is allowed
    assert d.failure_code == (None if allowed else ATTEMPTS_EXHAUSTED)


def test_advance_ignores_the_per_activation_budget() -> None:
    d = can_advance(_unlimited(maximum_attempts_per_activation=1), _counters(in_activation=7, total=7))
    assert d.allowed


def test_advance_names_activations_first_when_both_run_out() -> None:
    policy = _unlimited(maximum_activations=2, maximum_total_attempts=2)
    assert can_advance(policy, _counters(ordinal=2, total=2)).failure_code == ACTIVATIONS_EXHAUSTED


# --- continue_fits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "total", "fits"), [(6, 5, True), (6, 6, False), (6, 7, False), (None, 99, True)]
)
def test_continue_fits_only_the_total(limit: int | None, total: int, fits: bool) -> None:
    policy = RetryPolicy(
        maximum_attempts_per_activation=1, maximum_total_attempts=limit, maximum_activations=1
    )
    d = continue_fits(policy, _counters(ordinal=1, in_activation=1, total=total))
    assert d.allowed is fits
    assert d.failure_code == (None if fits else ATTEMPTS_EXHAUSTED)


# --- describe and counters -------------------------------------------------------------------------


def test_describe() -> None:
    policy = RetryPolicy(
        maximum_attempts_per_activation=3,
        maximum_total_attempts=10,
        maximum_activations=None,
        retry_on=("x",),
    )
    assert describe(policy, _counters(ordinal=2, in_activation=3, total=4)) == {
        "maximum_attempts_per_activation": {"limit": 3, "used": 3, "remaining": 0, "exhausted": True},
        "maximum_total_attempts": {"limit": 10, "used": 4, "remaining": 6, "exhausted": False},
        "maximum_activations": {"limit": None, "used": 2, "remaining": None, "exhausted": False},
        "retry_on": ["x"],
    }


def test_describe_never_reports_negative_remaining() -> None:
    out = describe(_unlimited(maximum_total_attempts=2), _counters(total=5))
    assert out["maximum_total_attempts"]["remaining"] == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"activation_ordinal": 0, "attempts_in_activation": 0, "total_attempts": 0},
        {"activation_ordinal": 1, "attempts_in_activation": -1, "total_attempts": 0},
        {"activation_ordinal": 1, "attempts_in_activation": 0, "total_attempts": -1},
        {"activation_ordinal": True, "attempts_in_activation": 0, "total_attempts": 0},
    ],
)
def test_counters_refuse_nonsense(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Counters(**kwargs)


limits = st.one_of(st.none(), st.integers(0, 6))


@given(
    per=limits,
    total_limit=limits,
    activations=limits,
    ordinal=st.integers(1, 8),
    in_activation=st.integers(0, 8),
    extra=st.integers(0, 8),
    retryable=st.booleans(),
    explicit=st.booleans(),
    listed=st.booleans(),
)
def test_decisions_match_a_direct_reading_of_the_policy(
    per: int | None,
    total_limit: int | None,
    activations: int | None,
    ordinal: int,
    in_activation: int,
    extra: int,
    retryable: bool,
    explicit: bool,
    listed: bool,
) -> None:
    policy = RetryPolicy(
        maximum_attempts_per_activation=per,
        maximum_total_attempts=total_limit,
        maximum_activations=activations,
        retry_on=("boom",) if listed else (),
    )
    counters = _counters(ordinal=ordinal, in_activation=in_activation, total=in_activation + extra)
    total = in_activation + extra
    failure = Failure(code="boom", message="", retryable=retryable)
    total_left = total_limit is None or total < total_limit

    d = after_attempt(policy, counters, failure=failure, explicit_retry=explicit)
    wanted = explicit or retryable or listed
    fits = (per is None or in_activation < per) and total_left
    assert d.retry == (wanted and fits)
    assert d.failure_code == (ATTEMPTS_EXHAUSTED if wanted and not fits else None)

    adv = can_advance(policy, counters)
    assert adv.allowed == ((activations is None or ordinal < activations) and total_left)
    assert continue_fits(policy, counters).allowed == total_left
    for decision in (d, adv):
        assert isinstance(decision, BudgetDecision) and decision.reason
