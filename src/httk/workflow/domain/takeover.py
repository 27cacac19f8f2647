"""Takeover rules: what a manager may do with another manager's owned job.

Owns the table "Taking over another manager's attempt": an expired lease says
only that a manager stopped heartbeating, not that its attempt stopped, so no
row relaunches on lease expiry alone. Invariant: a ``persistent`` workdir gets
a second writer only when the recorded process is provably gone on this host or
the operator passed ``--unsafe-persistent-takeover``. Every verdict carries the
evidence the new state frame records, so ``job log`` can say why.
Spec: 000 "Run" (Taking over another manager's attempt).
"""

from __future__ import annotations

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


@attrs.frozen
class TakeoverVerdict:
    """The decision, the stable rule token that admitted it, and the evidence to journal."""

    action: TakeoverAction
    rule: str
    evidence: dict[str, Any] = attrs.field(hash=False)
    log_level: str
    message: str

    @property
    def takes_over(self) -> bool:
        return self.action != TakeoverAction.LEAVE


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
    """Apply the takeover table to one observation."""
    age = f"heartbeat {obs.heartbeat_age:g} s old"
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
    if obs.kind in (StateKind.COMMITTING, StateKind.CANCELLING):
        return _verdict(
            obs,
            TakeoverAction.FINISH,
            "owner_expired",
            "info",
            f"owner of the {obs.kind.value} job expired ({age}, {lease}); finishing its {obs.kind.value}",
        )
    if obs.outcome_published:
        return _verdict(
            obs,
            TakeoverAction.FINISH,
            "outcome_published",
            "info",
            f"owner expired ({age}) after its attempt published an outcome; committing it",
        )
    alive = obs.provable_alive
    if alive is False:
        return _verdict(
            obs,
            TakeoverAction.RELAUNCH,
            "process_gone",
            "info",
            f"owner expired ({age}) and its process is gone on {obs.this_host}; relaunching",
        )
    if alive is True:
        return _verdict(
            obs,
            TakeoverAction.ADOPT,
            "process_alive",
            "info",
            f"owner expired ({age}) but its process is alive on {obs.this_host}; adopting the attempt",
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
            f"owner expired ({age}) but its persistent-workdir process {where}; {advice}",
        )
    grace = obs.grace_seconds
    if obs.heartbeat_age >= grace:
        return _verdict(
            obs,
            TakeoverAction.RELAUNCH,
            "heartbeat_silent",
            "info",
            f"heartbeat silent for {obs.heartbeat_age:g} s, past the {grace:g} s takeover grace "
            f"({obs.grace_factor:g} x {lease}); relaunching the isolated-workdir attempt",
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
            f"{grace:g} s grace ends, because --unsafe-isolated-takeover is set",
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
