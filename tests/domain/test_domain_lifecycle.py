"""Every cell of StateKind x Event against an independently written table."""

from __future__ import annotations

import itertools

import pytest

from httk.workflow.domain.lifecycle import (
    ACTIVE_KINDS,
    FINAL_KINDS,
    LEAVING_EVENTS,
    OWNED_KINDS,
    RETURN_EVENTS,
    TERMINAL_KINDS,
    TRANSFERABLE_KINDS,
    TRANSITIONS,
    Event,
    IllegalTransition,
    StateKind,
    allowed_events,
    drain_release_event,
    is_terminal,
    next_kind,
)

# Written out from the spec, not copied from the module: (kind, event) -> next kind.
EXPECTED: dict[tuple[str, str], str] = {
    ("submitted", "register"): "ready",
    ("submitted", "operator_pause"): "paused",
    ("submitted", "operator_cancel"): "cancelled",
    ("submitted", "operator_override_step"): "ready",
    ("ready", "claim"): "claimed",
    ("ready", "operator_pause"): "paused",
    ("ready", "operator_cancel"): "cancelled",
    ("ready", "operator_override_step"): "ready",
    ("claimed", "launch"): "running",
    ("claimed", "release_claim"): "ready",
    ("claimed", "launch_failed"): "failed",
    ("claimed", "defer_pause"): "claimed",
    ("claimed", "operator_cancel"): "cancelled",
    ("claimed", "lease_recovery"): "ready",
    ("running", "publish"): "committing",
    ("running", "defer_pause"): "running",
    ("running", "operator_cancel"): "cancelling",
    ("running", "lease_recovery"): "ready",
    ("running", "drain_release"): "ready",
    ("running", "drain_pause"): "paused",
    ("committing", "commit_advance"): "ready",
    ("committing", "commit_wait"): "waiting",
    ("committing", "commit_succeed"): "succeeded",
    ("committing", "commit_fail"): "failed",
    ("committing", "commit_retry"): "ready",
    ("committing", "commit_pause"): "paused",
    ("committing", "defer_pause"): "committing",
    ("committing", "lease_recovery"): "committing",
    ("waiting", "join_note"): "waiting",
    ("waiting", "join_satisfied"): "ready",
    ("waiting", "join_impossible_advance"): "ready",
    ("waiting", "join_impossible_fail"): "failed",
    ("waiting", "join_unresolvable"): "failed",
    ("waiting", "operator_pause"): "paused",
    ("waiting", "operator_cancel"): "cancelled",
    ("waiting", "operator_override_step"): "ready",
    ("paused", "operator_continue"): "ready",
    ("paused", "operator_resume_wait"): "waiting",
    ("paused", "operator_cancel"): "cancelled",
    ("paused", "operator_override_step"): "ready",
    ("cancelling", "cancel_verified"): "cancelled",
    ("cancelling", "lease_recovery"): "cancelling",
    ("failed", "operator_continue"): "ready",
    ("failed", "operator_override_step"): "ready",
}
for _kind in StateKind:
    EXPECTED[(_kind.value, "fsck_repair")] = _kind.value
# A transfer detaches only quiescent jobs: nothing owns them and they are not already transferring.
QUIESCENT = ("submitted", "ready", "waiting", "paused", "succeeded", "failed", "cancelled")
for _name in QUIESCENT:
    EXPECTED[(_name, "transfer_detach")] = "transferring"
EXPECTED[("transferring", "transfer_retire")] = "transferring"  # the last frame; then the marker leaves
#: Cells whose target is the kind recorded at detach rather than a fixed kind.
RETURNS = {("transferring", "transfer_rollback"), ("transferring", "transfer_import")}

CELLS = list(itertools.product(StateKind, Event))


def test_table_is_exactly_the_expected_one() -> None:
    actual = {(kind.value, event.value): target.value for (kind, event), target in TRANSITIONS.items()}
    assert actual == EXPECTED


