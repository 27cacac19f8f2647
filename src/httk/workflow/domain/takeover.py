"""Takeover rules: what a manager may do with another manager's owned job.

Owns the table "Taking over another manager's attempt": an expired lease says
only that a manager stopped heartbeating, not that its attempt stopped, so no
row relaunches on lease expiry alone. Invariant: a ``persistent`` workdir gets
a second writer only when the recorded process is provably gone on this host or
the operator passed ``--unsafe-persistent-takeover``; an ``isolated`` one gets a
second attempt once the process is provably gone or the heartbeat has been
silent for the grace, and until then a live process on this host is adopted.
A published outcome is committed only once nothing of its attempt still runs: a
group alive on this host is stopped first (``stop_then_finish``), and a
persistent-workdir attempt elsewhere is left like a running one.
Every verdict carries the evidence the new state frame records, so ``job log``
can say why, and a "not before" instant: the earliest moment this table would
admit a takeover if the owner stays silent, which is what keeps an until-idle
manager awake for work it will be able to recover (``None``: never from here,
or a live owner holds it). Spec: 000 "Run" (Taking over another manager's attempt).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

import attrs

from httk.workflow.domain.lifecycle import OWNED_KINDS, StateKind
from httk.workflow.domain.model import WORKDIR_MODES

DEFAULT_GRACE_FACTOR = 2.0


def _owned_kind(_instance: object, _attribute: attrs.Attribute[StateKind], value: StateKind) -> None:
    if value not in OWNED_KINDS:
        raise ValueError(
            f"takeover applies to an owned kind ({', '.join(sorted(OWNED_KINDS))}), got {value!r}"
        )


def _workdir_mode(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if value not in WORKDIR_MODES:
        raise ValueError(f"workdir_mode must be one of {', '.join(WORKDIR_MODES)}, got {value!r}")


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class TakeoverObservation:
    """What a manager saw of a job another manager owns."""

    kind: StateKind = attrs.field(converter=StateKind, validator=_owned_kind)
    workdir_mode: str = attrs.field(validator=_workdir_mode)
    recorded_host: str
    this_host: str
    #: ``None`` when it cannot be told (the process ran on another host, or no identity was recorded).
    process_alive: bool | None
    outcome_published: bool
    #: Seconds since the owner's last heartbeat, by this manager's clock.
    heartbeat_age: float
    lease_seconds: float = attrs.field(validator=_positive)
    grace_factor: float = attrs.field(default=DEFAULT_GRACE_FACTOR, validator=_positive)
    unsafe_persistent: bool = False
    unsafe_isolated: bool = False
    #: Whether the frame records a process identity (a claim, or a launch that died before it, has none).
    process_recorded: bool = True
    #: The owner's heartbeat advanced while this manager watched: a live manager renews its lease.
    owner_seen_alive: bool = False
    #: This manager's clock when it observed; ``TakeoverVerdict.not_before`` is on the same clock.
    observed_at: float = 0.0

    @property
    def same_host(self) -> bool:
        return self.recorded_host == self.this_host

    @property
    def provable_alive(self) -> bool | None:
        """``process_alive`` where it is evidence; only the launching host's kernel can answer."""
        return self.process_alive if self.same_host else None

    @property
    def grace_seconds(self) -> float:
        return self.grace_factor * self.lease_seconds


class TakeoverAction(StrEnum):
    LEAVE = "leave"
    #: A claim never launched goes back to ``ready``.
    RELEASE = "release"
    #: The attempt is abandoned and a new attempt starts.
    RELAUNCH = "relaunch"
    #: The process is provably alive on this host: watch it and commit what it publishes.
    ADOPT = "adopt"
    #: ``committing``/``cancelling``, or an outcome already published: finish the commit or cancellation.
    FINISH = "finish"
    #: An outcome is published but the attempt's process group still runs on this host: stop the
    #: group (SIGTERM, SIGKILL after the grace) and finish once it is verified gone.
    STOP_THEN_FINISH = "stop_then_finish"


@attrs.frozen
class TakeoverVerdict:
    """The decision, the stable rule token that admitted it, and the evidence to journal."""

    action: TakeoverAction
    rule: str
    evidence: dict[str, Any] = attrs.field(hash=False)
    log_level: str
    message: str
    #: The earliest instant a takeover is admitted (``observed_at`` when it is now); ``None`` when no
    #: instant will admit one from here while the evidence stands (another host, a live owner).
    not_before: float | None = None
    #: The rule that admits the takeover at ``not_before`` (``rule`` itself when that is now).
    admitted_by: str | None = None

    @property
    def takes_over(self) -> bool:
        return self.action != TakeoverAction.LEAVE

    @property
    def awaits_takeover(self) -> bool:
        """Whether the observing manager will act on this job: now, later, or by watching it (adopt)."""
        return self.not_before is not None


