"""Every row of the takeover table, and the safety properties it protects."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.takeover import (
    TakeoverAction,
    TakeoverObservation,
    TakeoverVerdict,
    decide_takeover,
)

LEASE = 60.0
HOST, OTHER = "node-a", "node-b"


def _obs(**overrides: Any) -> TakeoverObservation:
    values: dict[str, Any] = {
        "kind": StateKind.RUNNING,
        "workdir_mode": "persistent",
        "recorded_host": HOST,
        "this_host": HOST,
        "process_alive": None,
        "outcome_published": False,
        "heartbeat_age": 90.0,
        "lease_seconds": LEASE,
    }
    values.update(overrides)
    return TakeoverObservation(**values)


FAR = {"recorded_host": OTHER}
ISO = {"workdir_mode": "isolated", "recorded_host": OTHER}
CLAIMED, COMMITTING, CANCELLING = StateKind.CLAIMED, StateKind.COMMITTING, StateKind.CANCELLING

# id, observation overrides, "action rule log_level"
# fmt: off
ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("live-running", {"heartbeat_age": 10.0}, "leave lease_live debug"),
    ("live-exactly-at-lease", {"heartbeat_age": LEASE}, "leave lease_live debug"),
    ("live-claimed", {"kind": CLAIMED, "heartbeat_age": 1.0}, "leave lease_live debug"),
    ("live-committing", {"kind": COMMITTING, "heartbeat_age": 1.0}, "leave lease_live debug"),
    ("live-unsafe", {"heartbeat_age": 1.0, "unsafe_persistent": True, "unsafe_isolated": True},
     "leave lease_live debug"),
    ("claim-expired", {"kind": CLAIMED}, "release claim_expired info"),
    ("claim-expired-other-host", {"kind": CLAIMED, **FAR}, "release claim_expired info"),
    ("committing", {"kind": COMMITTING, **FAR}, "finish owner_expired info"),
    ("cancelling", {"kind": CANCELLING}, "finish owner_expired info"),
    ("cancelling-other-host", {"kind": CANCELLING, **FAR}, "leave cancel_other_host warning"),
    ("cancelling-never-launched", {"kind": CANCELLING, "process_recorded": False, **FAR},
     "finish owner_expired info"),
    # An outcome is committed once nothing of its attempt runs: a live group here is stopped first.
    ("published", {"outcome_published": True, "process_alive": False}, "finish outcome_published info"),
    ("published-alive", {"outcome_published": True, "process_alive": True},
     "stop_then_finish outcome_published_stop info"),
    ("published-alive-isolated", {"outcome_published": True, "process_alive": True, "workdir_mode": "isolated"},
     "stop_then_finish outcome_published_stop info"),
    ("published-other-host", {"outcome_published": True, **FAR}, "leave persistent_other_host info"),
    ("published-alive-other-host", {"outcome_published": True, "process_alive": True, **FAR},
     "leave persistent_other_host info"),
    ("published-no-identity", {"outcome_published": True}, "leave persistent_other_host info"),
    ("published-other-host-unsafe", {"outcome_published": True, "unsafe_persistent": True, **FAR},
     "finish unsafe_persistent_takeover warning"),
    ("published-other-host-isolated", {"outcome_published": True, **ISO}, "finish outcome_published info"),
    ("gone-persistent", {"process_alive": False}, "relaunch process_gone info"),
    ("gone-isolated", {"process_alive": False, "workdir_mode": "isolated"}, "relaunch process_gone info"),
    ("alive-persistent", {"process_alive": True}, "adopt process_alive info"),
    ("alive-isolated-in-grace", {"process_alive": True, "workdir_mode": "isolated", "heartbeat_age": 119.9},
     "adopt process_alive info"),
    # The isolated row of the spec table: silence for the grace admits a second attempt, live process or not.
    ("alive-isolated-past-grace", {"process_alive": True, "workdir_mode": "isolated", "heartbeat_age": 120.0},
     "relaunch heartbeat_silent info"),
    ("alive-isolated-unsafe", {"process_alive": True, "workdir_mode": "isolated", "unsafe_isolated": True},
     "relaunch unsafe_isolated_takeover warning"),
    ("alive-beats-unsafe", {"process_alive": True, "unsafe_persistent": True}, "adopt process_alive info"),
    # A liveness answer about another host's pid proves nothing here.
    ("gone-from-other-host", {"process_alive": False, **FAR}, "leave persistent_other_host info"),
    ("alive-from-other-host", {"process_alive": True, **FAR}, "leave persistent_other_host info"),
    ("persistent-other-host", {"heartbeat_age": 1e6, **FAR}, "leave persistent_other_host info"),
    ("persistent-no-identity", {}, "leave persistent_other_host info"),
    ("persistent-unsafe", {"unsafe_persistent": True, **FAR}, "relaunch unsafe_persistent_takeover warning"),
    ("persistent-ignores-isolated-flag", {"unsafe_isolated": True, **FAR},
     "leave persistent_other_host info"),
    ("isolated-in-grace", {"heartbeat_age": 119.9, **ISO}, "leave isolated_grace info"),
    ("isolated-gone-from-other-host", {"process_alive": False, **ISO}, "leave isolated_grace info"),
    ("isolated-at-grace", {"heartbeat_age": 120.0, **ISO}, "relaunch heartbeat_silent info"),
    ("isolated-custom-grace", {"heartbeat_age": 90.0, "grace_factor": 1.5, **ISO},
     "relaunch heartbeat_silent info"),
    ("isolated-unsafe", {"unsafe_isolated": True, **ISO}, "relaunch unsafe_isolated_takeover warning"),
    ("isolated-ignores-persistent-flag", {"unsafe_persistent": True, **ISO}, "leave isolated_grace info"),
]
# fmt: on


@pytest.mark.parametrize(("overrides", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_row(overrides: dict[str, Any], expected: str) -> None:
    action, rule, level = expected.split()
    obs = _obs(**overrides)
    verdict = decide_takeover(obs)
    assert (verdict.action, verdict.rule, verdict.log_level) == (action, rule, level)
    assert verdict.takes_over is (action != "leave")
    evidence = verdict.evidence
    assert evidence["rule"] == rule
    for name in (
        "heartbeat_age",
        "lease_seconds",
        "grace_factor",
        "recorded_host",
        "this_host",
        "process_alive",
        "unsafe_persistent",
        "unsafe_isolated",
        "workdir_mode",
    ):
        assert evidence[name] == getattr(obs, name)
    assert verdict.message and "\n" not in verdict.message


def test_other_host_message_names_the_host_and_both_remedies() -> None:
    verdict = decide_takeover(_obs(recorded_host=OTHER))
    assert OTHER in verdict.message
    assert "run a manager on" in verdict.message and "--unsafe-persistent-takeover" in verdict.message


def test_isolated_grace_says_when_it_ends() -> None:
    verdict = decide_takeover(_obs(workdir_mode="isolated", recorded_host=OTHER, heartbeat_age=100.0))
    assert "relaunching in 20 s" in verdict.message
    assert verdict.evidence["grace_remaining"] == pytest.approx(20.0)
    assert verdict.evidence["grace_seconds"] == pytest.approx(120.0)


def test_verdicts_are_hashable_values() -> None:
    verdict = decide_takeover(_obs())
    assert isinstance(hash(verdict), int)
    assert verdict == decide_takeover(_obs())
    assert isinstance(verdict, TakeoverVerdict)


@pytest.mark.parametrize(
    "overrides",
    [
        {"kind": StateKind.READY},
        {"kind": StateKind.FAILED},
        {"workdir_mode": "shared"},
        {"lease_seconds": 0.0},
        {"grace_factor": 0.0},
    ],
)
def test_observations_refuse_nonsense(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _obs(**overrides)


def test_kind_accepts_its_string() -> None:
    assert _obs(kind="cancelling").kind is StateKind.CANCELLING


observations = st.builds(
    TakeoverObservation,
    kind=st.sampled_from([StateKind.CLAIMED, StateKind.RUNNING, StateKind.COMMITTING, StateKind.CANCELLING]),
    workdir_mode=st.sampled_from(["persistent", "isolated"]),
    recorded_host=st.sampled_from([HOST, OTHER]),
    this_host=st.just(HOST),
    process_alive=st.one_of(st.none(), st.booleans()),
    outcome_published=st.booleans(),
    heartbeat_age=st.floats(-10, 1000),
    lease_seconds=st.floats(1, 300),
    grace_factor=st.floats(1, 5),
    unsafe_persistent=st.booleans(),
    unsafe_isolated=st.booleans(),
    process_recorded=st.booleans(),
    owner_seen_alive=st.booleans(),
    observed_at=st.floats(0, 1e9),
)


@given(observations)
def test_no_takeover_within_the_lease(obs: TakeoverObservation) -> None:
    if obs.heartbeat_age <= obs.lease_seconds:
        assert decide_takeover(obs).action == TakeoverAction.LEAVE


@given(observations)
def test_persistent_relaunch_needs_proof_or_the_unsafe_flag(obs: TakeoverObservation) -> None:
    verdict = decide_takeover(obs)
    if obs.workdir_mode == "persistent" and verdict.action == TakeoverAction.RELAUNCH:
        proven_gone = obs.process_alive is False and obs.recorded_host == obs.this_host
        assert proven_gone or obs.unsafe_persistent


@given(observations)
def test_a_process_alive_here_is_doubled_only_in_an_isolated_workdir_past_the_grace(obs: TakeoverObservation) -> None:
    if obs.process_alive is True and obs.recorded_host == obs.this_host:
        if decide_takeover(obs).action == TakeoverAction.RELAUNCH:
            assert obs.workdir_mode == "isolated"
            assert obs.heartbeat_age >= obs.grace_seconds or obs.unsafe_isolated


@given(observations)
def test_a_published_outcome_is_committed_only_once_nothing_of_its_attempt_writes(obs: TakeoverObservation) -> None:
    """Committing may start the next attempt: never beside a survivor here, nor in a persistent workdir elsewhere."""
    verdict = decide_takeover(obs)
    here = obs.recorded_host == obs.this_host
    if obs.outcome_published and obs.kind == StateKind.RUNNING and verdict.takes_over:
        if here and obs.process_alive is True:
            assert verdict.action == TakeoverAction.STOP_THEN_FINISH
        elif obs.workdir_mode == "persistent":
            assert (here and obs.process_alive is False) or obs.unsafe_persistent
    if verdict.action == TakeoverAction.STOP_THEN_FINISH:
        assert obs.outcome_published and here and obs.process_alive is True


@given(observations)
def test_isolated_relaunch_without_proof_waits_out_the_grace(obs: TakeoverObservation) -> None:
    verdict = decide_takeover(obs)
    if verdict.rule == "heartbeat_silent":
        assert obs.heartbeat_age >= obs.grace_factor * obs.lease_seconds


@given(observations)
def test_adopt_and_release_only_where_they_make_sense(obs: TakeoverObservation) -> None:
    verdict = decide_takeover(obs)
    if verdict.action == TakeoverAction.RELEASE:
        assert obs.kind == StateKind.CLAIMED
    if verdict.action == TakeoverAction.ADOPT:
        assert obs.kind == StateKind.RUNNING and obs.recorded_host == obs.this_host
    assert attrs.asdict(verdict)["evidence"]["rule"] == verdict.rule


# -- "not before": the instant that keeps an until-idle manager awake -------------------------------------


@given(observations)
def test_not_before_is_the_earliest_instant_the_table_admits_a_takeover(obs: TakeoverObservation) -> None:
    """A verdict's instant is truthful (the table admits a takeover then) and earliest (not before it)."""
    verdict = decide_takeover(obs)
    if verdict.takes_over:
        assert verdict.not_before == obs.observed_at and verdict.admitted_by == verdict.rule
        return
    if verdict.not_before is None:
        assert verdict.admitted_by is None
        return
    wait = verdict.not_before - obs.observed_at
    assert wait >= 0

    def aged(seconds: float) -> TakeoverVerdict:
        return decide_takeover(attrs.evolve(obs, heartbeat_age=obs.heartbeat_age + seconds))

    # Just after the instant the takeover is admitted, by the rule it names; just before it, not yet.
    later = aged(wait + max(1e-6, 1e-9 * abs(obs.heartbeat_age + wait)))
    assert later.takes_over and later.rule == verdict.admitted_by
    # ``wait`` is a difference of instants: it is only as exact as their float spacing.
    slack = 4 * math.ulp(abs(obs.observed_at) + abs(obs.heartbeat_age) + wait)
    if wait > 1e-6 + 2 * slack:
        assert not aged(wait * 0.999 - slack).takes_over


