"""The job state machine: every state kind, every event, one transition table.

A job's kind is the directory its marker lives in. Every change of a job is one
event applied to its current kind; this table is the only place that says which
events are legal where. Spec: 000 "Run", "Inspect and control", "Checking and
repairing"; 001 "What an attempt publishes".
"""

from __future__ import annotations

from enum import StrEnum


class StateKind(StrEnum):
    SUBMITTED = "submitted"
    READY = "ready"
    CLAIMED = "claimed"
    RUNNING = "running"
    COMMITTING = "committing"
    WAITING = "waiting"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Kinds a scheduling pass streams; the terminal trees are never opened by a tick.
ACTIVE_KINDS: tuple[StateKind, ...] = (
    StateKind.SUBMITTED,
    StateKind.READY,
    StateKind.CLAIMED,
    StateKind.RUNNING,
    StateKind.COMMITTING,
    StateKind.WAITING,
    StateKind.CANCELLING,
)
TERMINAL_KINDS: frozenset[StateKind] = frozenset({StateKind.SUCCEEDED, StateKind.FAILED, StateKind.CANCELLED})
#: Kinds in which a manager owns the job under a lease.
OWNED_KINDS: frozenset[StateKind] = frozenset(
    {StateKind.CLAIMED, StateKind.RUNNING, StateKind.COMMITTING, StateKind.CANCELLING}
)


class Event(StrEnum):
    REGISTER = "register"
    CLAIM = "claim"
    LAUNCH = "launch"
    RELEASE_CLAIM = "release_claim"
    LAUNCH_FAILED = "launch_failed"
    PUBLISH = "publish"
    COMMIT_ADVANCE = "commit_advance"
    COMMIT_WAIT = "commit_wait"
    COMMIT_SUCCEED = "commit_succeed"
    COMMIT_FAIL = "commit_fail"
    COMMIT_RETRY = "commit_retry"
    COMMIT_PAUSE = "commit_pause"
    JOIN_NOTE = "join_note"
    JOIN_SATISFIED = "join_satisfied"
    JOIN_IMPOSSIBLE_ADVANCE = "join_impossible_advance"
    JOIN_IMPOSSIBLE_FAIL = "join_impossible_fail"
    JOIN_UNRESOLVABLE = "join_unresolvable"
    OPERATOR_PAUSE = "operator_pause"
    DEFER_PAUSE = "defer_pause"
    OPERATOR_CONTINUE = "operator_continue"
    OPERATOR_RESUME_WAIT = "operator_resume_wait"
    OPERATOR_CANCEL = "operator_cancel"
    CANCEL_VERIFIED = "cancel_verified"
    OPERATOR_OVERRIDE_STEP = "operator_override_step"
    LEASE_RECOVERY = "lease_recovery"
    FSCK_REPAIR = "fsck_repair"


class IllegalTransition(ValueError):
    """An event that the table does not allow from the job's current kind."""

    def __init__(self, kind: StateKind, event: Event) -> None:
        super().__init__(f"illegal transition: event {event.value!r} is not allowed from kind {kind.value!r}")
        self.kind = kind
        self.event = event


S = StateKind
E = Event

