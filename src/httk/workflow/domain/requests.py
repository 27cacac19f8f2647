"""Operator requests as decisions: what one request does to a job in one exact state.

A request is pinned to one marker (kind, generation, record reference), so what
it does depends only on that state's kind and frame and on the job's retry
policy — never on when it is applied. :func:`plan_request` is that decision; the
client computes it to refuse a request that can never apply before publishing
anything, and the manager computes it again and applies the plan. Budgets are
asked through :func:`~httk.workflow.domain.budgets.may_start`, the rule every
path that leads to an attempt uses. Spec: 000 "Inspect and control".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .budgets import Start, counters_of, may_start
from .frames import StateFrame
from .lifecycle import Event, StateKind, allowed_events, is_terminal
from .model import RetryPolicy, ValidationError, check_step

ACTIONS: tuple[str, ...] = ("pause", "continue", "cancel", "override_step")
_NO_CHANGES: Mapping[str, Any] = MappingProxyType({})


@attrs.frozen
class RequestPlan:
    """The transition a request makes, or why it can never apply to this state."""

    action: str
    #: The event to apply; ``None`` when the request can never apply (see ``refusal``).
    event: Event | None
    #: Frame changes that need nothing from the world (read-only; copy before extending).
    changes: Mapping[str, Any] = _NO_CHANGES
    #: Why the request can never apply to this state; empty when it applies.
    refusal: str = ""
    #: ``override_step``: the step a new activation starts at (the applier assigns its id).
    activation_step: str | None = None
    #: A cancel that fences a running attempt: the applying manager owns the rest of the procedure.
    takes_ownership: bool = False

    @property
    def applies(self) -> bool:
        return self.event is not None


def _refuse(action: str, refusal: str) -> RequestPlan:
    return RequestPlan(action, None, refusal=refusal)


def _allowed(kind: StateKind, event: Event) -> bool:
    return event in allowed_events(kind)


def _finished(kind: StateKind) -> str:
    return f"a {kind.value} job is finished (terminal)"


def plan_request(
    action: str, kind: StateKind, frame: StateFrame, policy: RetryPolicy | None, *, step: str | None = None
) -> RequestPlan:
    """What ``action`` does to a job in ``kind`` with ``frame``; ``policy`` is ``None`` when job.json is unreadable."""
    if kind == StateKind.TRANSFERRING and action in ACTIONS:
        # Detached for a transfer: only the transfer moves it (back here, or into its destination).
        return _refuse(action, "a transferring job belongs to an unfinished transfer; finish that first ('httk "
                               "workflow transfer SRC DST --resume'), then request this where the job is")
    if action == "pause":
        return _plan_pause(kind)
    if action == "continue":
        return _plan_continue(kind, frame, policy)
    if action == "cancel":
        return _plan_cancel(kind)
    if action == "override_step":
        return _plan_override(kind, frame, policy, step)
    return _refuse(action, f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")


def _plan_pause(kind: StateKind) -> RequestPlan:
    if _allowed(kind, Event.OPERATOR_PAUSE):
        return RequestPlan("pause", Event.OPERATOR_PAUSE)
    if _allowed(kind, Event.DEFER_PAUSE):
        # An owned job cannot be paused under its manager: the pause is recorded for the commit.
        return RequestPlan("pause", Event.DEFER_PAUSE, MappingProxyType({"pause_requested": True}))
    if is_terminal(kind):
        return _refuse("pause", f"{_finished(kind)}; there is nothing to pause")
    if kind == StateKind.PAUSED:
        return _refuse("pause", "a paused job is already paused")
    # Only a cancelling job is left: its attempt is fenced and it can only become cancelled.
    return _refuse("pause", f"a {kind.value} job cannot be paused; its cancellation is already fenced")


def _plan_continue(kind: StateKind, frame: StateFrame, policy: RetryPolicy | None) -> RequestPlan:
    if kind == StateKind.PAUSED and frame.join is not None and not frame.join.resolved:
        # Paused while waiting: resume the same join rather than rerun the spawning step.
        return RequestPlan("continue", Event.OPERATOR_RESUME_WAIT, MappingProxyType({"pause_requested": False}))
    if kind in (StateKind.FAILED, StateKind.PAUSED):
        if policy is None:
            return _refuse("continue", "job.json is unreadable, so the retry budget cannot be checked")
        verdict = may_start(policy, counters_of(frame), Start.OPERATOR)
        if not verdict.allowed:
            return _refuse("continue", f"continue does not fit the retry budget: {verdict.reason}")
        if kind == StateKind.FAILED:
            # The operator grants the activation a fresh per-activation budget.
            changes: dict[str, Any] = {"attempt_ordinal": 0, "failure": None}
        else:
            changes = {"pause_requested": False}
        return RequestPlan("continue", Event.OPERATOR_CONTINUE, MappingProxyType(changes))
    if frame.pause_requested and _allowed(kind, Event.DEFER_PAUSE):
        # Withdraw a pause recorded under an owned job before its attempt commits.
        return RequestPlan("continue", Event.DEFER_PAUSE, MappingProxyType({"pause_requested": False}))
    if kind == StateKind.SUCCEEDED:
        return _refuse("continue", f"{_finished(kind)}; a succeeded job has nothing to continue")
    if kind == StateKind.CANCELLED:
        return _refuse("continue", f"{_finished(kind)}; a cancelled job cannot be continued")
    return _refuse("continue", f"a {kind.value} job has nothing to continue (continue resumes a paused or "
                               "failed job, or withdraws a pause recorded under a running one)")


def _plan_cancel(kind: StateKind) -> RequestPlan:
    if _allowed(kind, Event.OPERATOR_CANCEL):
        if kind == StateKind.RUNNING:
            return RequestPlan("cancel", Event.OPERATOR_CANCEL, takes_ownership=True)
        # Cancelled at once: whoever held a claim gives it up with the job.
        return RequestPlan("cancel", Event.OPERATOR_CANCEL, MappingProxyType({"owner": None}))
    if is_terminal(kind):
        return _refuse("cancel", f"{_finished(kind)}; there is nothing to cancel")
    if kind == StateKind.CANCELLING:
        return _refuse("cancel", "a cancelling job is already being cancelled")
    # Only a committing job is left: the commit is one owner's transition and ends within moments.
    return _refuse("cancel", f"a {kind.value} job cannot be cancelled while its outcome is committed; "
                             "request the cancel again once it has committed")


def _plan_override(
    kind: StateKind, frame: StateFrame, policy: RetryPolicy | None, step: str | None
) -> RequestPlan:
    try:
        check_step(step or "")
    except ValidationError as error:
        return _refuse("override_step", str(error))
    assert step is not None
    if not _allowed(kind, Event.OPERATOR_OVERRIDE_STEP):
        if is_terminal(kind):
            return _refuse("override_step", f"{_finished(kind)}; its step cannot be overridden")
        return _refuse("override_step", f"the step of a {kind.value} job cannot be overridden; "
                                        "pause it (or let it finish) first")
    if policy is None:
        return _refuse("override_step", "job.json is unreadable, so the retry budget cannot be checked")
    # A job no manager registered yet has no activation: the override is its first one.
    start = Start.OPERATOR if kind == StateKind.SUBMITTED else Start.NEW_ACTIVATION
    verdict = may_start(policy, counters_of(frame), start)
    if not verdict.allowed:
        return _refuse("override_step", f"override_step does not fit the retry budget: {verdict.reason}")
    return RequestPlan("override_step", Event.OPERATOR_OVERRIDE_STEP, activation_step=step)
