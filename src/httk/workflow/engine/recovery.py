"""Lease recovery: what a manager does with a job another manager owns.

An expired lease is evidence, not a fence: the domain's takeover rules decide
from the workdir mode, whether the recorded process is provably gone on this
host, and how long the heartbeat has been silent. A taken-over running attempt
is committed as an attempt that ended without its outcome (or with the outcome
it did publish), so the job's retry budget governs what happens next. A
published outcome whose process group still runs on this host is committed only
after the group is stopped (SIGTERM, SIGKILL after the manager's kill grace) and seen
gone, as a manager's own reap kills the strays of its exited runners: the
commit may start the next attempt, which must not share a workdir with them.

:func:`observe` is the one place a takeover observation is built: the recovery
pass, the cancellation pass, the closing summary and ``job why`` all decide
from it, so a diagnosis never says something a manager will not do. The
verdicts' "not before" instants are what keep an until-idle manager awake for
work it will be able to take over. Spec: 000 "Taking over another manager's
attempt", "One banner, then one summary".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import attrs

from ..domain import budgets
from ..domain.frames import StateFrame, StoppedGroup, TakeoverEvidence
from ..domain.lifecycle import Event, StateKind
from ..domain.takeover import (
    DEFAULT_GRACE_FACTOR,
    TakeoverAction,
    TakeoverObservation,
    TakeoverVerdict,
    decide_takeover,
)
from ..ports import Filesystem, ProcessControl, ProcessIdentity
from ..store.markers import Marker
from ..store.store import JobView
from .commit import CommitPass
from .context import TickContext, read_or_refuse
from .draining import KILL_SETTLE_SECONDS
from .manifest import read_heartbeat
from .outcome_reader import read_outcome
from .registration import owned_by_me

log = logging.getLogger("httk.workflow.manager")


def _finite(value: Any) -> Any:
    """JSON has no infinity: a heartbeat that never came (or a stopped owner) is recorded as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


@attrs.frozen
class TakeoverSettings:
    """The takeover options of one manager (``--takeover-grace-factor``, the two unsafe flags)."""

    grace_factor: float = DEFAULT_GRACE_FACTOR
    unsafe_persistent: bool = False
    unsafe_isolated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"grace_factor": self.grace_factor, "unsafe_persistent": self.unsafe_persistent,
                "unsafe_isolated": self.unsafe_isolated}

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> TakeoverSettings:
        """The settings a manager published in its manifest; the defaults where it published none."""
        document = document or {}
        try:
            factor = float(document.get("grace_factor") or DEFAULT_GRACE_FACTOR)
        except (TypeError, ValueError):
            factor = DEFAULT_GRACE_FACTOR
        return cls(grace_factor=factor if factor > 0 else DEFAULT_GRACE_FACTOR,
                   unsafe_persistent=document.get("unsafe_persistent") is True,
                   unsafe_isolated=document.get("unsafe_isolated") is True)


def recorded_identity(frame: StateFrame) -> ProcessIdentity | None:
    """The process identity a frame records, if a launch recorded one."""
    process = frame.process
    if process is None or not process.pid:
        return None
    return ProcessIdentity(host=process.host, pid=process.pid, start_ticks=process.start_ticks,
                           pgid=process.pgid or process.pid)


def _attempt_alive(proc: ProcessControl, identity: ProcessIdentity) -> bool | None:
    """Whether the recorded attempt still runs: its process, or any member of its process group.

    A runner that died while a child it started lives on has not provably stopped: the
    child can still write the workdir (the manager's own reap kills such strays for the
    same reason). ``None`` when it cannot be told here.
    """
    alive = proc.is_alive(identity)
    if alive is not False:
        return alive
    try:
        return proc.group_alive(identity.pgid)
    except ValueError:  # a recorded group no attempt can have (0, 1, ours): nothing proves it gone
        return None


