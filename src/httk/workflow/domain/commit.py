"""Committing an attempt as a decision: the one transition its ending makes.

The engine observes (reads the outcome, creates the children it spawns, applies
the data it staged) and describes what it saw as an :class:`AttemptEnding`;
:func:`decide_commit` turns that, the job's frame and its retry policy into a
frozen :class:`CommitDecision` (event, frame changes, a summary), asking the
budgets whether an advance or a retry fits. :func:`decide_drained` is the same
for an attempt that its own manager stopped while draining. Nothing here reads
a file or a clock: a new activation's id is the applier's
(:attr:`CommitDecision.new_activation`). Spec: 001 "What an attempt publishes",
"Gathering them"; 000 "Run" (drain).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from . import budgets
from .frames import ChildRef, JoinRecord, StateFrame
from .lifecycle import Event, drain_release_event
from .model import Failure, RetryPolicy


@attrs.frozen
class WaitRequest:
    """The join a ``wait`` outcome asks for: the next step, the condition, the labels it waits on."""

    step: str
    when: str = "all_succeeded"
    count: int | None = None
    on_impossible: str | None = None
    #: The labels of the children it waits on; empty: every child the attempt spawned.
    labels: tuple[str, ...] = ()


@attrs.frozen
class AttemptEnding:
    """What a commit observed of one ended attempt: its outcome as read, checked and applied."""

    #: ``advance``, ``wait``, ``succeed``, ``fail``, ``retry`` or ``pause``.
    action: str
    failure: Failure | None = None
    reason: str | None = None
    #: ``advance``: the next step, and the priority it asks for.
    step: str | None = None
    priority: int | None = None
    #: ``wait``: the join the outcome asks for.
    join: WaitRequest | None = None
    #: The children the attempt spawned (and the commit created).
    spawned: tuple[ChildRef, ...] = ()
    #: The runner steps the outcome declared (``None``: it declared none).
    runner_steps: tuple[str, ...] | None = None
    #: The attempt ended without an outcome, somewhere in the middle of its workdir.
    unclean: bool = False
    #: The outcome's data transaction was applied: the job's data moved one generation on.
    data_applied: bool = False


@attrs.frozen
class CommitDecision:
    """The transition a commit makes and the frame changes it carries (read-only; copy to extend)."""

    event: Event
    changes: Mapping[str, Any]
    #: What the commit did, for the log.
    summary: str
    #: The transition starts a new activation: the applier assigns its ``activation_id``.
    new_activation: bool = False


def released(**changes: Any) -> dict[str, Any]:
    """Frame changes that end an attempt's ownership."""
    return {"owner": None, "process": None, **changes}


def activation_changes(frame: StateFrame, step: str, **changes: Any) -> dict[str, Any]:
    """Frame changes that end the attempt and start the next activation at ``step``, all but its id."""
    return released(
        step=step,
        activation_ordinal=frame.activation_ordinal + 1,
        attempt_ordinal=0,
        attempt_id=None,
        **changes,
    )


def _decision(event: Event, changes: dict[str, Any], summary: str, *, new_activation: bool = False) -> CommitDecision:
    return CommitDecision(event, MappingProxyType(changes), summary, new_activation)


def decide_commit(ending: AttemptEnding, frame: StateFrame, policy: RetryPolicy) -> CommitDecision:
    """What committing ``ending`` does to a job whose current frame is ``frame``."""
    counters = budgets.counters_of(frame)
    base: dict[str, Any] = {
        "runner_steps": ending.runner_steps if ending.runner_steps is not None else frame.runner_steps,
    }
    if ending.unclean:
        base["unclean_exits"] = frame.unclean_exits + 1
    if ending.data_applied:
        base["data_generation"] = frame.data_generation + 1
    pause = frame.pause_requested
    action = ending.action
    if action == "succeed":
        return _decision(Event.COMMIT_SUCCEED, released(failure=None, join=None, reason=None, **base), "succeeded")
    if action == "pause":
        return _decision(Event.COMMIT_PAUSE, released(reason=ending.reason, pause_requested=False, **base), "paused")
    if action == "wait":
        join = _join_of(ending)
        return _decision(Event.COMMIT_WAIT, released(join=join, failure=None, **base),
                         f"waiting on {len(join.children)} children")
    if action == "advance":
        return _advance(ending, frame, policy, counters, base)
    return _after_attempt(ending, policy, counters, base, pause=pause)


