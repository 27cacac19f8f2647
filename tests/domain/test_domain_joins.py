"""Join verdicts against a brute-force oracle, and the unresolvable-child grace clock."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from httk.workflow.domain.joins import (
    ACTION_EVENTS,
    JoinAction,
    JoinDecision,
    JoinVerdict,
    classify,
    resolve_join,
)
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.domain.model import JoinSpec, ValidationError

VALUES: list[StateKind | None] = [*StateKind, None]
FINISHED = {StateKind.SUCCEEDED: True, StateKind.FAILED: False, StateKind.CANCELLED: False}


def _predicate(when: str, outcomes: Sequence[bool], count: int | None) -> bool:
    if when == "all_succeeded":
        return all(outcomes)
    if when == "any_succeeded":
        return any(outcomes)
    assert when == "at_least" and count is not None
    return sum(outcomes) >= count


def oracle(when: str, kinds: Sequence[StateKind | None], count: int | None) -> JoinVerdict:
    """Enumerate every way the open children could still end and ask the condition of each."""
    if when == "all_terminal":
        return JoinVerdict.SATISFIED if all(kind in FINISHED for kind in kinds) else JoinVerdict.PENDING
    choices = [[FINISHED[kind]] if kind in FINISHED else [True, False] for kind in kinds]
    results = {_predicate(when, outcome, count) for outcome in itertools.product(*choices)}
    if results == {True}:
        return JoinVerdict.SATISFIED
    if results == {False}:
        return JoinVerdict.IMPOSSIBLE
    return JoinVerdict.PENDING


def _mixes(max_children: int) -> list[tuple[StateKind | None, ...]]:
    return [mix for n in range(max_children + 1) for mix in itertools.product(VALUES, repeat=n)]


MIXES = _mixes(4)
CONDITIONS: list[tuple[str, int | None]] = [
    ("all_succeeded", None),
    ("all_terminal", None),
    ("any_succeeded", None),
    *[("at_least", n) for n in range(1, 6)],
]


@pytest.mark.parametrize(("when", "count"), CONDITIONS, ids=[f"{w}-{c}" for w, c in CONDITIONS])
def test_every_mix_matches_the_oracle(when: str, count: int | None) -> None:
    for mix in MIXES:
        assert classify(when, mix, count) == oracle(when, mix, count), (when, count, mix)


@pytest.mark.parametrize(
    ("when", "count", "expected"),
    [
        ("all_succeeded", None, JoinVerdict.SATISFIED),
        ("all_terminal", None, JoinVerdict.SATISFIED),
        ("any_succeeded", None, JoinVerdict.IMPOSSIBLE),
        ("at_least", 1, JoinVerdict.IMPOSSIBLE),
    ],
)
def test_no_children(when: str, count: int | None, expected: JoinVerdict) -> None:
    assert classify(when, [], count) == expected


def test_all_terminal_is_never_impossible() -> None:
    assert all(classify("all_terminal", mix) != JoinVerdict.IMPOSSIBLE for mix in MIXES)


def test_failed_and_cancelled_are_alike() -> None:
    for when, count in CONDITIONS:
        for mix in _mixes(3):
            swapped = tuple(StateKind.CANCELLED if k == StateKind.FAILED else k for k in mix)
            assert classify(when, mix, count) == classify(when, swapped, count)


@pytest.mark.parametrize(
    ("when", "count"),
    [("bogus", None), ("at_least", None), ("at_least", 0), ("at_least", True), ("all_succeeded", 2)],
)
def test_bad_conditions_are_refused(when: str, count: int | None) -> None:
    with pytest.raises(ValidationError):
        classify(when, [StateKind.SUCCEEDED], count)


# --- resolve_join -------------------------------------------------------------------------------

GRACE = 3600.0


def _join(
    when: str = "all_succeeded", count: int | None = None, on_impossible: str | None = None
) -> JoinSpec:
    children = (("a", "a--k"), ("b", "b--k"), ("c", "c--k"))
    return JoinSpec(step="gather", when=when, count=count, on_impossible=on_impossible, children=children)


def _resolve(
    kinds: dict[str, StateKind | None],
    first: float | None = None,
    now: float = 10_000.0,
    join: JoinSpec | None = None,
) -> JoinDecision:
    return resolve_join(join or _join(), kinds, first_unresolved_at=first, now=now, grace_seconds=GRACE)


S, F, R = StateKind.SUCCEEDED, StateKind.FAILED, StateKind.RUNNING


def test_satisfied_advances_to_the_join_step() -> None:
    d = _resolve({"a": S, "b": S, "c": S})
    assert (d.action, d.verdict, d.next_step, d.event) == (
        JoinAction.SATISFIED,
        JoinVerdict.SATISFIED,
        "gather",
        Event.JOIN_SATISFIED,
    )
    assert d.blocking == () and d.unresolved == ()


def test_satisfied_wins_over_an_unresolved_child() -> None:
    d = _resolve({"a": S, "b": None, "c": R}, join=_join("any_succeeded"))
    assert d.action == JoinAction.SATISFIED
    assert d.blocking == ("c",) and d.unresolved == ("b",)


def test_impossible_with_on_impossible_advances_there() -> None:
    d = _resolve({"a": F, "b": None, "c": R}, join=_join(on_impossible="salvage"))
    assert (d.action, d.next_step, d.event) == (
        JoinAction.IMPOSSIBLE_ADVANCE,
        "salvage",
        Event.JOIN_IMPOSSIBLE_ADVANCE,
    )


def test_impossible_without_on_impossible_fails() -> None:
    d = _resolve({"a": F, "b": S, "c": S})
    assert (d.action, d.next_step, d.event) == (JoinAction.IMPOSSIBLE_FAIL, None, Event.JOIN_IMPOSSIBLE_FAIL)
    assert "no on_impossible" in d.reason


@pytest.mark.parametrize(
    ("first", "now", "action", "clock"),
    [
        (None, 500.0, JoinAction.NOTE_UNRESOLVED, 500.0),  # first sighting: start the clock now
        (100.0, 100.0, JoinAction.WAIT, 100.0),
        (100.0, 100.0 + GRACE - 0.001, JoinAction.WAIT, 100.0),  # just inside the grace
        (100.0, 100.0 + GRACE, JoinAction.UNRESOLVABLE_FAIL, 100.0),  # exactly at the grace
        (100.0, 100.0 + GRACE * 5, JoinAction.UNRESOLVABLE_FAIL, 100.0),
        (500.0, 100.0, JoinAction.WAIT, 500.0),  # another manager's clock runs behind
    ],
)
def test_grace_clock(first: float | None, now: float, action: JoinAction, clock: float) -> None:
    d = _resolve({"a": S, "b": None, "c": R}, first=first, now=now)
    assert d.verdict == JoinVerdict.PENDING
    assert (d.action, d.first_unresolved_at) == (action, clock)
    assert d.unresolved == ("b",) and d.blocking == ("c",)
    assert d.event == ACTION_EVENTS[action]


def test_a_child_that_resolves_again_clears_the_clock() -> None:
    d = _resolve({"a": S, "b": R, "c": R}, first=100.0, now=100.0 + GRACE * 2)
    assert (d.action, d.first_unresolved_at, d.event) == (JoinAction.WAIT, None, None)
    assert d.blocking == ("b", "c")


def test_a_declared_child_missing_from_the_observation_is_unresolved() -> None:
    d = _resolve({"a": S, "c": R})
    assert d.action == JoinAction.NOTE_UNRESOLVED and d.unresolved == ("b",)


def test_an_undeclared_observed_child_still_counts() -> None:
    join = JoinSpec(step="gather", when="all_terminal")
    assert _resolve({"x": R}, join=join).action == JoinAction.WAIT
    assert _resolve({"x": F}, join=join).action == JoinAction.SATISFIED


def test_zero_grace_fails_on_the_tick_after_the_note() -> None:
    kinds = {"a": None}
    join = JoinSpec(step="s", children=(("a", "k"),))
    first = resolve_join(join, kinds, first_unresolved_at=None, now=7.0, grace_seconds=0)
    assert first.action == JoinAction.NOTE_UNRESOLVED
    again = resolve_join(join, kinds, first_unresolved_at=first.first_unresolved_at, now=7.0, grace_seconds=0)
    assert again.action == JoinAction.UNRESOLVABLE_FAIL


def test_negative_grace_is_refused() -> None:
    with pytest.raises(ValueError):
        resolve_join(_join(), {}, first_unresolved_at=None, now=0.0, grace_seconds=-1)


def test_every_action_maps_to_a_waiting_event() -> None:
    assert set(ACTION_EVENTS) == set(JoinAction)
    assert ACTION_EVENTS[JoinAction.WAIT] is None


kind_values = st.sampled_from(VALUES)


@given(
    kinds=st.tuples(kind_values, kind_values, kind_values),
    first=st.one_of(st.none(), st.floats(0, 1e6)),
    now=st.floats(0, 1e6),
    when=st.sampled_from(["all_succeeded", "all_terminal", "any_succeeded", "at_least"]),
    on_impossible=st.one_of(st.none(), st.just("salvage")),
)
def test_resolve_is_consistent_with_classify(
    kinds: tuple[StateKind | None, ...],
    first: float | None,
    now: float,
    when: str,
    on_impossible: str | None,
) -> None:
    join = _join(when, 2 if when == "at_least" else None, on_impossible)
    observed = dict(zip("abc", kinds, strict=True))
    d = resolve_join(join, observed, first_unresolved_at=first, now=now, grace_seconds=GRACE)
    verdict = classify(when, kinds, join.count)
    assert d.verdict == verdict
    if verdict == JoinVerdict.SATISFIED:
        assert d.action == JoinAction.SATISFIED and d.next_step == "gather"
    elif verdict == JoinVerdict.IMPOSSIBLE:
        assert d.action == (JoinAction.IMPOSSIBLE_ADVANCE if on_impossible else JoinAction.IMPOSSIBLE_FAIL)
    elif None not in kinds:
        assert d.action == JoinAction.WAIT and d.first_unresolved_at is None
    else:
        assert d.action in {JoinAction.NOTE_UNRESOLVED, JoinAction.WAIT, JoinAction.UNRESOLVABLE_FAIL}
        assert d.first_unresolved_at is not None
    assert set(d.blocking).isdisjoint(d.unresolved)
    assert d.reason
