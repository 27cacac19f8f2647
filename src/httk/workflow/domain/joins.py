"""Join conditions: when a waiting parent may continue, and the unresolvable-child grace clock.

Owns the verdict of a join over its children's state kinds and the decision a
manager takes for a ``waiting`` job. Invariant: a verdict is ``satisfied`` or
``impossible`` only when no future outcome of the open children could change it,
so a join never fires early and never waits for something that cannot happen.
The grace for unresolvable children runs from the first recorded instant, which
the caller persists, so a manager restart does not reset it.
Spec: 000 "Run" (unresolvable join children); 001 "What an attempt publishes".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum

import attrs

from httk.workflow.domain.lifecycle import TERMINAL_KINDS, Event, StateKind
from httk.workflow.domain.model import JoinSpec, check_join_condition

#: How long a join waits for a child that cannot be resolved (``--join-grace-seconds``).
DEFAULT_JOIN_GRACE_SECONDS = 3600.0


class JoinVerdict(StrEnum):
    SATISFIED = "satisfied"
    PENDING = "pending"
    IMPOSSIBLE = "impossible"


class JoinAction(StrEnum):
    WAIT = "wait"
    NOTE_UNRESOLVED = "note_unresolved"
    SATISFIED = "satisfied"
    IMPOSSIBLE_ADVANCE = "impossible_advance"
    IMPOSSIBLE_FAIL = "impossible_fail"
    UNRESOLVABLE_FAIL = "unresolvable_fail"


#: The lifecycle event each action applies to the waiting job; ``None`` changes nothing.
ACTION_EVENTS: dict[JoinAction, Event | None] = {
    JoinAction.WAIT: None,
    JoinAction.NOTE_UNRESOLVED: Event.JOIN_NOTE,
    JoinAction.SATISFIED: Event.JOIN_SATISFIED,
    JoinAction.IMPOSSIBLE_ADVANCE: Event.JOIN_IMPOSSIBLE_ADVANCE,
    JoinAction.IMPOSSIBLE_FAIL: Event.JOIN_IMPOSSIBLE_FAIL,
    JoinAction.UNRESOLVABLE_FAIL: Event.JOIN_UNRESOLVABLE,
}


def classify(when: str, kinds: Sequence[StateKind | None], count: int | None = None) -> JoinVerdict:
    """The verdict of condition ``when`` over the children's kinds; ``None`` is an unresolvable child.

    Failed and cancelled children both count as not succeeded; an unresolvable
    child counts as still open with an unknown outcome.
    """
    check_join_condition(when, count)
    succeeded = 0
    not_succeeded = 0
    open_ = 0
    for kind in kinds:
        if kind is None:
            open_ += 1
        elif kind == StateKind.SUCCEEDED:
            succeeded += 1
        elif kind in (StateKind.FAILED, StateKind.CANCELLED):
            not_succeeded += 1
        else:
            open_ += 1
    if when == "all_succeeded":
        if not_succeeded:
            return JoinVerdict.IMPOSSIBLE
        return JoinVerdict.PENDING if open_ else JoinVerdict.SATISFIED
    if when == "all_terminal":
        return JoinVerdict.PENDING if open_ else JoinVerdict.SATISFIED
    needed = 1 if when == "any_succeeded" else int(count or 0)
    if succeeded >= needed:
        return JoinVerdict.SATISFIED
    if succeeded + open_ < needed:
        return JoinVerdict.IMPOSSIBLE
    return JoinVerdict.PENDING


def describe_condition(when: str, count: int | None = None) -> str:
    """The condition as a short phrase, e.g. ``at_least(2)``."""
    return f"at_least({count})" if when == "at_least" else when


@attrs.frozen
class JoinDecision:
    """What a manager does with a ``waiting`` job this tick, and why."""

    action: JoinAction
    verdict: JoinVerdict
    next_step: str | None
    first_unresolved_at: float | None
    #: Resolvable children not yet terminal (disjoint from ``unresolved``).
    blocking: tuple[str, ...]
    #: Children that cannot be resolved in this workspace.
    unresolved: tuple[str, ...]
    reason: str

    @property
    def event(self) -> Event | None:
        """The lifecycle event to apply, or ``None`` when the job stays exactly as it is."""
        return ACTION_EVENTS[self.action]


def _child_labels(join: JoinSpec, kinds: Mapping[str, StateKind | None]) -> list[str]:
    # The declared children come first in their declared order; a label the caller
    # observed but the spec does not list is still honoured rather than dropped.
    labels = [label for label, _key in join.children]
    seen = set(labels)
    labels.extend(label for label in kinds if label not in seen)
    return labels


def resolve_join(
    join: JoinSpec,
    kinds: Mapping[str, StateKind | None],
    *,
    first_unresolved_at: float | None,
    now: float,
    grace_seconds: float,
) -> JoinDecision:
    """Decide a waiting job's next move from its children's kinds (label -> kind, ``None`` = unresolvable).

    A declared child missing from ``kinds`` counts as unresolvable. The caller
    persists ``first_unresolved_at`` from a ``NOTE_UNRESOLVED`` decision and passes
    it back on later ticks; the failure code of the failing actions is the caller's.
    """
    if grace_seconds < 0:
        raise ValueError(f"grace_seconds must be >= 0, got {grace_seconds!r}")
    labels = _child_labels(join, kinds)
    observed = [kinds.get(label) for label in labels]
    condition = describe_condition(join.when, join.count)
    verdict = classify(join.when, observed, join.count)
    blocking = tuple(
        label
        for label, kind in zip(labels, observed, strict=True)
        if kind is not None and kind not in TERMINAL_KINDS
    )
    unresolved = tuple(label for label, kind in zip(labels, observed, strict=True) if kind is None)
    succeeded = sum(1 for kind in observed if kind == StateKind.SUCCEEDED)
    tally = f"{succeeded}/{len(labels)} children succeeded"

    def decide(action: JoinAction, next_step: str | None, clock: float | None, reason: str) -> JoinDecision:
        return JoinDecision(
            action=action,
            verdict=verdict,
            next_step=next_step,
            first_unresolved_at=clock,
            blocking=blocking,
            unresolved=unresolved,
            reason=reason,
        )

    if verdict == JoinVerdict.SATISFIED:
        return decide(
            JoinAction.SATISFIED,
            join.step,
            first_unresolved_at,
            f"join {condition} satisfied ({tally}); continuing at step {join.step!r}",
        )
    if verdict == JoinVerdict.IMPOSSIBLE:
        if join.on_impossible is not None:
            return decide(
                JoinAction.IMPOSSIBLE_ADVANCE,
                join.on_impossible,
                first_unresolved_at,
                f"join {condition} can no longer be satisfied ({tally}); "
                f"continuing at on_impossible step {join.on_impossible!r}",
            )
        return decide(
            JoinAction.IMPOSSIBLE_FAIL,
            None,
            first_unresolved_at,
            f"join {condition} can no longer be satisfied ({tally}) and no on_impossible step is set",
        )
    if not unresolved:
        # A child that became resolvable again clears the clock: a later loss restarts the grace.
        waiting_on = ", ".join(blocking) if blocking else "nothing"
        return decide(
            JoinAction.WAIT, None, None, f"join {condition} pending ({tally}); waiting on {waiting_on}"
        )
    names = ", ".join(unresolved)
    if first_unresolved_at is None:
        return decide(
            JoinAction.NOTE_UNRESOLVED,
            None,
            now,
            f"join {condition} pending; children not resolvable in this workspace: {names}; "
            f"failing after {grace_seconds:g} s unless they become resolvable",
        )
    elapsed = now - first_unresolved_at
    if elapsed >= grace_seconds:
        return decide(
            JoinAction.UNRESOLVABLE_FAIL,
            None,
            first_unresolved_at,
            f"join {condition}: children unresolvable for {elapsed:g} s "
            f"(grace {grace_seconds:g} s, first recorded at {first_unresolved_at:g}): {names}",
        )
    return decide(
        JoinAction.WAIT,
        None,
        first_unresolved_at,
        f"join {condition} pending; children unresolvable since {first_unresolved_at:g} "
        f"({elapsed:g} s of {grace_seconds:g} s grace): {names}",
    )