def observe(
    fs: Filesystem,
    proc: ProcessControl,
    kind: StateKind,
    frame: StateFrame,
    workdir_mode: str,
    *,
    this_host: str,
    now: float,
    beat: float | None,
    default_lease: float,
    settings: TakeoverSettings,
    owner_seen_alive: bool = False,
) -> TakeoverObservation:
    """What an observer on ``this_host`` sees of an owned job: the one input of every takeover verdict.

    ``beat`` is the owner's last heartbeat time (``None``: stopped, never, or no owner).
    """
    owner, process = frame.owner, frame.process
    identity = recorded_identity(frame)
    control = process.control if process is not None else None
    return TakeoverObservation(
        kind=kind,
        workdir_mode=workdir_mode,
        recorded_host=(process.host if process is not None else "") or (owner.host if owner is not None else ""),
        this_host=this_host,
        process_alive=_attempt_alive(proc, identity) if identity is not None else None,
        outcome_published=bool(control) and fs.exists(f"{control}/outcome.ready"),
        heartbeat_age=float("inf") if beat is None else max(0.0, now - beat),
        lease_seconds=(owner.lease_seconds if owner is not None else 0.0) or default_lease,
        grace_factor=settings.grace_factor,
        unsafe_persistent=settings.unsafe_persistent,
        unsafe_isolated=settings.unsafe_isolated,
        process_recorded=identity is not None,
        owner_seen_alive=owner_seen_alive and beat is not None,
        observed_at=now,
    )


@attrs.define
class _Stopping:
    """A published attempt's process group this manager signalled, when, and the verdict that said to."""

    verdict: TakeoverVerdict
    pgid: int
    started: float
    killed: bool = False
    warned: bool = False

    def evidence(self, host: str, now: float) -> StoppedGroup:
        return StoppedGroup(pgid=self.pgid, method="sigkill" if self.killed else "sigterm",
                            verified=f"process group {self.pgid} gone on host {host}",
                            seconds=round(now - self.started, 3))