@pytest.mark.parametrize(("kind", "event"), CELLS, ids=[f"{k.value}-{e.value}" for k, e in CELLS])
def test_every_cell(kind: StateKind, event: Event) -> None:
    expected = EXPECTED.get((kind.value, event.value))
    if (kind.value, event.value) in RETURNS:
        for origin in StateKind:
            if origin.value in QUIESCENT:
                assert next_kind(kind, event, origin=origin) == origin
            else:
                with pytest.raises(IllegalTransition):
                    next_kind(kind, event, origin=origin)
        with pytest.raises(IllegalTransition):
            next_kind(kind, event)  # without the recorded origin there is no target
        assert event in allowed_events(kind)
    elif expected is not None:
        assert next_kind(kind, event) == StateKind(expected)
        assert event in allowed_events(kind)
    else:
        with pytest.raises(IllegalTransition) as info:
            next_kind(kind, event)
        message = str(info.value)
        assert repr(kind.value) in message and repr(event.value) in message
        assert info.value.kind == kind and info.value.event == event
        assert event not in allowed_events(kind)
        # A return event is refused from every other kind whatever origin is named.
        with pytest.raises(IllegalTransition):
            next_kind(kind, event, origin=StateKind.READY)


@pytest.mark.parametrize("kind", sorted(TERMINAL_KINDS))
def test_terminal_kinds_accept_only_repair_continue_override(kind: StateKind) -> None:
    allowed = {Event.FSCK_REPAIR, Event.TRANSFER_DETACH}
    if kind == StateKind.FAILED:
        allowed |= {Event.OPERATOR_CONTINUE, Event.OPERATOR_OVERRIDE_STEP}
    assert allowed_events(kind) == allowed


def test_strings_are_accepted() -> None:
    assert next_kind("ready", "claim") == StateKind.CLAIMED  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition):
        next_kind("succeeded", "claim")  # type: ignore[arg-type]


def test_illegal_transition_is_a_value_error() -> None:
    assert issubclass(IllegalTransition, ValueError)


def test_kind_groups() -> None:
    assert set(ACTIVE_KINDS) | {StateKind.PAUSED, StateKind.TRANSFERRING} | TERMINAL_KINDS == set(StateKind)
    # Managers never scan a transferring job, and a transfer never detaches an owned one.
    assert StateKind.TRANSFERRING not in ACTIVE_KINDS
    assert {kind.value for kind in TRANSFERABLE_KINDS} == set(QUIESCENT)
    assert not TRANSFERABLE_KINDS & OWNED_KINDS
    assert RETURN_EVENTS == {Event.TRANSFER_ROLLBACK, Event.TRANSFER_IMPORT}
    assert LEAVING_EVENTS == {Event.TRANSFER_RETIRE}
    assert not set(ACTIVE_KINDS) & TERMINAL_KINDS
    assert StateKind.PAUSED not in ACTIVE_KINDS
    assert OWNED_KINDS <= set(ACTIVE_KINDS)
    for kind in StateKind:
        assert is_terminal(kind) == (kind in TERMINAL_KINDS)


def test_every_non_terminal_kind_can_reach_a_terminal_kind() -> None:
    # Every job that is not finished has some route to a terminal kind.
    for kind in set(StateKind) - TERMINAL_KINDS:
        reachable = {kind}
        frontier = [kind]
        while frontier:
            current = frontier.pop()
            for event in allowed_events(current):
                # A return event goes back to whichever quiescent kind the job was detached from.
                origins = TRANSFERABLE_KINDS if event in RETURN_EVENTS else (None,)
                for origin in origins:
                    target = next_kind(current, event, origin=origin)
                    if target not in reachable:
                        reachable.add(target)
                        frontier.append(target)
        assert reachable & TERMINAL_KINDS, kind


def test_a_drained_attempt_goes_back_to_ready_or_to_a_deferred_pause() -> None:
    # Only a running attempt can be stopped by its manager's drain; its commit never comes,
    # so a pause deferred to that commit takes effect now.
    assert drain_release_event(False) == Event.DRAIN_RELEASE
    assert drain_release_event(True) == Event.DRAIN_PAUSE
    assert next_kind(StateKind.RUNNING, drain_release_event(False)) == StateKind.READY
    assert next_kind(StateKind.RUNNING, drain_release_event(True)) == StateKind.PAUSED
    for kind in set(StateKind) - {StateKind.RUNNING}:
        assert not {Event.DRAIN_RELEASE, Event.DRAIN_PAUSE} & allowed_events(kind), kind


def test_final_kinds_are_succeeded_and_cancelled_never_failed() -> None:
    # Nothing leaves them but a transfer (which returns the job to the same kind): no attempt starts again.
    assert FINAL_KINDS == {StateKind.SUCCEEDED, StateKind.CANCELLED}
    assert next_kind(StateKind.FAILED, Event.OPERATOR_CONTINUE) == StateKind.READY
    for kind in FINAL_KINDS:
        assert allowed_events(kind) == {Event.FSCK_REPAIR, Event.TRANSFER_DETACH}, kind