def _advance(
    ending: AttemptEnding, frame: StateFrame, policy: RetryPolicy, counters: budgets.Counters, base: dict[str, Any]
) -> CommitDecision:
    if ending.step is None:
        raise ValueError("an advance names its next step")
    verdict = budgets.can_advance(policy, counters)
    if not verdict.allowed:
        failure = Failure(verdict.failure_code or budgets.ACTIVATIONS_EXHAUSTED, verdict.reason)
        return _decision(Event.COMMIT_FAIL, released(failure=failure, reason=verdict.reason, **base),
                         verdict.reason)
    changes = activation_changes(frame, ending.step, join=None, failure=None, reason=None, **base)
    if ending.priority is not None:
        changes["priority"] = ending.priority
    if frame.pause_requested:
        changes["pause_requested"] = False
        return _decision(Event.COMMIT_PAUSE, changes, f"advanced to {ending.step!r} and paused as requested",
                         new_activation=True)
    return _decision(Event.COMMIT_ADVANCE, changes, f"advanced to {ending.step!r}", new_activation=True)


def _after_attempt(
    ending: AttemptEnding, policy: RetryPolicy, counters: budgets.Counters, base: dict[str, Any], *, pause: bool
) -> CommitDecision:
    """``retry``, ``fail`` and an ending without an outcome: retried while the budgets allow, else failed."""
    failure = ending.failure
    verdict = budgets.after_attempt(policy, counters, failure=failure, explicit_retry=ending.action == "retry")
    if verdict.retry:
        changes = released(failure=failure, reason=ending.reason or verdict.reason, **base)
        if pause:
            changes["pause_requested"] = False
            return _decision(Event.COMMIT_PAUSE, changes, "retry deferred by a pause request")
        return _decision(Event.COMMIT_RETRY, changes, f"retrying: {ending.reason or verdict.reason}")
    if failure is None:
        failure = Failure(verdict.failure_code or budgets.ATTEMPTS_EXHAUSTED, f"retry refused: {verdict.reason}")
    elif verdict.failure_code:
        failure = attrs.evolve(failure, details={**failure.details, "budget": verdict.reason})
    reason = verdict.reason if verdict.failure_code else None
    return _decision(Event.COMMIT_FAIL, released(failure=failure, reason=reason, **base),
                     f"failed: {failure.code}")


def _join_of(ending: AttemptEnding) -> JoinRecord:
    """The join a ``wait`` records: the outcome's, its children resolved from what the attempt spawned."""
    wait = ending.join
    if wait is None:
        raise ValueError("a wait names its join")
    by_label = {child.label: child for child in ending.spawned}
    labels = wait.labels or tuple(child.label for child in ending.spawned)
    missing = [label for label in labels if label not in by_label]
    if missing:
        raise ValueError(f"the join waits on {missing[0]!r}, which the attempt did not spawn")
    return JoinRecord(step=wait.step, when=wait.when, count=wait.count, on_impossible=wait.on_impossible,
                      children=tuple(by_label[label] for label in labels), first_unresolved_at=None)


def decide_drained(frame: StateFrame, reason: str) -> CommitDecision:
    """What giving back a job does when its own manager terminated the attempt while draining.

    Only for an attempt verified gone without publishing an outcome. The attempt is
    not charged (:func:`~.budgets.uncharged`), but it did leave its workdir mid-way,
    so it counts as an unclean exit for the next one.
    """
    counters = budgets.uncharged(budgets.counters_of(frame))
    event = drain_release_event(frame.pause_requested)
    changes = released(
        attempt_ordinal=counters.attempts_in_activation,
        total_attempts=counters.total_attempts,
        unclean_exits=frame.unclean_exits + 1,
        reason=reason,
    )
    if event == Event.DRAIN_PAUSE:
        changes["pause_requested"] = False
        return _decision(event, changes, "stopped by the drain and paused as requested")
    return _decision(event, changes, "stopped by the drain; ready again, not charged")
