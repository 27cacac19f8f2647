"""The task manager: the tick loop that registers, claims, launches, watches and commits.

A tick streams one bounded pass over each active kind (never the terminal
trees), acts on what it found, and waits on its runners' process descriptors
rather than sleeping, so an exit is committed within milliseconds. Every change
of a job is a store transition; a lost race is a miss, not a fault. The manager
frees nothing and cleans nothing up on exit: whatever it leaves is recovered
from disk by the next one. Spec: 000 "Run", "Scheduling", "Runner contract".
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from .. import codec
from ..domain.joins import DEFAULT_JOIN_GRACE_SECONDS
from ..domain.lifecycle import ACTIVE_KINDS, TERMINAL_KINDS, Event, StateKind, next_kind
from ..domain.scheduling import Offer, pass_duration_level
from ..ports import LaunchedProcess, ProcessControl, Verifier
from ..store.discovery import Discovery
from ..store.markers import Marker
from ..store.store import JobDamage, JobView, LostRace
from ..store.workspaces import WorkspaceHandle
from .attempts import AttemptPlan, LaunchSettings
from .cancellation import Cancellation
from .commit import Decision, apply_outcome, clear_note, decide, note_for_parent, settle_lost_note
from .containment import Refusals, contained
from .draining import Drain
from .launching import Launcher
from .outcome_reader import Outcome, published, read_outcome
from .recovery import Recovery
from .requests import RequestProcessor
from .summary import summarize
from .waiting import WaitingPass

log = logging.getLogger("httk.workflow.manager")
T = TypeVar("T")

#: Every pass that can make work ready (registration, recovery, commits, joins) runs before
#: the claiming pass, so new ready work is claimed in the same tick.
TICK_ORDER: tuple[StateKind, ...] = (
    StateKind.SUBMITTED,
    StateKind.CLAIMED,
    StateKind.RUNNING,
    StateKind.COMMITTING,
    StateKind.CANCELLING,
    StateKind.WAITING,
    StateKind.READY,
)


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
    log_level: str = "info"
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


class Manager:
    """One manager process serving one workspace."""

    def __init__(
        self,
        handle: WorkspaceHandle,
        process: ProcessControl,
        launch: LaunchSettings,
        config: ManagerConfig,
        *,
        manager_id: str,
        out: Callable[[str], None] = print,
    ) -> None:
        self.handle = handle
        self.fs = handle.fs
        self.layout = handle.layout
        self.store = handle.store
        self.clock = handle.ports.clock
        self.ids = handle.ports.ids
        self.proc = process
        self.config = config
        self.id = manager_id
        self.host = process.hostname()
        self.uid = process.uid()
        self.launch_settings = attrs.evolve(launch, manager_id=manager_id, host=self.host)
        self.lease = float(config.lease_seconds or handle.policy["lease_seconds"])
        self.offer = Offer(
            pools=frozenset(config.pools),
            capabilities=frozenset(config.capabilities),
            executors=frozenset(config.executors),
            placement_prefixes=tuple(config.placement_prefixes),
        )
        self.discovery = Discovery(self.fs, self.layout, tuple(config.placement_prefixes))
        self.running: dict[str, Running] = {}
        #: Jobs this manager made terminal, by kind (the summary never walks the terminal trees).
        self.finished: Counter[str] = Counter()
        self.out = out
        self.draining = False
        self.drain_deadline: float | None = None
        self.stop_now = False
        self.last_heartbeat = -1e18
        self.manager_dir = f"{self.layout.managers}/{self.id}"
        self.refusals = Refusals(self.fs, f"{self.manager_dir}/refused", self.clock.now)
        #: Jobs whose last observation here was a refusal (job key -> reason): logged once, counted in the summary.
        self.refused: dict[str, str] = self.refusals.reasons
        self.waiting = WaitingPass(self)
        self.launcher = Launcher(self)
        self.recovery = Recovery(self)
        self.requests = RequestProcessor(self)
        self.cancellation = Cancellation(self)
        self.drain = Drain(self)
        # Idle detection: a kind is quiet when its last full cycle saw no progress.
        self._seq = 0
        self._last_progress = 0
        self._cycle_start = {kind: 0 for kind in ACTIVE_KINDS}
        self._quiet = {kind: False for kind in ACTIVE_KINDS}
        self.last_gc = self.clock.monotonic()
        self.gc_hook: Callable[[], None] | None = None
        #: ``job debug`` restricts a private manager to these jobs; ``None`` serves everything.
        self.only_jobs: set[str] | None = None
        #: Called once per loop iteration (``job debug`` streams logs and watches transitions).
        self.on_iteration: Callable[[], None] | None = None
        #: Verifies signed operator requests (wired by the composition root).
        self.verifier: Verifier | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def run(self) -> int:
        """Serve until idle (or forever with ``idle``); returns the exit status."""
        self.publish_manifest()
        self.heartbeat(force=True)
        self.out(self.banner())
        self._warn_empty_prefixes()
        self.proc.on_terminate(self.request_drain)
        started_quiet = self.clock.monotonic()
        status = 0
        while not self.stop_now:
            progress = self.tick()
            # Ready requests this manager may serve beyond one tick's bound keep it awake too.
            busy = bool(self.running or self.cancellation.pending or self.requests.pending)
            if progress or busy:
                started_quiet = self.clock.monotonic()
            if self.draining:
                self.drain.terminate()  # one launched while the signal arrived
                if not self.running or self.clock.monotonic() >= (self.drain_deadline or 0):
                    log.info("drain complete; exiting with %d attempt(s) left to lease recovery", len(self.running))
                    break
            elif (not busy and all(self._quiet.values()) and not self.config.idle
                  and self.recovery.awaiting() is None):
                # Idle only when no takeover verdict says this manager will act on a job later.
                break
            elif self.config.idle_timeout is not None and not busy:
                if self.clock.monotonic() - started_quiet >= self.config.idle_timeout:
                    status = self._idle_timeout_advice()
                    break
            self._maybe_gc()
            if not progress:
                # Pending cancellations are polled, so their wait is short; otherwise block on exits.
                timeout = 0.05 if self.cancellation.pending else self.config.poll_interval
                self.proc.wait_any([r.process for r in self.running.values()], timeout)
            if self.on_iteration is not None:
                self.on_iteration()
        self.heartbeat(force=True, stopped=True)
        self.out(summarize(self))
        return status

    def request_drain(self, signum: int) -> None:
        """First signal: stop claiming, terminate attempts, keep committing. Second: exit at once."""
        if self.draining:
            log.warning("second signal %d: exiting immediately", signum)
            raise SystemExit(130)
        log.warning("signal %d: draining (no new claims; committing for %.0fs)", signum, self.config.drain_timeout)
        self.draining = True
        self.drain.signal = signum
        self.drain_deadline = self.clock.monotonic() + self.config.drain_timeout
        self.drain.terminate()

    def banner(self) -> str:
        return (
            f"httk-workflow manager {self.id}: workspace {self.layout.root}; log {self.log_path()}; "
            f"pools {','.join(self.config.pools)}; capabilities {','.join(self.config.capabilities) or '-'}; "
            f"executors {','.join(self.config.executors)}; workers {self.config.workers}"
        )

    def log_path(self) -> str:
        return self.config.log_file or f"{self.manager_dir}/log"

    def owner_record(self) -> dict[str, Any]:
        """What a frame records about the manager that owns a job under its lease."""
        return {"manager_id": self.id, "host": self.host, "lease_seconds": self.lease, "claimed_at": self.clock.now()}

    # -- manifest and heartbeat --------------------------------------------------------------
    def publish_manifest(self) -> None:
        """Publish ``managers/<id>/manager.json``: what this manager serves and decides with (``run`` does it first)."""
        manifest = {
            "format": "httk-workflow-manager",
            "format_version": 1,
            "manager_id": self.id,
            "host": self.host,
            "pid": self.proc.pid(),
            "uid": self.uid,
            "workspace": self.layout.root,
            "pools": list(self.config.pools),
            "capabilities": list(self.config.capabilities),
            "executors": list(self.config.executors),
            "runner_search_paths": list(self.config.runner_search_paths),
            "placement_prefixes": list(self.config.placement_prefixes),
            "lease_seconds": self.lease,
            "workers": self.config.workers,
            # What this manager's takeover and join verdicts depend on: ``job why`` decides with the same.
            "takeover": self.recovery.settings.to_json(),
            "join_grace_seconds": self.config.join_grace_seconds,
            "journal_writers": [self.store.writer.writer_id],
            "started_at": self.clock.now(),
        }
        self.fs.makedirs(self.manager_dir)
        self.fs.write_atomic(f"{self.manager_dir}/manager.json", codec.encode(manifest), durable=self.handle.durable)

    def heartbeat(self, *, force: bool = False, stopped: bool = False) -> None:
        """Write the lease evidence; cheap enough to call often, rate-limited to once a second."""
        now = self.clock.monotonic()
        if not force and now - self.last_heartbeat < min(1.0, self.lease / 4):
            return
        self.last_heartbeat = now
        beat = {"manager_id": self.id, "time": self.clock.now(), "lease_seconds": self.lease, "stopped": stopped}
        # Heartbeats are evidence, not protocol state: no fsync.
        self.fs.write_atomic(f"{self.manager_dir}/heartbeat.json", codec.encode(beat), durable=False)

    # -- the tick ----------------------------------------------------------------------------
    def _progress(self) -> None:
        self._seq += 1
        self._last_progress = self._seq

    def tick(self) -> bool:
        """One scheduling tick over every active kind; True when anything changed."""
        before = self._last_progress
        self.heartbeat()
        self.reap()
        if self.requests.process().moved:
            # A request applied, retired or quarantined is progress of the queue, whatever it did to a job.
            self._progress()
        if self.cancellation.poll():
            self._progress()
        for kind in TICK_ORDER:
            if self.stop_now:
                break
            started = self.clock.monotonic()
            result = self.discovery.scan(
                kind,
                entry_budget=self.config.discovery_budget,
                marker_budget=self.config.maximum_pass_markers,
                heartbeat=self.heartbeat,
            )
            self._handle_pass(kind, result.markers)
            self.reap()
            self._check_pass_duration(kind, self.clock.monotonic() - started)
            if result.cycle_complete:
                self.recovery.cycle_complete(kind)
                self._quiet[kind] = self._last_progress <= self._cycle_start[kind]
                self._seq += 1
                self._cycle_start[kind] = self._seq
        return self._last_progress != before

    def _check_pass_duration(self, kind: StateKind, duration: float) -> None:
        level = pass_duration_level(duration, self.lease)
        if level == "error":
            log.error("a %s pass took %.1fs, 90%% of the %.0fs lease: raise lease_seconds or split the "
                      "workspace", kind.value, duration, self.lease)
        elif level == "warning":
            log.warning("a %s pass took %.1fs, half the %.0fs lease", kind.value, duration, self.lease)

    def _handle_pass(self, kind: StateKind, markers: list[Marker]) -> None:
        """Act on one pass's markers; each job is handled under :meth:`contain` (the claim window per job too)."""
        if self.only_jobs is not None:
            markers = [marker for marker in markers if marker.job_id in self.only_jobs]
        if kind == StateKind.SUBMITTED:
            for marker in markers:
                self.contain(marker, "registration", lambda marker=marker: self.register(marker))
        elif kind == StateKind.READY:
            if not self.draining:
                self.launcher.claim_window(markers)
        elif kind == StateKind.WAITING:
            for marker in markers:
                if self.contain(marker, "the join", lambda marker=marker: self.waiting.evaluate(marker)):
                    self._progress()
        elif kind == StateKind.CANCELLING:
            for marker in markers:
                if self.contain(marker, "cancellation", lambda marker=marker: self.cancellation.consider(marker)):
                    self._progress()
        else:
            for marker in markers:
                if marker.job_id in self.running:
                    continue
                if self.contain(marker, "recovery", lambda marker=marker: self.recovery.consider(marker)):
                    self._progress()

    # -- per-job fault isolation -------------------------------------------------------------
    def contain(self, marker: Marker, what: str, handler: Callable[[], T]) -> T | None:
        """Run one observation of a job through the shared containment (:func:`.containment.contained`).

        An unexpected exception refuses that job and the manager goes on; every step of the
        protocol is crash-safe, so an abandoned handling leaves the job as a killed manager
        would. One that ends without a refusal and finds the job moved on clears an earlier one.
        """
        refusals, progress = self.refusals.count, self._last_progress

        def fault(reason: str) -> None:
            # A fault after this handling moved the job (a claim whose launch failed) stands at its new marker.
            moved = self._last_progress != progress and self.store.locate(marker.placement, str(marker.key))
            self.refusals.refuse(marker, reason, generation=moved[0].generation if moved else None)

        result = contained(what, handler, fault)
        if self.refusals.count == refusals:
            self.refusals.observed(marker, progressed=self._last_progress != progress)
        return result

    def refuse(self, marker: Marker, reason: str) -> None:
        """Record that this manager does not handle ``marker``'s job: logged once per reason, counted,
        and kept under ``managers/<id>/refused/`` for ``job why``."""
        self.refusals.refuse(marker, reason)

    # -- registration ------------------------------------------------------------------------
    def owned_by_me(self, marker: Marker) -> bool:
        """The safety property: marker, payload and job.json are regular, non-symlink, ours.

        A job it refuses is refused like any other (logged once, counted in the summary,
        named by ``job why`` with the check that failed); a name that vanished meanwhile
        (another manager moved the marker) is no refusal.
        """
        problem = self._unsafe(marker)
        if problem:
            self.refuse(marker, f"the safety property refuses it: {problem}")
        return problem is None

    def _unsafe(self, marker: Marker) -> str | None:
        """Which check of the safety property fails (``""``: a name is gone), or ``None``."""
        payload = self.store.payload_dir(marker)
        for what, path, want_dir in (
            ("marker", self.store.marker_path(marker), False),
            ("payload directory", payload, True),
            ("job.json", f"{payload}/job.json", False),
        ):
            info = self.fs.lstat(path)
            if info is None:
                return ""
            if info.is_symlink:
                return f"its {what} {path} is a symbolic link"
            if info.uid != self.uid:
                return f"its {what} {path} is owned by uid {info.uid}, not by this manager's uid {self.uid}"
            if want_dir != info.is_dir or (not want_dir and not info.is_file):
                return f"its {what} {path} is not a {'directory' if want_dir else 'regular file'}"
        return None

    def register(self, marker: Marker) -> None:
        """Register one submitted job (``submitted`` -> ``ready`` at its initial step), or refuse it."""
        try:
            view = self.store.read_job(marker)
        except JobDamage as damage:
            self.refuse(marker, f"cannot register: {damage}")
            return
        if view.spec is None:
            self.refuse(marker, f"cannot register: {view.spec_error}")
            return
        if view.spec.executor not in self.offer.executors or not self.owned_by_me(marker):
            return
        try:
            self.store.transition(
                marker,
                view.frame,
                Event.REGISTER,
                step=view.spec.initial_step,
                activation_id=self.ids.new_id(),
                activation_ordinal=1,
            )
        except LostRace:
            return
        log.info("registered %s at %s", marker.key, marker.placement)
        self._progress()

    # -- watching and committing -------------------------------------------------------------
    def reap(self) -> None:
        """Commit every attempt whose process has exited."""
        for job_id, running in list(self.running.items()):
            returncode = running.process.poll()
            if returncode is None:
                continue
            del self.running[job_id]
            running.process.close()
            pgid = running.process.identity.pgid
            if self.proc.group_alive(pgid):
                # Strays of a finished runner must not keep writing the workdir after the commit.
                log.warning("job %s: runner exited but its process group %d lives on; killing it",
                            running.marker.key, pgid)
                self.proc.kill_group(pgid)
            self._progress()
            self.contain(running.marker, "the commit", lambda running=running, code=returncode:
                         self.end_attempt(running, code))

    def end_attempt(self, running: Running, returncode: int) -> None:
        """Commit an exited attempt, or give its job back when this manager's drain stopped it."""
        if running.drained and not published(self.fs, running.plan.control):
            self.drain.release(running, returncode)
        else:
            # An outcome published during the drain is committed like any other.
            self.commit_exited(running, returncode)

    def commit_exited(self, running: Running, returncode: int) -> None:
        result = self.attempt_transition(
            running, lambda frame: (Event.PUBLISH, {"notes": {**frame.notes, "returncode": returncode}})
        )
        if result is None:
            return
        marker, frame = result
        outcome = read_outcome(self.fs, running.plan.control, returncode)
        self.commit(marker, frame, running.view.spec, running.plan.control, outcome)

    def attempt_transition(
        self, running: Running, change: Callable[[Any], tuple[Event, dict[str, Any]]]
    ) -> tuple[Marker, Any] | None:
        """Move the running marker of this very attempt by ``change(frame)``; ``None`` if it is not ours now."""
        marker, frame = running.marker, running.view.frame
        for _try in range(3):
            event, changes = change(frame)
            try:
                return self.store.transition(marker, frame, event, **changes)
            except LostRace:
                # Another actor (a deferred pause applied elsewhere) may have renamed the running marker
                # of this very attempt; anything else (a cancel) means the attempt is not ours to end.
                current = self._current_running(marker, frame.attempt_id)
                if current is None:
                    log.info("job %s changed under its attempt (cancelled?); leaving it", marker.key)
                    return None
                marker, frame = current
        return None

    def _current_running(self, marker: Marker, attempt_id: str | None) -> tuple[Marker, Any] | None:
        """The job's current ``running`` marker and frame if it is still the same attempt."""
        for current in self.store.locate(marker.placement, str(marker.key), (StateKind.RUNNING,)):
            try:
                frame = self.store.read_frame(current)
            except JobDamage:
                return None
            if frame is not None and frame.attempt_id == attempt_id:
                return current, frame
        return None

    def commit(self, marker: Marker, frame: Any, spec: Any, control: str, outcome: Outcome) -> None:
        """Apply an outcome to a job this manager holds in ``committing``.

        Another manager may be running the same commit (it took the job over on a lease
        that only looked expired, and renamed the marker first): the apply steps are safe
        to run twice at once, an apply error fails the job only while this manager still
        holds the marker, and one that no longer does stops here, leaving the commit to it.
        """
        try:
            self._commit(marker, frame, spec, control, outcome)
        except LostRace:
            log.info("job %s: another manager took the commit over; leaving it to that one", marker.key)

    def _commit(self, marker: Marker, frame: Any, spec: Any, control: str, outcome: Outcome) -> None:
        outcome, applied = apply_outcome(self.store, marker, frame, spec, control, outcome,
                                         applier=f"{self.id}.g{marker.generation}",
                                         between=self._commit_checkpoint(marker))
        decision: Decision = decide(outcome, frame, spec, self.ids)
        if applied:
            decision.changes["data_generation"] = frame.data_generation + 1
        if outcome.failure is not None and outcome.failure.code in ("protocol_error", "runner_exit", "runner_error"):
            log.warning("job %s attempt %d: %s", marker.key, frame.total_attempts, outcome.failure.message)
        if self.finish(marker, frame, decision.event, decision.changes,
                       workdir=self._workdir_of(spec, control, marker)) is not None:
            log.info("committed %s: %s", marker.key, decision.summary)

    def _commit_checkpoint(self, marker: Marker) -> Callable[[], None]:
        """Called between a commit's operations and children: heartbeat, and stop once the marker is gone.

        A long commit must not make a live owner look expired; and an owner whose
        ``committing`` marker was renamed by a manager recovering it has lost the
        commit, so it stops at the next step instead of racing that manager to the end.
        """
        path = self.store.marker_path(marker)

        def checkpoint() -> None:
            self.heartbeat()
            if self.fs.lstat(path) is None:
                raise LostRace(marker)

        return checkpoint

    def finish(
        self, marker: Marker, frame: Any, event: Event, changes: dict[str, Any], *, workdir: str | None = None
    ) -> tuple[Marker, Any] | None:
        """One transition, telling a waiting parent first when it makes the job terminal."""
        kind = next_kind(marker.kind, event)
        failure, notes = changes.get("failure", frame.failure), []

        def tell_parent(new: Marker, _frame: Any) -> None:
            # Between the frame and the rename: the note names the very marker the rename makes.
            notes.append(note_for_parent(self.fs, self.layout, marker, new, failure,
                                         durable=self.handle.durable, workdir=workdir))

        try:
            result = self.store.transition(marker, frame, event, **changes,
                                           before_rename=tell_parent if kind in TERMINAL_KINDS else None)
        except LostRace:
            if notes and notes[0] is not None:
                settle_lost_note(self.store, marker, notes[0])  # this note may have overwritten the winner's
            log.info("job %s: lost the race for %s", marker.key, event.value)
            return None
        if marker.kind in (StateKind.FAILED, StateKind.CANCELLED):
            clear_note(self.fs, self.layout, marker)
        if kind in TERMINAL_KINDS:
            self.finished[kind.value] += 1
        self._progress()
        return result

    def _workdir_of(self, spec: Any, control: str, marker: Marker) -> str:
        if spec is not None and spec.workdir_mode == "isolated":
            return f"{control}/workdir"
        return self.layout.persistent_workdir(marker.job_id)

    # -- odds and ends -----------------------------------------------------------------------
    def _warn_empty_prefixes(self) -> None:
        for prefix in self.config.placement_prefixes:
            clean = prefix.strip("/")
            if not any(self.fs.exists(f"{self.layout.kind_dir(kind)}/{clean}") for kind in StateKind):
                log.warning(
                    "placement prefix %r matches no job yet; this manager will serve that subtree once work "
                    "arrives there", prefix,
                )

    def _idle_timeout_advice(self) -> int:
        from .summary import idle_advice

        for line in idle_advice(self):
            log.warning(line)
        return 0

    def _maybe_gc(self) -> None:
        if self.config.gc_interval is None or self.gc_hook is None:
            return
        if self.clock.monotonic() - self.last_gc < self.config.gc_interval:
            return
        self.last_gc = self.clock.monotonic()
        try:
            self.gc_hook()
        except Exception as error:  # a failed collection must not disturb scheduling
            log.error("garbage collection failed: %s", error)
