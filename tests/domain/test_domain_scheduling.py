"""Claim filters, prefix pruning, best-within-window order, and slow-pass levels."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from httk.workflow.domain.scheduling import (
    Candidate,
    Mismatch,
    Offer,
    Requirements,
    best_within_window,
    may_contain_matches,
    mismatches,
    pass_duration_level,
    placement_matches,
)


@pytest.mark.parametrize(
    ("placement", "prefixes", "expected"),
    [
        ("project-a", ["project-a"], True),
        ("project-a/x", ["project-a"], True),
        ("project-a/x/y", ["project-a/x"], True),
        ("project-ab", ["project-a"], False),
        ("project-ab/x", ["project-a"], False),
        ("project-a", ["project-a/x"], False),
        ("project-b/2026/01", ["project-a", "project-b/2026"], True),
        ("project-b/2025/01", ["project-a", "project-b/2026"], False),
        ("anything/at/all", [], True),
        ("anything", [""], True),
        ("project-a/x", ["/project-a/"], True),
        ("project-a//x", ["project-a/x"], True),
    ],
)
def test_placement_matches(placement: str, prefixes: list[str], expected: bool) -> None:
    assert placement_matches(placement, prefixes) is expected


@pytest.mark.parametrize(
    ("directory", "prefixes", "expected"),
    [
        ("project-b", ["project-b/2026"], True),
        ("project-b/2026/x", ["project-b/2026"], True),
        ("project-b/2025", ["project-b/2026"], False),
        ("project-c", ["project-b/2026"], False),
        ("", ["project-b/2026"], True),
        ("whatever", [], True),
    ],
)
def test_may_contain_matches(directory: str, prefixes: list[str], expected: bool) -> None:
    assert may_contain_matches(directory, prefixes) is expected


segment = st.sampled_from(["a", "ab", "b", "a.b", "x-1"])
paths = st.lists(segment, min_size=1, max_size=4).map("/".join)


@given(paths, st.lists(paths, max_size=3))
def test_a_matching_placement_is_always_reached_by_the_walk(placement: str, prefixes: list[str]) -> None:
    if placement_matches(placement, prefixes):
        parts = placement.split("/")
        assert all(may_contain_matches("/".join(parts[:i]), prefixes) for i in range(len(parts) + 1))


@given(paths, st.lists(paths, max_size=3))
def test_matching_is_component_prefix(placement: str, prefixes: list[str]) -> None:
    expected = not prefixes or any(
        placement == prefix or placement.startswith(prefix + "/") for prefix in prefixes
    )
    assert placement_matches(placement, prefixes) is expected


OFFER = Offer(
    pools=frozenset({"default", "vasp"}),
    capabilities=frozenset({"gpu"}),
    executors=frozenset({"path"}),
)


def _req(**overrides: object) -> Requirements:
    values: dict[str, object] = {
        "pool": "default",
        "capabilities": frozenset(),
        "executor": "path",
        "placement": "project-a/00/17",
    }
    values.update(overrides)
    return Requirements(**values)  # type: ignore[arg-type]


def test_claimable() -> None:
    assert mismatches(OFFER, _req(pool="vasp", capabilities={"gpu"})) == ()


def test_every_mismatch_in_a_stable_order() -> None:
    offer = Offer(pools={"default"}, capabilities=set(), executors={"path"}, placement_prefixes=["project-b"])
    req = _req(pool="vasp", capabilities={"mpi", "gpu"}, executor="python", placement="project-a/00/17")
    found = mismatches(offer, req)
    assert [(m.kind, m.value) for m in found] == [
        ("executor", "python"),
        ("pool", "vasp"),
        ("capability", "gpu"),
        ("capability", "mpi"),
        ("placement_prefix", "project-a/00/17"),
    ]
    assert all(isinstance(m, Mismatch) for m in found)
    advice = [m.advice for m in found]
    assert "'python' executor" in advice[0]
    assert "--pool vasp" in advice[1]
    assert "--capability gpu" in advice[2] and "--capability mpi" in advice[3]
    assert "--placement-prefix project-a" in advice[4] and "drop" in advice[4]


def test_offer_and_requirements_convert_collections() -> None:
    offer = Offer(pools=["a"], capabilities=[], executors=("path",), placement_prefixes=["p"])  # type: ignore[arg-type]
    assert offer.pools == frozenset({"a"}) and offer.placement_prefixes == ("p",)
    assert isinstance(hash(offer), int)


def test_best_within_window() -> None:
    cands = [
        Candidate(5, "k3", item="low-late"),
        Candidate(9, "k2", item="high"),
        Candidate(5, "k1", item="low-early"),
        Candidate(7, "k9", item="mid"),
    ]
    assert [c.item for c in best_within_window(cands, 3)] == ["high", "mid", "low-early"]
    assert [c.item for c in best_within_window(cands, 10)] == ["high", "mid", "low-early", "low-late"]
    assert best_within_window(cands, 0) == [] and best_within_window(cands, -1) == []
    assert best_within_window(iter(cands), 1)[0].item == "high"


def test_item_is_not_part_of_equality() -> None:
    assert Candidate(1, "k", item=object()) == Candidate(1, "k", item=object())


candidates = st.lists(
    st.builds(Candidate, st.integers(0, 5), st.sampled_from(["a", "b", "c", "d"]), st.integers()), max_size=20
)


@given(candidates, st.integers(0, 25))
def test_window_is_a_stable_sort_prefix(cands: list[Candidate], slots: int) -> None:
    chosen = best_within_window(cands, slots)
    expected = sorted(cands, key=lambda c: (-c.priority, c.order_key))[:slots]
    assert [c.item for c in chosen] == [c.item for c in expected]


@pytest.mark.parametrize(
    ("duration", "expected"),
    [(0.0, None), (29.99, None), (30.0, "warning"), (53.99, "warning"), (54.0, "error"), (600.0, "error")],
)
def test_pass_duration_level(duration: float, expected: str | None) -> None:
    assert pass_duration_level(duration, 60.0) == expected


def test_pass_duration_level_needs_a_lease() -> None:
    with pytest.raises(ValueError):
        pass_duration_level(1.0, 0.0)
