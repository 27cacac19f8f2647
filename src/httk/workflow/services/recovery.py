"""Lease recovery: what a manager does with a job another manager owns.

An expired lease is evidence, not a fence: the domain's takeover rules decide
from the workdir mode, whether the recorded process is provably gone on this
host, and how long the heartbeat has been silent. A taken-over running attempt
is committed as an attempt that ended without its outcome (or with the outcome
it did publish), so the job's retry budget governs what happens next. Spec: 000
"Taking over another manager's attempt".
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from .. import codec
from ..domain.frames import StateFrame
from ..domain.lifecycle import Event, StateKind
from ..domain.takeover import TakeoverAction, TakeoverObservation, decide_takeover
from ..ports import ProcessIdentity
from .markers import Marker
from .outcomes import read_outcome
from .store import JobDamage

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger("httk.workflow.manager")


def _finite(value: Any) -> Any:
    """JSON has no infinity: a heartbeat that never came (or a stopped owner) is recorded as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class Recovery:
    """Takeover decisions for claimed, running, committing and cancelling jobs."""

    def __init__(self, manager: Manager) -> None:
        self.m = manager
        self._beats: dict[str, tuple[float, float | None, float | None]] = {}

    def _beat(self, manager_id: str) -> tuple[float | None, float | None]:
        """(time of the last heartbeat, the lease it declared); ``None`` time when stopped or never."""
        m = self.m
        cached = self._beats.get(manager_id)
        if cached is not None and m.clock.monotonic() - cached[0] < 1.0:
            return cached[1], cached[2]
        path = f"{m.layout.managers}/{manager_id}/heartbeat.json"
        beat: float | None
        lease: float | None = None
        try:
            document = codec.decode_object(m.fs.read_bytes(path), path)
            beat = float(document["time"])
            lease = float(document.get("lease_seconds") or 0) or None
            if document.get("stopped"):
                beat = None
        except (FileNotFoundError, codec.DocumentError, KeyError, TypeError, ValueError):
            beat = None
        self._beats[manager_id] = (m.clock.monotonic(), beat, lease)
        return beat, lease

    def heartbeat_age(self, manager_id: str) -> float:
        """Seconds since ``manager_id`` last heartbeat (infinite when it stopped or never did)."""
        beat, _lease = self._beat(manager_id)
        return float("inf") if beat is None else max(0.0, self.m.clock.now() - beat)

    def is_stale(self, manager_id: str) -> bool:
        """Whether ``manager_id`` is silent for longer than the lease it declared itself."""
        beat, lease = self._beat(manager_id)
        return beat is None or self.m.clock.now() - beat > (lease or self.m.lease)

    def consider(self, marker: Marker) -> bool:
        """Recover one owned job if the rules admit it; True when it transitioned."""
        m = self.m
        try:
            view = m.store.read_job(marker)
        except JobDamage as damage:
            log.warning("job %s unreadable: %s", marker.key, damage)
            return False
        frame, spec = view.frame, view.spec
        owner = frame.owner or {}
        owner_id = owner.get("manager_id")
        if owner_id == m.id or spec is None or not m.owned_by_me(marker):
            return False
        if marker.kind == StateKind.CANCELLING:
            return False  # cancellation is finished by the request machinery
        process = frame.process or {}
        identity = None
        if process.get("pid"):
            identity = ProcessIdentity(
                host=str(process.get("host")),
                pid=int(process["pid"]),
                start_ticks=process.get("start_ticks"),
                pgid=int(process.get("pgid") or process["pid"]),
            )
        alive = m.proc.is_alive(identity) if identity is not None else None
        control = process.get("control")
        observation = TakeoverObservation(
            kind=marker.kind,
            workdir_mode=spec.workdir_mode,
            recorded_host=str(process.get("host") or owner.get("host") or ""),
            this_host=m.host,
            process_alive=alive,
            outcome_published=bool(control) and m.fs.exists(f"{control}/outcome.ready"),
            heartbeat_age=self.heartbeat_age(str(owner_id)) if owner_id else float("inf"),
            lease_seconds=float(owner.get("lease_seconds") or m.lease),
            grace_factor=m.config.takeover_grace_factor,
            unsafe_persistent=m.config.unsafe_persistent_takeover,
            unsafe_isolated=m.config.unsafe_isolated_takeover,
        )
        verdict = decide_takeover(observation)
        log.log(_LEVELS.get(verdict.log_level, logging.INFO), "job %s: %s", marker.key, verdict.message)
        if verdict.action in (TakeoverAction.LEAVE, TakeoverAction.ADOPT):
            return False
        evidence = {key: _finite(value) for key, value in verdict.evidence.items()}
        evidence.update({"by": m.id, "at": m.clock.now(), "previous_owner": owner_id,
                         "owner_stopped": math.isinf(observation.heartbeat_age)})
        me = m.owner_record()
        if verdict.action == TakeoverAction.RELEASE:
            changes: dict[str, Any] = {
                "owner": None,
                "process": None,
                "takeover": evidence,
                "attempt_ordinal": max(frame.attempt_ordinal - 1, 0),
                "total_attempts": max(frame.total_attempts - 1, 0),
            }
            return m.finish(marker, frame, Event.LEASE_RECOVERY, changes) is not None
        if marker.kind == StateKind.RUNNING:
            result = m.finish(marker, frame, Event.PUBLISH, {"owner": me, "takeover": evidence})
        else:
            result = m.finish(marker, frame, Event.LEASE_RECOVERY, {"owner": me, "takeover": evidence})
        if result is None:
            return False
        new_marker, new_frame = result
        self.finish_commit(new_marker, new_frame, spec, control)
        return True

    def finish_commit(self, marker: Marker, frame: StateFrame, spec: Any, control: str | None) -> None:
        m = self.m
        if control is None:
            control = m.layout.attempt_dir(marker.job_id, frame.total_attempts, frame.attempt_id or "")
        returncode = (frame.notes or {}).get("returncode")
        outcome = read_outcome(m.fs, control, returncode if returncode is not None else -9)
        m.commit(marker, frame, spec, control, outcome, recovering=True)
