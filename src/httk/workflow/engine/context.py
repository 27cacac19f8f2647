"""What a pass of the tick sees of its manager: the :class:`TickContext`.

The manager loop (:mod:`.manager`) owns the schedule: which pass runs when, idle
detection, the drain, garbage collection. Every pass (registration, claiming,
waiting, recovery, cancellation, draining, commit, requests) is built on a
``TickContext`` instead of the manager: the workspace and its store, the clock,
ids, process control, the configuration, who this manager is (its owner record
and lease evidence), the attempts it watches, and the one way a pass moves a job,
:meth:`TickContext.finish`. So a pass can be built and run alone on the in-memory
ports (``tests/engine``), and no pass imports the manager.
:class:`EngineContext` is the one implementation: a manager builds it, and so can a test.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Protocol

import attrs

from .. import codec
from ..domain.frames import Owner, StateFrame
from ..domain.joins import DEFAULT_JOIN_GRACE_SECONDS
from ..domain.lifecycle import TERMINAL_KINDS, Event, StateKind, next_kind
from ..domain.scheduling import Offer
from ..ports import Clock, Ids, LaunchedProcess, ProcessControl
from ..store.markers import Marker
from ..store.store import JobDamage, JobView, LostRace, Store
from ..store.workspaces import WorkspaceHandle
from .attempts import AttemptPlan
from .commit import clear_note, note_for_parent, settle_lost_note
from .containment import Refusals
from .manifest import Heartbeat

log = logging.getLogger("httk.workflow.manager")


@attrs.frozen(kw_only=True)
class ManagerConfig:
    """Deployment policy of one manager process (spec 000 "Run")."""

    workers: int = 1
    pools: tuple[str, ...] = ("default",)
    capabilities: tuple[str, ...] = ()
    executors: tuple[str, ...] = ("path",)
    placement_prefixes: tuple[str, ...] = ()
    lease_seconds: float | None = None
    takeover_grace_factor: float = 2.0
    unsafe_persistent_takeover: bool = False
    unsafe_isolated_takeover: bool = False
    join_grace_seconds: float = DEFAULT_JOIN_GRACE_SECONDS
    idle: bool = False
    idle_timeout: float | None = None
    runner_search_paths: tuple[str, ...] = ()
    drain_timeout: float = 60.0
    kill_grace: float = 10.0
    #: Without ``--log-level`` the console shows warnings and the file keeps the info-level record;
    #: ``--log-level LEVEL`` sets both (see cli/render.py log_levels).
    console_log_level: str = "warning"
    file_log_level: str = "info"
    log_file: str | None = None
    json_logs: bool = False
    gc_interval: float | None = None
    discovery_budget: int = 4096
    maximum_pass_markers: int = 256
    poll_interval: float = 0.5


@attrs.define
class Running:
    """One attempt this manager launched and is watching."""

    marker: Marker
    view: JobView
    plan: AttemptPlan
    process: LaunchedProcess
    #: This manager terminated the attempt while draining: an exit without an outcome is not the job's.
    drained: bool = False


class TickContext(Protocol):
    """What a pass may use of the manager that runs it."""

    @property
    def handle(self) -> WorkspaceHandle:
        """The workspace: its layout, filesystem, durability and settings."""

    @property
    def store(self) -> Store:
        """The workspace's markers and journal (``handle.store``)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def ids(self) -> Ids: ...

    @property
    def proc(self) -> ProcessControl:
        """Process control on this host: launches, signals, liveness."""

    @property
    def config(self) -> ManagerConfig: ...

    @property
    def manager_id(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def uid(self) -> int:
        """The manager's account: the one that must own every job it handles."""

    @property
    def lease(self) -> float:
        """The lease this manager declares, in seconds."""

    @property
    def offer(self) -> Offer:
        """What this manager serves: pools, capabilities, executors, placement prefixes."""

    @property
    def running(self) -> dict[str, Running]:
        """The attempts this manager launched and watches, by job id."""

    def owner_record(self) -> Owner:
        """What a frame records about this manager when it takes a job under its lease."""

    def heartbeat(self) -> None:
        """Renew the lease evidence (rate-limited); a long step calls it between its parts."""

    def progressed(self) -> None:
        """Count progress a pass made without a transition of its own (keeps the manager from idling)."""

    def refuse(self, marker: Marker, reason: str) -> None:
        """Record that this manager does not handle ``marker``'s job, and why (``job why`` shows it)."""

    def finish(
        self, marker: Marker, frame: StateFrame, event: Event, changes: dict[str, Any], *, workdir: str | None = None
    ) -> tuple[Marker, StateFrame] | None:
        """Apply one transition; ``None`` when another actor moved the job first."""


def read_or_refuse(ctx: TickContext, marker: Marker, what: str) -> JobView | None:
    """``marker``'s job, or ``None`` after refusing it as ``"<what>: <damage>"`` (one bad job stops nothing else)."""
    try:
        return ctx.store.read_job(marker)
    except JobDamage as damage:
        ctx.refuse(marker, f"{what}: {damage}")
        return None


class EngineContext:
    """The :class:`TickContext` of one manager process on one workspace."""

    def __init__(self, handle: WorkspaceHandle, proc: ProcessControl, config: ManagerConfig, *,
                 manager_id: str) -> None:
        self.handle = handle
        self.store = handle.store
        self.clock = handle.ports.clock
        self.ids = handle.ports.ids
        self.proc = proc
        self.config = config
        self.manager_id = manager_id
        self.host = proc.hostname()
        self.uid = proc.uid()
        self.lease = float(config.lease_seconds or handle.policy["lease_seconds"])
        self.offer = Offer(
            pools=frozenset(config.pools),
            capabilities=frozenset(config.capabilities),
            executors=frozenset(config.executors),
            placement_prefixes=tuple(config.placement_prefixes),
        )
        self.running: dict[str, Running] = {}
        #: ``managers/<id>/``: the manifest, the heartbeat, the refusals and (by default) the log.
        self.directory = f"{handle.layout.managers}/{manager_id}"
        self.refusals = Refusals(handle.fs, f"{self.directory}/refused", self.clock.now)
        #: Jobs this manager made terminal, by kind (the summary never walks the terminal trees).
        self.finished: Counter[str] = Counter()
        #: How often a pass made progress; the loop compares it across a pass cycle to detect idleness.
        self.progress = 0
        self._last_beat = -1e18
        #: The encoded ``manager.json`` once published (:meth:`publish_manifest`); the heartbeat restores it.
        self.manifest: bytes | None = None

    def publish_manifest(self, data: bytes) -> None:
        """Publish ``managers/<id>/manager.json`` (its directory made first) and keep it for the heartbeat."""
        self.handle.fs.makedirs(self.directory)
        self.handle.fs.write_atomic(f"{self.directory}/manager.json", data, durable=self.handle.durable)
        self.manifest = data

    def owner_record(self) -> Owner:
        return Owner(manager_id=self.manager_id, host=self.host, lease_seconds=self.lease, claimed_at=self.clock.now())

    def heartbeat(self, *, force: bool = False, stopped: bool = False) -> None:
        """Write the lease evidence; cheap enough to call often, rate-limited to once a second."""
        now = self.clock.monotonic()
        if not force and now - self._last_beat < min(1.0, self.lease / 4):
            return
        self._last_beat = now
        beat = Heartbeat(manager_id=self.manager_id, time=self.clock.now(), lease_seconds=self.lease, stopped=stopped)
        # Heartbeats are evidence, not protocol state: no fsync.
        data = codec.encode(codec.unstructure(beat))
        self.handle.fs.write_atomic(f"{self.directory}/heartbeat.json", data, durable=False)
        # A manager stopped (SIGSTOP, a suspended host) past its lease and ``manager_days`` can
        # have its directory collected; the write above recreated it holding the heartbeat
        # alone. Without the manifest nothing lists it as serving, so publish it again: one
        # existence check per heartbeat (at most once a second), none on the ticks in between.
        if self.manifest is not None and not self.handle.fs.exists(f"{self.directory}/manager.json"):
            log.warning("manager %s: its manifest was removed (its directory collected?); publishing it again",
                        self.manager_id)
            self.publish_manifest(self.manifest)

    def progressed(self) -> None:
        self.progress += 1

    def refuse(self, marker: Marker, reason: str) -> None:
        """Logged once per reason, counted, and kept under ``managers/<id>/refused/`` for ``job why``."""
        self.refusals.refuse(marker, reason)

    def finish(
        self, marker: Marker, frame: StateFrame, event: Event, changes: dict[str, Any], *, workdir: str | None = None
    ) -> tuple[Marker, StateFrame] | None:
        """One transition, telling a waiting parent first when it makes the job terminal."""
        kind = next_kind(marker.kind, event)
        failure, notes = changes.get("failure", frame.failure), []
        fs, layout = self.handle.fs, self.handle.layout

        def tell_parent(new: Marker, _frame: Any) -> None:
            # Between the frame and the rename: the note names the very marker the rename makes.
            notes.append(note_for_parent(fs, layout, marker, new, failure, durable=self.handle.durable,
                                         workdir=workdir))

        try:
            result = self.store.transition(marker, frame, event, **changes,
                                           before_rename=tell_parent if kind in TERMINAL_KINDS else None)
        except LostRace:
            if notes and notes[0] is not None:
                settle_lost_note(self.store, marker, notes[0])  # this note may have overwritten the winner's
            log.info("job %s: lost the race for %s", marker.key, event.value)
            return None
        if marker.kind in (StateKind.FAILED, StateKind.CANCELLED):
            clear_note(fs, layout, marker)
        if kind in TERMINAL_KINDS:
            self.finished[kind.value] += 1
        self.progressed()
        return result