def _verdict(
    obs: TakeoverObservation, action: TakeoverAction, rule: str, level: str, message: str, **extra: Any
) -> TakeoverVerdict:
    evidence: dict[str, Any] = {
        "rule": rule,
        "kind": obs.kind.value,
        "workdir_mode": obs.workdir_mode,
        "heartbeat_age": obs.heartbeat_age,
        "lease_seconds": obs.lease_seconds,
        "grace_factor": obs.grace_factor,
        "recorded_host": obs.recorded_host,
        "this_host": obs.this_host,
        "process_alive": obs.process_alive,
        "outcome_published": obs.outcome_published,
        "unsafe_persistent": obs.unsafe_persistent,
        "unsafe_isolated": obs.unsafe_isolated,
    }
    evidence.update(extra)
    return TakeoverVerdict(action=action, rule=rule, evidence=evidence, log_level=level, message=message)


def decide_takeover(obs: TakeoverObservation) -> TakeoverVerdict:
    """Apply the takeover table to one observation, with the earliest instant it admits a takeover."""
    verdict = _table(obs)
    if verdict.takes_over:
        return attrs.evolve(verdict, not_before=obs.observed_at, admitted_by=verdict.rule)
    later = _earliest_admission(obs)
    if later is None:
        return verdict
    wait, rule = later
    message = verdict.message
    if verdict.rule == "lease_live":  # the other rows that wait already say when their wait ends
        message = f"{message}; if it stays silent, a takeover ({rule}) is admitted in {wait:.1f} s"
    return attrs.evolve(verdict, not_before=obs.observed_at + wait, admitted_by=rule, message=message)


def _earliest_admission(obs: TakeoverObservation) -> tuple[float, str] | None:
    """Seconds until the table first admits a takeover it refuses now, if the heartbeat stays silent."""
    if obs.owner_seen_alive and obs.heartbeat_age <= obs.lease_seconds:
        return None  # a live owner renews its lease: nothing here will take it over
    # The table changes only where the age passes the lease (strictly) or reaches the grace.
    candidates = ((math.nextafter(obs.lease_seconds, math.inf), obs.lease_seconds),
                  (obs.grace_seconds, obs.grace_seconds))
    for probe, instant in sorted(candidates):
        if probe > obs.heartbeat_age:
            verdict = _table(attrs.evolve(obs, heartbeat_age=probe))
            if verdict.takes_over:
                return max(instant - obs.heartbeat_age, 0.0), verdict.rule
    return None


def _table(obs: TakeoverObservation) -> TakeoverVerdict:
    """The takeover table proper (spec 000), one row per return."""
    age = f"heartbeat {obs.heartbeat_age:.1f} s old"
    lease = f"lease {obs.lease_seconds:g} s"
    if obs.heartbeat_age <= obs.lease_seconds:
        return _verdict(
            obs, TakeoverAction.LEAVE, "lease_live", "debug", f"owner alive: {age}, within {lease}"
        )
    if obs.kind == StateKind.CLAIMED:
        # The launch gate moves claimed -> running before any process starts, so a claim owns no process.
        return _verdict(
            obs,
            TakeoverAction.RELEASE,
            "claim_expired",
            "info",
            f"claim expired ({age}, {lease}); releasing it back to ready",
        )
    if obs.kind == StateKind.CANCELLING and obs.process_recorded and not obs.same_host:
        # ``cancelled`` asserts nothing still writes the workdir; only the launching host can verify that.
        return _verdict(
            obs,
            TakeoverAction.LEAVE,
            "cancel_other_host",
            "warning",
            f"owner of the cancelling job expired ({age}), but its process ran on host {obs.recorded_host!r} "
            f"and cannot be proven stopped from {obs.this_host!r}; run a manager on {obs.recorded_host!r} "
            "to finish the cancellation",
        )
    if obs.kind in (StateKind.COMMITTING, StateKind.CANCELLING):
        # Expiry alone suffices: no process writes anything here, and a mistaken verdict (a live owner
        # whose heartbeat looked old) costs a lost commit, not two: the taker renames the marker to its
        # own generation before it acts, and a commit run twice at once changes what one run would.
        return _verdict(
            obs,
            TakeoverAction.FINISH,
            "owner_expired",
            "info",
            f"owner of the {obs.kind.value} job expired ({age}, {lease}); finishing its {obs.kind.value}",
        )
    if obs.outcome_published:
        return _published(obs, age)
    alive = obs.provable_alive
    grace = obs.grace_seconds
    if alive is False:
        return _verdict(
            obs,
            TakeoverAction.RELAUNCH,
            "process_gone",
            "info",
            f"owner expired ({age}) and its process is gone on {obs.this_host}; relaunching",
        )
    if alive is True and obs.workdir_mode == "persistent":
        return _verdict(
            obs,
            TakeoverAction.ADOPT,
            "process_alive",
            "info",
            f"owner expired ({age}) but its process is alive on {obs.this_host}; adopting the attempt",
        )
    if alive is True and obs.heartbeat_age < grace and not obs.unsafe_isolated:
        # An isolated attempt may be doubled once the grace is out; until then what it publishes is committed.
        return _verdict(
            obs,
            TakeoverAction.ADOPT,
            "process_alive",
            "info",
            f"owner expired ({age}) but its process is alive on {obs.this_host}; adopting the attempt, "
            f"and relaunching it in {grace - obs.heartbeat_age:g} s when the {grace:g} s grace "
            f"({obs.grace_factor:g} x {lease}) ends unless it publishes first",
            grace_seconds=grace,
            grace_remaining=grace - obs.heartbeat_age,
        )
    if obs.workdir_mode == "persistent":
        if obs.unsafe_persistent:
            return _verdict(
                obs,
                TakeoverAction.RELAUNCH,
                "unsafe_persistent_takeover",
                "warning",
                f"owner expired ({age}); relaunching a persistent-workdir attempt whose process on "
                f"{obs.recorded_host} cannot be proven gone, because --unsafe-persistent-takeover is set",
            )
        return _persistent_unproven(obs, f"owner expired ({age}) but")
    # The abandoned attempt is fenced by the takeover: whatever a still-live process publishes is not committed.
    still = f"; its process on {obs.this_host} still runs but can no longer commit" if alive else ""
    if obs.heartbeat_age >= grace:
        return _verdict(
            obs,
            TakeoverAction.RELAUNCH,
            "heartbeat_silent",
            "info",
            f"heartbeat silent for {obs.heartbeat_age:g} s, past the {grace:g} s takeover grace "
            f"({obs.grace_factor:g} x {lease}); relaunching the isolated-workdir attempt{still}",
            grace_seconds=grace,
        )
    remaining = grace - obs.heartbeat_age
    if obs.unsafe_isolated:
        return _verdict(
            obs,
            TakeoverAction.RELAUNCH,
            "unsafe_isolated_takeover",
            "warning",
            f"owner expired ({age}); relaunching the isolated-workdir attempt {remaining:g} s before the "
            f"{grace:g} s grace ends, because --unsafe-isolated-takeover is set{still}",
            grace_seconds=grace,
            grace_remaining=remaining,
        )
    return _verdict(
        obs,
        TakeoverAction.LEAVE,
        "isolated_grace",
        "info",
        f"owner expired ({age}) and its process on {obs.recorded_host!r} cannot be checked from here; "
        f"relaunching in {remaining:g} s when the {grace:g} s grace ({obs.grace_factor:g} x {lease}) ends",
        grace_seconds=grace,
        grace_remaining=remaining,
    )


