"""Every cell of StateKind x Event against an independently written table."""

from __future__ import annotations

import itertools

import pytest

from httk.workflow.domain.lifecycle import (
    ACTIVE_KINDS,
    OWNED_KINDS,
    TERMINAL_KINDS,
    TRANSITIONS,
    Event,
    IllegalTransition,
    StateKind,
    allowed_events,
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

CELLS = list(itertools.product(StateKind, Event))


def test_table_is_exactly_the_expected_one() -> None:
    actual = {(kind.value, event.value): target.value for (kind, event), target in TRANSITIONS.items()}
    assert actual == EXPECTED


@pytest.mark.parametrize(("kind", "event"), CELLS, ids=[f"{k.value}-{e.value}" for k, e in CELLS])
def test_every_cell(kind: StateKind, event: Event) -> None:
    expected = EXPECTED.get((kind.value, event.value))
    if expected is not None:
        assert next_kind(kind, event) == StateKind(expected)
        assert event in allowed_events(kind)
    else:
        with pytest.raises(IllegalTransition) as info:
            next_kind(kind, event)
        message = str(info.value)
        assert repr(kind.value) in message and repr(event.value) in message
        assert info.value.kind == kind and info.value.event == event
        assert event not in allowed_events(kind)


@pytest.mark.parametrize("kind", sorted(TERMINAL_KINDS))
def test_terminal_kinds_accept_only_repair_continue_override(kind: StateKind) -> None:
    allowed = {Event.FSCK_REPAIR}
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
    assert set(ACTIVE_KINDS) | {StateKind.PAUSED} | TERMINAL_KINDS == set(StateKind)
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
                target = next_kind(current, event)
                if target not in reachable:
                    reachable.add(target)
                    frontier.append(target)
        assert reachable & TERMINAL_KINDS, kind