class Recovery:
    """Takeover decisions for claimed, running, committing and cancelling jobs."""

    def __init__(self, ctx: TickContext, committer: CommitPass) -> None:
        self.ctx = ctx
        self.committer = committer
        self._beats: dict[str, tuple[float, float | None, float | None]] = {}
        #: Owners whose heartbeat advanced while this manager watched: live managers, by evidence.
        self._advanced: set[str] = set()
        self.settings = TakeoverSettings(
            grace_factor=ctx.config.takeover_grace_factor,
            unsafe_persistent=ctx.config.unsafe_persistent_takeover,
            unsafe_isolated=ctx.config.unsafe_isolated_takeover,
        )
        # Jobs this manager will take over (now, later, or by watching an adopted process), per kind:
        # what the last complete pass cycle saw, and what the cycle under way has seen so far.
        self._awaiting: dict[StateKind, dict[str, float]] = {}
        self._cycle: dict[StateKind, dict[str, float]] = {}
        self._said: dict[str, str] = {}
        #: Process groups of published attempts this manager is stopping before it commits them, by job id.
        self._stopping: dict[str, _Stopping] = {}

    def _beat(self, manager_id: str, *, fresh: bool = False) -> tuple[float | None, float | None]:
        """(time of the last heartbeat, the lease it declared); ``None`` time when stopped or never.

        Read at most once a second per owner unless ``fresh``.
        """
        ctx = self.ctx
        cached = self._beats.get(manager_id)
        if not fresh and cached is not None and ctx.clock.monotonic() - cached[0] < 1.0:
            return cached[1], cached[2]
        beat, lease = read_heartbeat(ctx.store.fs, ctx.store.layout, manager_id)
        if cached is not None and beat is not None and cached[1] is not None and beat > cached[1]:
            self._advanced.add(manager_id)
        self._beats[manager_id] = (ctx.clock.monotonic(), beat, lease)
        return beat, lease

    def heartbeat_age(self, manager_id: str) -> float:
        """Seconds since ``manager_id`` last heartbeat (infinite when it stopped or never did)."""
        beat, _lease = self._beat(manager_id)
        return float("inf") if beat is None else max(0.0, self.ctx.clock.now() - beat)

    def is_stale(self, manager_id: str) -> bool:
        """Whether ``manager_id`` is silent for longer than the lease it declared itself."""
        beat, lease = self._beat(manager_id)
        return beat is None or self.ctx.clock.now() - beat > (lease or self.ctx.lease)

    def judge(self, view: JobView) -> TakeoverVerdict | None:
        """This manager's takeover verdict on an owned job; ``None`` for its own jobs or an unreadable job.json."""
        ctx = self.ctx
        frame, spec = view.frame, view.spec
        owner_id = frame.owner_id
        if owner_id == ctx.manager_id or spec is None:
            return None
        verdict = None
        for fresh in (False, True):
            beat = self._beat(str(owner_id), fresh=fresh)[0] if owner_id else None
            observation = observe(
                ctx.store.fs, ctx.proc, view.marker.kind, frame, spec.workdir_mode,
                this_host=ctx.host, now=ctx.clock.now(), beat=beat, default_lease=ctx.lease,
                settings=self.settings, owner_seen_alive=str(owner_id) in self._advanced,
            )
            verdict = decide_takeover(observation)
            if not verdict.takes_over or not owner_id:
                break
            # A heartbeat read up to a second ago can be older than a short lease by itself: a
            # takeover is decided on a fresh read.
        return verdict

    def note(self, marker: Marker, verdict: TakeoverVerdict | None) -> None:
        """Record (and log, once per rule) a verdict that changed nothing this pass."""
        if verdict is None:
            return
        key = str(marker.key)
        if self._said.get(key) != verdict.rule or verdict.log_level == "warning":
            self._said[key] = verdict.rule
            log.log(_LEVELS.get(verdict.log_level, logging.INFO), "job %s: %s", marker.key, verdict.message)
        if verdict.not_before is not None:
            self._cycle.setdefault(marker.kind, {})[marker.job_id] = verdict.not_before

    def cycle_complete(self, kind: StateKind) -> None:
        """A pass cycle over ``kind`` ended: what it saw replaces what the previous cycle saw."""
        self._awaiting[kind] = self._cycle.pop(kind, {})

    def awaiting(self) -> float | None:
        """The earliest "not before" of the jobs this manager will take over; ``None`` when there are none."""
        instants = [when for jobs in self._awaiting.values() for when in jobs.values()]
        return min(instants) if instants else None

    def consider(self, marker: Marker) -> bool:
        """Recover one owned job if the rules admit it; True when it transitioned."""
        ctx = self.ctx
        if marker.kind == StateKind.CANCELLING:
            return False  # cancellation is finished by the cancellation pass, from the same verdict
        view = read_or_refuse(ctx, marker, "unreadable")
        if view is None:
            return False
        frame, spec = view.frame, view.spec
        owner_id = frame.owner_id
        if not owned_by_me(ctx, marker):
            return False
        verdict = self.judge(view)
        if verdict is None or spec is None:
            return False
        if verdict.action == TakeoverAction.STOP_THEN_FINISH:
            # Nothing is committed while the group runs: the verdict turns to finish once it is gone.
            self.note(marker, verdict)
            self._stop(marker, frame, verdict)
            return False
        stopped = self._stopping.pop(marker.job_id, None)
        if verdict.action in (TakeoverAction.LEAVE, TakeoverAction.ADOPT):
            self.note(marker, verdict)
            return False
        self._said.pop(str(marker.key), None)
        log.log(_LEVELS.get(verdict.log_level, logging.INFO), "job %s: %s", marker.key, verdict.message)
        if stopped is not None and verdict.action == TakeoverAction.FINISH:
            # One procedure: the frame records the verdict that admitted it, then how the group was stopped.
            verdict = stopped.verdict
        else:
            stopped = None
        evidence = TakeoverEvidence(
            **{key: _finite(value) for key, value in verdict.evidence.items()},
            by=ctx.manager_id, at=ctx.clock.now(), previous_owner=owner_id,
            owner_stopped=math.isinf(verdict.evidence["heartbeat_age"]),
            stopped_group=stopped.evidence(ctx.host, ctx.clock.monotonic()) if stopped is not None else None,
        )
        control = frame.process.control if frame.process is not None else None
        me = ctx.owner_record()
        if verdict.action == TakeoverAction.RELEASE:
            # The claim never launched: its attempt is given back to both attempt budgets.
            given_back = budgets.uncharged(budgets.counters_of(frame))
            changes: dict[str, Any] = {
                "owner": None,
                "process": None,
                "takeover": evidence,
                "attempt_ordinal": given_back.attempts_in_activation,
                "total_attempts": given_back.total_attempts,
            }
            return ctx.finish(marker, frame, Event.LEASE_RECOVERY, changes) is not None
        if marker.kind == StateKind.RUNNING:
            result = ctx.finish(marker, frame, Event.PUBLISH, {"owner": me, "takeover": evidence})
        else:
            result = ctx.finish(marker, frame, Event.LEASE_RECOVERY, {"owner": me, "takeover": evidence})
        if result is None:
            return False
        new_marker, new_frame = result
        self.finish_commit(new_marker, new_frame, spec, control)
        return True

    def _stop(self, marker: Marker, frame: StateFrame, verdict: TakeoverVerdict) -> None:
        """One step of stopping a published attempt's process group: SIGTERM, then SIGKILL after the grace.

        Non-blocking, like a cancellation: each pass takes the next step, and the verdict
        itself says when the group is gone (it turns to ``finish``, and the commit records
        how the group was stopped). A group that survives SIGKILL keeps the job uncommitted.
        """
        ctx = self.ctx
        identity = recorded_identity(frame)
        if identity is None:  # the verdict needs a live group here, which needs a recorded identity
            return
        pgid, now, grace = identity.pgid, ctx.clock.monotonic(), ctx.config.kill_grace
        stopping = self._stopping.get(marker.job_id)
        if stopping is None or stopping.pgid != pgid:
            ctx.proc.terminate_group(pgid)
            self._stopping[marker.job_id] = _Stopping(verdict, pgid, now)
            log.info("job %s: SIGTERM sent to process group %d before committing its outcome", marker.key, pgid)
        elif not stopping.killed and now - stopping.started >= grace:
            ctx.proc.kill_group(pgid)
            stopping.killed = True
            log.warning("job %s: process group %d ignored SIGTERM for %.0fs; SIGKILL sent", marker.key, pgid, grace)
        elif stopping.killed and not stopping.warned and now - stopping.started >= grace + KILL_SETTLE_SECONDS:
            stopping.warned = True
            log.warning("job %s: process group %d survives SIGKILL; its outcome stays uncommitted until it is gone",
                        marker.key, pgid)

    def finish_commit(self, marker: Marker, frame: StateFrame, spec: Any, control: str | None) -> None:
        ctx = self.ctx
        if control is None:
            control = ctx.store.layout.attempt_dir(marker.job_id, frame.total_attempts, frame.attempt_id or "")
        returncode = (frame.notes or {}).get("returncode")
        outcome = read_outcome(ctx.store.fs, control, returncode if returncode is not None else -9)
        failure = outcome.failure
        if returncode is None and not outcome.published and failure is not None and failure.code == "runner_exit":
            # No exit status was ever seen: say what happened rather than the -9 stand-in's "killed by signal 9".
            rule = frame.takeover.rule if frame.takeover is not None else None
            message = (f"attempt {frame.total_attempts} ended without an outcome its manager could commit: "
                       f"the manager stopped heartbeating and the attempt was taken over ({rule})")
            outcome = attrs.evolve(outcome, failure=attrs.evolve(
                failure, message=message, details={**failure.details, "takeover_rule": rule}))
        self.committer.commit(marker, frame, spec, control, outcome)