@given(observations)
def test_a_live_owner_keeps_its_job_and_keeps_nobody_waiting(obs: TakeoverObservation) -> None:
    if obs.owner_seen_alive and obs.heartbeat_age <= obs.lease_seconds:
        verdict = decide_takeover(obs)
        assert verdict.action == TakeoverAction.LEAVE and verdict.not_before is None
        assert not verdict.awaits_takeover


@pytest.mark.parametrize(
    ("overrides", "wait", "rule"),
    [
        # The killed manager's case: lease 2 s, heartbeat 0.5 s old, nobody has seen it beat since.
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "process_alive": False}, 1.5, "process_gone"),
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "process_alive": True}, 1.5, "process_alive"),
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "kind": COMMITTING}, 1.5, "owner_expired"),
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "kind": CANCELLING}, 1.5, "owner_expired"),
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "kind": CLAIMED}, 1.5, "claim_expired"),
        # Isolated and uncheckable: the grace (2 x 2 s), not the lease, admits it.
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, **ISO}, 3.5, "heartbeat_silent"),
        ({"heartbeat_age": 3.0, "lease_seconds": 2.0, **ISO}, 1.0, "heartbeat_silent"),
        # Adopted in an isolated workdir: admitted now (adopt), and the relaunch follows at the grace.
        ({"heartbeat_age": 0.5, "lease_seconds": 2.0, "process_alive": True, "workdir_mode": "isolated"},
         1.5, "process_alive"),
    ],
)
def test_not_before_of_a_silent_owner(overrides: dict[str, Any], wait: float, rule: str) -> None:
    verdict = decide_takeover(_obs(observed_at=1000.0, **overrides))
    assert verdict.action == TakeoverAction.LEAVE
    assert verdict.not_before == pytest.approx(1000.0 + wait)
    assert verdict.awaits_takeover and verdict.admitted_by == rule
    if verdict.rule == "lease_live":
        assert f"a takeover ({rule}) is admitted in {wait:.1f} s" in verdict.message
    else:
        assert verdict.rule == "isolated_grace" and f"relaunching in {wait:g} s" in verdict.message


