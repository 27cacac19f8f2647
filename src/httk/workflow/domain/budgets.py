"""Retry budgets: whether another attempt or another activation may start.

Owns the three budgets of a :class:`~httk.workflow.domain.model.RetryPolicy` —
attempts per activation, total attempts, activations — and the codes a job fails
with when one runs out. Every path that can lead to a new attempt asks the one
rule :func:`may_start` (a claim, a retry, a takeover's relaunch, an advance, a
satisfied join, an operator ``continue`` or ``override_step``), so no path can
start an attempt beyond ``maximum_total_attempts``. Spec: 000 "Inspect and
control", "Inspecting jobs"; 001 "What an attempt publishes".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from httk.workflow.domain.frames import StateFrame
from httk.workflow.domain.model import Failure, RetryPolicy

ATTEMPTS_EXHAUSTED = "attempts_exhausted"
ACTIVATIONS_EXHAUSTED = "activations_exhausted"


def _non_negative(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _ordinal(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} is 1-based, got {value!r}")


@attrs.frozen
class Counters:
    """What a job has consumed so far, as recorded in its state frame."""

    #: 1-based ordinal of the current activation (a step entered by advance, join, or override).
    activation_ordinal: int = attrs.field(validator=_ordinal)
    #: Attempts already started in this activation, including one that just ended.
    attempts_in_activation: int = attrs.field(validator=_non_negative)
    #: Attempts started over the job's whole life.
    total_attempts: int = attrs.field(validator=_non_negative)


def counters_of(frame: StateFrame) -> Counters:
    """The counters a state frame records (a job not yet registered counts as activation 1)."""
    return Counters(
        activation_ordinal=max(frame.activation_ordinal, 1),
        attempts_in_activation=frame.attempt_ordinal,
        total_attempts=frame.total_attempts,
    )


class Start(StrEnum):
    """What would start the next attempt, which decides the budgets it is checked against."""

    #: Another attempt of the current activation after one ended: a retry, a takeover's relaunch.
    NEXT_ATTEMPT = "next_attempt"
    #: The first attempt of a new activation: an advance, a satisfied join, ``override_step``.
    NEW_ACTIVATION = "new_activation"
    #: An operator's ``continue`` (of a failed or paused job), or ``override_step`` of a job no
    #: manager registered yet: the operator's decision grants the activation a fresh
    #: per-activation budget and consumes no further activation.
    OPERATOR = "operator"
    #: The claim that starts an attempt an earlier decision admitted: the total budget is
    #: checked once more at the last moment, so nothing can start an attempt beyond it.
    CLAIM = "claim"


class Verdict(StrEnum):
    ALLOWED = "allowed"
    #: Nothing asked for a retry: the attempt's own failure stands.
    NOT_WANTED = "not_wanted"
    EXHAUSTED = "exhausted"


@attrs.frozen
class BudgetDecision:
    """Whether the next attempt or activation may start; ``failure_code`` is set only if a budget ran out."""

    retry: bool
    failure_code: str | None
    reason: str

    @property
    def allowed(self) -> bool:
        """Alias of ``retry`` for the decisions that are not about retrying."""
        return self.retry

    @property
    def verdict(self) -> Verdict:
        if self.retry:
            return Verdict.ALLOWED
        return Verdict.EXHAUSTED if self.failure_code is not None else Verdict.NOT_WANTED


def _within(limit: int | None, used: int) -> bool:
    return limit is None or used < limit


def _exhausted(code: str, budget: str, limit: int | None, used: int, what: str) -> BudgetDecision:
    return BudgetDecision(
        retry=False,
        failure_code=code,
        reason=f"{budget} exhausted: {used} of {limit} {what} used",
    )


def retry_wanted(policy: RetryPolicy, *, failure: Failure | None, explicit_retry: bool) -> str | None:
    """Why a retry is wanted (a short phrase), or ``None`` when nothing asks for one."""
    if explicit_retry:
        return "the runner asked for a retry"
    if failure is not None and failure.retryable:
        return f"failure {failure.code!r} is retryable"
    if failure is not None and failure.code in policy.retry_on:
        return f"failure {failure.code!r} is listed in retry_on"
    return None


def may_start(policy: RetryPolicy, counters: Counters, start: Start) -> BudgetDecision:
    """Whether an attempt may start under ``start`` given what ``counters`` already consumed.

    The one budget rule: every path that leads to an attempt asks it. The total
    budget binds every start; the per-activation budget binds only another attempt
    of the same activation (a retry); the activation budget binds only a new activation.
    """
    if start == Start.NEW_ACTIVATION and not _within(policy.maximum_activations, counters.activation_ordinal):
        return _exhausted(
            ACTIVATIONS_EXHAUSTED,
            "maximum_activations",
            policy.maximum_activations,
            counters.activation_ordinal,
            "activations",
        )
    per_activation = policy.maximum_attempts_per_activation
    if start == Start.NEXT_ATTEMPT and not _within(per_activation, counters.attempts_in_activation):
        return _exhausted(
            ATTEMPTS_EXHAUSTED,
            "maximum_attempts_per_activation",
            per_activation,
            counters.attempts_in_activation,
            f"attempts in activation {counters.activation_ordinal}",
        )
    if not _within(policy.maximum_total_attempts, counters.total_attempts):
        return _exhausted(
            ATTEMPTS_EXHAUSTED,
            "maximum_total_attempts",
            policy.maximum_total_attempts,
            counters.total_attempts,
            "attempts in total",
        )
    if start == Start.NEW_ACTIVATION:
        reason = f"activation {counters.activation_ordinal + 1} fits the budgets"
    elif start == Start.NEXT_ATTEMPT:
        reason = f"attempt {counters.attempts_in_activation + 1} of activation {counters.activation_ordinal} fits"
    else:  # OPERATOR and CLAIM: only the total budget binds
        remaining = (
            "unlimited"
            if policy.maximum_total_attempts is None
            else str(policy.maximum_total_attempts - counters.total_attempts)
        )
        reason = f"{remaining} attempts remain in the total budget"
    return BudgetDecision(retry=True, failure_code=None, reason=reason)


def after_attempt(
    policy: RetryPolicy, counters: Counters, *, failure: Failure | None, explicit_retry: bool
) -> BudgetDecision:
    """Whether another attempt of the current activation runs after an attempt ended unsuccessfully."""
    why = retry_wanted(policy, failure=failure, explicit_retry=explicit_retry)
    if why is None:
        if failure is None:
            reason = "no retry: the attempt asked for none and reported no failure"
        else:
            reason = f"no retry: failure {failure.code!r} is not retryable and not in retry_on"
        return BudgetDecision(retry=False, failure_code=None, reason=reason)
    decision = may_start(policy, counters, Start.NEXT_ATTEMPT)
    if not decision.retry:
        return decision
    return BudgetDecision(
        retry=True,
        failure_code=None,
        reason=f"retrying: {why}; attempt {counters.attempts_in_activation + 1} "
        f"of activation {counters.activation_ordinal}",
    )


def can_advance(policy: RetryPolicy, counters: Counters) -> BudgetDecision:
    """Whether a new activation (advance, satisfied join, ``override_step``) may start."""
    return may_start(policy, counters, Start.NEW_ACTIVATION)


def continue_fits(policy: RetryPolicy, counters: Counters) -> BudgetDecision:
    """Whether an operator ``continue`` of a failed job fits the total budget.

    The operator's decision grants the activation a fresh per-activation budget,
    so only ``maximum_total_attempts`` can refuse it.
    """
    decision = may_start(policy, counters, Start.OPERATOR)
    if not decision.retry:
        return decision
    return attrs.evolve(decision, reason=f"continue fits: {decision.reason}")


def _budget(limit: int | None, used: int) -> dict[str, Any]:
    return {
        "limit": limit,
        "used": used,
        "remaining": None if limit is None else max(limit - used, 0),
        "exhausted": limit is not None and used >= limit,
    }


def describe(policy: RetryPolicy, counters: Counters) -> dict[str, Any]:
    """Each budget with its limit and consumption, for ``job show`` and ``job why``.

    ``limit`` and ``remaining`` are ``None`` for an unlimited budget.
    """
    return {
        "maximum_attempts_per_activation": _budget(
            policy.maximum_attempts_per_activation, counters.attempts_in_activation
        ),
        "maximum_total_attempts": _budget(policy.maximum_total_attempts, counters.total_attempts),
        "maximum_activations": _budget(policy.maximum_activations, counters.activation_ordinal),
        "retry_on": list(policy.retry_on),
    }


def uncharged(counters: Counters) -> Counters:
    """``counters`` with the attempt that was started last given back to both attempt budgets.

    For an attempt that ended through no doing of the job's — its own manager
    terminated it while draining at walltime, or its manager died between the
    claim and the launch, so the claim is released — so the job's next attempt
    consumes what that one would have. The activation is unchanged.
    """
    return attrs.evolve(
        counters,
        attempts_in_activation=max(counters.attempts_in_activation - 1, 0),
        total_attempts=max(counters.total_attempts - 1, 0),
    )
