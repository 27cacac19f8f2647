"""Every row of the takeover table, and the safety properties it protects."""

from __future__ import annotations

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
    ("published", {"outcome_published": True, "process_alive": True}, "finish outcome_published info"),
    ("published-other-host", {"outcome_published": True, **FAR}, "finish outcome_published info"),
    ("gone-persistent", {"process_alive": False}, "relaunch process_gone info"),
    ("gone-isolated", {"process_alive": False, "workdir_mode": "isolated"}, "relaunch process_gone info"),
    ("alive-persistent", {"process_alive": True}, "adopt process_alive info"),
    ("alive-isolated", {"process_alive": True, "workdir_mode": "isolated", "heartbeat_age": 1e6},
     "adopt process_alive info"),
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
def test_never_relaunch_a_process_alive_here(obs: TakeoverObservation) -> None:
    if obs.process_alive is True and obs.recorded_host == obs.this_host:
        assert decide_takeover(obs).action != TakeoverAction.RELAUNCH


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
