"""The job state machine: every state kind, every event, one transition table.

A job's kind is the directory its marker lives in. Every change of a job is one
event applied to its current kind; this table is the only place that says which
events are legal where. Spec: 000 "Run", "Inspect and control", "Checking and
repairing", "Running on a remote" (transfer); 001 "What an attempt publishes".

A transfer moves a job between workspaces through its own kind, ``transferring``:
``transfer_detach`` takes a quiescent job out of the scheduling trees, and the job
leaves ``transferring`` by going back to the kind it had (``transfer_rollback`` at
the source, ``transfer_import`` at the destination) or by leaving the workspace
(``transfer_retire``, whose frame is the last the source writes; the marker then
leaves the state tree).
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
    TRANSFERRING = "transferring"


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
#: The same kinds as they are spelled in documents (a child's terminal note, ``kind``).
TERMINAL_NAMES: frozenset[str] = frozenset(kind.value for kind in TERMINAL_KINDS)
#: Kinds in which a manager owns the job under a lease.
OWNED_KINDS: frozenset[StateKind] = frozenset(
    {StateKind.CLAIMED, StateKind.RUNNING, StateKind.COMMITTING, StateKind.CANCELLING}
)
#: Quiescent kinds: nothing owns the job, so a transfer may detach it (a waiting job only together
#: with its children). Everything else is owned by a manager or already transferring.
TRANSFERABLE_KINDS: frozenset[StateKind] = frozenset(
    {
        StateKind.SUBMITTED,
        StateKind.READY,
        StateKind.WAITING,
        StateKind.PAUSED,
        StateKind.SUCCEEDED,
        StateKind.FAILED,
        StateKind.CANCELLED,
    }
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
    DRAIN_RELEASE = "drain_release"
    DRAIN_PAUSE = "drain_pause"
    FSCK_REPAIR = "fsck_repair"
    TRANSFER_DETACH = "transfer_detach"
    TRANSFER_ROLLBACK = "transfer_rollback"
    TRANSFER_IMPORT = "transfer_import"
    TRANSFER_RETIRE = "transfer_retire"


#: Events that take a transferring job back to the kind it was detached from (recorded in the
#: detach frame), so their target is not one fixed kind of the table.
RETURN_EVENTS: frozenset[Event] = frozenset({Event.TRANSFER_ROLLBACK, Event.TRANSFER_IMPORT})
#: Events after whose frame the marker leaves the workspace's state tree instead of being renamed
#: within it: the job now lives in another workspace.
LEAVING_EVENTS: frozenset[Event] = frozenset({Event.TRANSFER_RETIRE})


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
    # An attempt its own manager terminated while draining (walltime), verified gone and without
    # an outcome, is not the job's doing: the job is given back uncharged, or paused when a pause
    # was deferred to that attempt's commit.
    (S.RUNNING, E.DRAIN_RELEASE): S.READY,
    (S.RUNNING, E.DRAIN_PAUSE): S.PAUSED,
}
for _kind in StateKind:
    TRANSITIONS[(_kind, E.FSCK_REPAIR)] = _kind
for _kind in TRANSFERABLE_KINDS:
    TRANSITIONS[(_kind, E.TRANSFER_DETACH)] = S.TRANSFERRING
del _kind
# The retire frame keeps the kind; the marker naming it then leaves the state tree (LEAVING_EVENTS).
TRANSITIONS[(S.TRANSFERRING, E.TRANSFER_RETIRE)] = S.TRANSFERRING

#: Terminal kinds that no event of the table leaves, except to travel (a transfer returns the job to
#: the same kind): no attempt of such a job ever starts again, wherever it goes. A failed job is
#: not one (an operator ``continue`` makes it ready).
FINAL_KINDS: frozenset[StateKind] = frozenset(
    kind for kind in TERMINAL_KINDS
    if all(target in (kind, S.TRANSFERRING) for (source, _event), target in TRANSITIONS.items() if source == kind)
)


def next_kind(kind: StateKind, event: Event, *, origin: StateKind | None = None) -> StateKind:
    """The kind a job moves to when ``event`` happens in ``kind``; raises :class:`IllegalTransition`.

    A return event (:data:`RETURN_EVENTS`) from ``transferring`` goes to ``origin``, the
    kind the job was detached from, which must be a transferable kind.
    """
    kind, event = StateKind(kind), Event(event)
    try:
        return TRANSITIONS[(kind, event)]
    except KeyError:
        pass
    if kind == S.TRANSFERRING and event in RETURN_EVENTS and origin is not None:
        if StateKind(origin) in TRANSFERABLE_KINDS:
            return StateKind(origin)
    raise IllegalTransition(kind, event) from None


def allowed_events(kind: StateKind) -> frozenset[Event]:
    """Every event legal from ``kind`` (a return event needs the recorded origin as well)."""
    events = {event for (source, event) in TRANSITIONS if source == kind}
    if StateKind(kind) == S.TRANSFERRING:
        events |= RETURN_EVENTS
    return frozenset(events)


def drain_release_event(pause_requested: bool) -> Event:
    """The event that gives back a job whose attempt a draining manager stopped.

    A pause deferred to the attempt's commit takes effect now, since that commit never comes.
    """
    return Event.DRAIN_PAUSE if pause_requested else Event.DRAIN_RELEASE


def is_terminal(kind: StateKind) -> bool:
    return StateKind(kind) in TERMINAL_KINDS