#: (kind, event) -> next kind. Absence means illegal.
TRANSITIONS: dict[tuple[StateKind, Event], StateKind] = {
    (S.SUBMITTED, E.REGISTER): S.READY,
    (S.READY, E.CLAIM): S.CLAIMED,
    (S.CLAIMED, E.LAUNCH): S.RUNNING,
    # A claim given back untouched (drain before launch, a transient launch problem).
    (S.CLAIMED, E.RELEASE_CLAIM): S.READY,
    # The runner could not be resolved or verified: a canonical failure, no attempt ran.
    (S.CLAIMED, E.LAUNCH_FAILED): S.FAILED,
    # The attempt ended (outcome published, or exit without one): the commit begins.
    (S.RUNNING, E.PUBLISH): S.COMMITTING,
    (S.COMMITTING, E.COMMIT_ADVANCE): S.READY,
    (S.COMMITTING, E.COMMIT_WAIT): S.WAITING,
    (S.COMMITTING, E.COMMIT_SUCCEED): S.SUCCEEDED,
    (S.COMMITTING, E.COMMIT_FAIL): S.FAILED,
    (S.COMMITTING, E.COMMIT_RETRY): S.READY,
    (S.COMMITTING, E.COMMIT_PAUSE): S.PAUSED,
    (S.WAITING, E.JOIN_NOTE): S.WAITING,
    (S.WAITING, E.JOIN_SATISFIED): S.READY,
    (S.WAITING, E.JOIN_IMPOSSIBLE_ADVANCE): S.READY,
    (S.WAITING, E.JOIN_IMPOSSIBLE_FAIL): S.FAILED,
    (S.WAITING, E.JOIN_UNRESOLVABLE): S.FAILED,
    (S.SUBMITTED, E.OPERATOR_PAUSE): S.PAUSED,
    (S.READY, E.OPERATOR_PAUSE): S.PAUSED,
    (S.WAITING, E.OPERATOR_PAUSE): S.PAUSED,
    # An owned job cannot be paused under its manager: the pause is recorded and
    # takes effect when the attempt commits.
    (S.CLAIMED, E.DEFER_PAUSE): S.CLAIMED,
    (S.RUNNING, E.DEFER_PAUSE): S.RUNNING,
    (S.COMMITTING, E.DEFER_PAUSE): S.COMMITTING,
    (S.PAUSED, E.OPERATOR_CONTINUE): S.READY,
    (S.FAILED, E.OPERATOR_CONTINUE): S.READY,
    # A job paused while waiting resumes its join instead of rerunning the step that spawned it.
    (S.PAUSED, E.OPERATOR_RESUME_WAIT): S.WAITING,
    (S.SUBMITTED, E.OPERATOR_CANCEL): S.CANCELLED,
    (S.READY, E.OPERATOR_CANCEL): S.CANCELLED,
    (S.CLAIMED, E.OPERATOR_CANCEL): S.CANCELLED,
    (S.WAITING, E.OPERATOR_CANCEL): S.CANCELLED,
    (S.PAUSED, E.OPERATOR_CANCEL): S.CANCELLED,
    # A running attempt is fenced first; only a verified exit makes it cancelled.
    (S.RUNNING, E.OPERATOR_CANCEL): S.CANCELLING,
    (S.CANCELLING, E.CANCEL_VERIFIED): S.CANCELLED,
    (S.SUBMITTED, E.OPERATOR_OVERRIDE_STEP): S.READY,
    (S.READY, E.OPERATOR_OVERRIDE_STEP): S.READY,
    (S.PAUSED, E.OPERATOR_OVERRIDE_STEP): S.READY,
    (S.FAILED, E.OPERATOR_OVERRIDE_STEP): S.READY,
    (S.WAITING, E.OPERATOR_OVERRIDE_STEP): S.READY,
    # Lease recovery: a claim never launched goes back; a running attempt taken
    # over becomes a new attempt; a commit or a cancellation is finished by the new owner.
    (S.CLAIMED, E.LEASE_RECOVERY): S.READY,
    (S.RUNNING, E.LEASE_RECOVERY): S.READY,
    (S.COMMITTING, E.LEASE_RECOVERY): S.COMMITTING,
    (S.CANCELLING, E.LEASE_RECOVERY): S.CANCELLING,
}
for _kind in StateKind:
    TRANSITIONS[(_kind, E.FSCK_REPAIR)] = _kind
del _kind


def next_kind(kind: StateKind, event: Event) -> StateKind:
    """The kind a job moves to when ``event`` happens in ``kind``; raises :class:`IllegalTransition`."""
    try:
        return TRANSITIONS[(StateKind(kind), Event(event))]
    except KeyError:
        raise IllegalTransition(StateKind(kind), Event(event)) from None


def allowed_events(kind: StateKind) -> frozenset[Event]:
    """Every event legal from ``kind``."""
    return frozenset(event for (source, event) in TRANSITIONS if source == kind)


def is_terminal(kind: StateKind) -> bool:
    return StateKind(kind) in TERMINAL_KINDS