def _published(obs: TakeoverObservation, age: str) -> TakeoverVerdict:
    """The row of an attempt that published its outcome: commit it, once nothing of it still writes.

    Committing can advance the job, and its next attempt then shares a persistent
    workdir with whatever survived, so a group still alive here is stopped first (a
    manager's own reap kills the strays of its exited runners for the same reason).
    Elsewhere it cannot be stopped or proven gone: a persistent workdir is left, as for
    a running attempt; an isolated survivor writes only its own abandoned workdir.
    """
    alive = obs.provable_alive
    if alive is True:
        return _verdict(
            obs,
            TakeoverAction.STOP_THEN_FINISH,
            "outcome_published_stop",
            "info",
            f"owner expired ({age}) after its attempt published an outcome, but its process group still runs "
            f"on {obs.this_host}; stopping it (SIGTERM, SIGKILL after the grace), then committing the outcome",
        )
    if alive is False or obs.workdir_mode == "isolated":
        return _verdict(
            obs,
            TakeoverAction.FINISH,
            "outcome_published",
            "info",
            f"owner expired ({age}) after its attempt published an outcome; committing it",
        )
    if obs.unsafe_persistent:
        return _verdict(
            obs,
            TakeoverAction.FINISH,
            "unsafe_persistent_takeover",
            "warning",
            f"owner expired ({age}) after its attempt published an outcome; committing it although its "
            f"persistent-workdir process on {obs.recorded_host} cannot be proven gone, because "
            "--unsafe-persistent-takeover is set",
        )
    return _persistent_unproven(obs, f"owner expired ({age}) after its attempt published an outcome, but")


def _persistent_unproven(obs: TakeoverObservation, lead: str) -> TakeoverVerdict:
    """Leave a persistent-workdir attempt whose process nothing here can prove stopped, saying who can."""
    if obs.same_host:
        # Same host but no process identity recorded: nothing here can prove it stopped either.
        where = f"ran on this host {obs.this_host!r} without a recorded process identity"
        advice = "check that it stopped, then pass --unsafe-persistent-takeover"
    else:
        where = f"ran on host {obs.recorded_host!r} and cannot be proven gone from {obs.this_host!r}"
        advice = f"run a manager on {obs.recorded_host!r} or pass --unsafe-persistent-takeover"
    return _verdict(
        obs,
        TakeoverAction.LEAVE,
        "persistent_other_host",
        "info",
        f"{lead} its persistent-workdir process {where}; {advice}",
    )