@pytest.mark.parametrize(
    "overrides",
    [
        {"heartbeat_age": 0.5, "lease_seconds": 2.0, "owner_seen_alive": True},
        {"heartbeat_age": 0.5, "lease_seconds": 2.0, **FAR},  # persistent on another host: never from here
        {"heartbeat_age": 1e6, **FAR},
        {"heartbeat_age": 0.5, "lease_seconds": 2.0, "kind": CANCELLING, **FAR},
        {"heartbeat_age": 1e6, "kind": CANCELLING, **FAR},
    ],
)
def test_no_instant_for_what_this_manager_will_never_take_over(overrides: dict[str, Any]) -> None:
    verdict = decide_takeover(_obs(observed_at=1000.0, **overrides))
    assert verdict.action == TakeoverAction.LEAVE and verdict.not_before is None
    assert not verdict.awaits_takeover


def test_adopting_an_isolated_attempt_says_when_it_is_relaunched() -> None:
    verdict = decide_takeover(_obs(workdir_mode="isolated", process_alive=True, heartbeat_age=100.0))
    assert verdict.action == TakeoverAction.ADOPT and verdict.awaits_takeover
    assert "relaunching it in 20 s" in verdict.message
    later = decide_takeover(_obs(workdir_mode="isolated", process_alive=True, heartbeat_age=120.0))
    assert later.action == TakeoverAction.RELAUNCH and "can no longer commit" in later.message
