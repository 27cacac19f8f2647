"""The task manager: the tick loop that registers, claims, launches, watches and commits.

A tick streams one bounded pass over each active kind (never the terminal
trees), hands what it found to the pass for that kind, and waits on its
runners' process descriptors rather than sleeping, so an exit is committed
within milliseconds. The passes (:mod:`.registration`, :mod:`.launching`,
:mod:`.waiting`, :mod:`.recovery`, :mod:`.cancellation`, :mod:`.draining`,
:mod:`.commit`, :mod:`.requests`) are built on the manager's
:class:`~.context.EngineContext`, never on the manager itself; this module is the
schedule: pass order, per-job containment, idle detection, the drain, garbage
collection. Every change of a job is a store transition; a lost race is a miss,
not a fault. The manager frees nothing and cleans nothing up on exit: whatever
it leaves is recovered from disk by the next one. Spec: 000 "Run", "Scheduling",
"Runner contract".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import attrs

from .. import codec
from ..domain.lifecycle import ACTIVE_KINDS, StateKind
from ..domain.scheduling import pass_duration_level
from ..ports import ProcessControl, Verifier
from ..store.discovery import Discovery
from ..store.markers import Marker
from ..store.workspaces import WorkspaceHandle
from .attempts import LaunchSettings
from .cancellation import Cancellation
from .commit import CommitPass
from .containment import contained
from .context import EngineContext, ManagerConfig, Running
from .draining import Drain
from .launching import Launcher
from .manifest import ManagerManifest
from .outcome_reader import published
from .recovery import Recovery
from .registration import Registration
from .requests import RequestProcessor
from .summary import idle_advice, summarize
from .waiting import WaitingPass

log = logging.getLogger("httk.workflow.manager")
T = TypeVar("T")

#: Seconds a finished runner's process group may take to empty before its members count as strays.
STRAY_GRACE = 0.05

__all__ = ["TICK_ORDER", "Manager", "ManagerConfig", "Running"]

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
        verifier: Verifier | None = None,
        gc_hook: Callable[[], None] | None = None,
    ) -> None:
        self.handle = handle
        self.store = handle.store
        self.clock = handle.ports.clock
        self.proc = process
        self.config = config
        self.id = manager_id
        #: What every pass works with: the workspace, the ports, who this manager is, what it runs.
        self.ctx = ctx = EngineContext(handle, process, config, manager_id=manager_id)
        self.manager_dir = ctx.directory
        self.running: dict[str, Running] = ctx.running
        #: Jobs whose last observation here was a refusal (job key -> reason): logged once, counted in the summary.
        self.refused: dict[str, str] = ctx.refusals.reasons
        self.discovery = Discovery(handle.fs, handle.layout, tuple(config.placement_prefixes))
        self.registration = Registration(ctx)
        self.committer = CommitPass(ctx)
        self.waiting = WaitingPass(ctx)
        self.launcher = Launcher(ctx, attrs.evolve(launch, manager_id=manager_id, host=ctx.host))
        self.recovery = Recovery(ctx, self.committer)
        self.cancellation = Cancellation(ctx, self.recovery)
        self.drain = Drain(ctx, self.committer)
        self.requests = RequestProcessor(ctx, self.recovery, self.cancellation, verifier=lambda: self.verifier)
        self.out = out
        self.draining = False
        self.drain_deadline: float | None = None
        self.stop_now = False
        # Idle detection: a kind is quiet when its last full cycle saw no progress.
        self._cycle_start = {kind: 0 for kind in ACTIVE_KINDS}
        self._quiet = {kind: False for kind in ACTIVE_KINDS}
        self.last_gc = self.clock.monotonic()
        #: One retention pass, called at most once per ``config.gc_interval`` (wired by the composition root).
        self.gc_hook = gc_hook
        #: ``job debug`` restricts a private manager to these jobs; ``None`` serves everything.
        self.only_jobs: set[str] | None = None
        #: Called once per loop iteration (``job debug`` streams logs and watches transitions).
        self.on_iteration: Callable[[], None] | None = None
        #: Verifies signed operator requests (wired by the composition root).
        self.verifier = verifier

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
        self.proc.close()  # the preloaded Python launcher, if any: no launch follows
        self.out(self.summary())
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
            f"httk-workflow manager {self.id}: workspace {self.handle.layout.root}; log {self.log_path()}; "
            f"pools {','.join(self.config.pools)}; capabilities {','.join(self.config.capabilities) or '-'}; "
            f"executors {','.join(self.config.executors)}; workers {self.config.workers}"
        )

    def summary(self) -> str:
        """The closing summary line (:func:`.summary.summarize`)."""
        return summarize(self.ctx, self.recovery, finished=self.ctx.finished, refused=len(self.refused))

    def log_path(self) -> str:
        return self.config.log_file or f"{self.manager_dir}/log"

    # -- manifest and heartbeat --------------------------------------------------------------
    def publish_manifest(self) -> None:
        """Publish ``managers/<id>/manager.json``: what this manager serves and decides with (``run`` does it first)."""
        ctx = self.ctx
        manifest = ManagerManifest(
            manager_id=self.id,
            host=ctx.host,
            pid=self.proc.pid(),
            uid=ctx.uid,
            workspace=self.handle.layout.root,
            pools=tuple(self.config.pools),
            capabilities=tuple(self.config.capabilities),
            executors=tuple(self.config.executors),
            runner_search_paths=tuple(self.config.runner_search_paths),
            placement_prefixes=tuple(self.config.placement_prefixes),
            lease_seconds=ctx.lease,
            workers=self.config.workers,
            takeover=self.recovery.settings.to_json(),
            join_grace_seconds=self.config.join_grace_seconds,
            journal_writers=(self.store.writer.writer_id,),
            started_at=self.clock.now(),
        )
        ctx.publish_manifest(codec.encode(codec.unstructure(manifest)))

    def heartbeat(self, *, force: bool = False, stopped: bool = False) -> None:
        """Write the lease evidence (:meth:`.context.EngineContext.heartbeat`)."""
        self.ctx.heartbeat(force=force, stopped=stopped)

    # -- the tick ----------------------------------------------------------------------------
    def tick(self) -> bool:
        """One scheduling tick over every active kind; True when anything changed."""
        ctx = self.ctx
        before = ctx.progress
        self.heartbeat()
        self.reap()
        if self.requests.process().moved:
            # A request applied, retired or quarantined is progress of the queue, whatever it did to a job.
            ctx.progressed()
        if self.cancellation.poll():
            ctx.progressed()
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
                self._quiet[kind] = ctx.progress == self._cycle_start[kind]
                self._cycle_start[kind] = ctx.progress
        return ctx.progress != before

    def _check_pass_duration(self, kind: StateKind, duration: float) -> None:
        lease = self.ctx.lease
        level = pass_duration_level(duration, lease)
        if level == "error":
            log.error("a %s pass took %.1fs, 90%% of the %.0fs lease: raise lease_seconds or split the "
                      "workspace", kind.value, duration, lease)
        elif level == "warning":
            log.warning("a %s pass took %.1fs, half the %.0fs lease", kind.value, duration, lease)

    def _handle_pass(self, kind: StateKind, markers: list[Marker]) -> None:
        """Act on one pass's markers; each job is handled under :meth:`contain` (the claim window per job too)."""
        if self.only_jobs is not None:
            markers = [marker for marker in markers if marker.job_id in self.only_jobs]
        if kind == StateKind.SUBMITTED:
            for marker in markers:
                self.contain(marker, "registration", lambda marker=marker: self.register(marker))
        elif kind == StateKind.READY:
            if not self.draining:
                for marker in self.launcher.window(markers):
                    self.contain(marker, "the claim", lambda marker=marker: self.launcher.consider(marker))
        elif kind == StateKind.WAITING:
            for marker in markers:
                if self.contain(marker, "the join", lambda marker=marker: self.waiting.evaluate(marker)):
                    self.ctx.progressed()
        elif kind == StateKind.CANCELLING:
            for marker in markers:
                if self.contain(marker, "cancellation", lambda marker=marker: self.cancellation.consider(marker)):
                    self.ctx.progressed()
        else:
            for marker in markers:
                if marker.job_id in self.running:
                    continue
                if self.contain(marker, "recovery", lambda marker=marker: self.recovery.consider(marker)):
                    self.ctx.progressed()

    def register(self, marker: Marker) -> None:
        """Register one submitted job (:meth:`.registration.Registration.register`)."""
        self.registration.register(marker)

    # -- per-job fault isolation -------------------------------------------------------------
    def contain(self, marker: Marker, what: str, handler: Callable[[], T]) -> T | None:
        """Run one observation of a job through the shared containment (:func:`.containment.contained`).

        An unexpected exception refuses that job and the manager goes on; every step of the
        protocol is crash-safe, so an abandoned handling leaves the job as a killed manager
        would. One that ends without a refusal and finds the job moved on clears an earlier one.
        """
        refusals, progress = self.ctx.refusals, self.ctx.progress
        count = refusals.count

        def fault(reason: str) -> None:
            # A fault after this handling moved the job (a claim whose launch failed) stands at its new marker.
            moved = self.ctx.progress != progress and self.store.locate(marker.placement, str(marker.key))
            refusals.refuse(marker, reason, generation=moved[0].generation if moved else None)

        result = contained(what, handler, fault)
        if refusals.count == count:
            refusals.observed(marker, progressed=self.ctx.progress != progress)
        return result

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
            if self.proc.group_alive(pgid) and self._group_lingers(pgid):
                # Strays of a finished runner must not keep writing the workdir after the commit.
                log.warning("job %s: runner exited but its process group %d lives on; killing it",
                            running.marker.key, pgid)
                self.proc.kill_group(pgid)
            self.ctx.progressed()
            self.contain(running.marker, "the commit", lambda running=running, code=returncode:
                         self.end_attempt(running, code))

    def _group_lingers(self, pgid: int) -> bool:
        """Whether a finished runner's group is still there after :data:`STRAY_GRACE`.

        A member already exiting is not a stray: a Bash runner's pre-started bridge dies by its
        death signal a moment after a runner that exited without stopping it (before
        ``httk_workflow_main``, say).
        """
        deadline = self.clock.monotonic() + STRAY_GRACE
        while self.clock.monotonic() < deadline:
            self.clock.sleep(STRAY_GRACE / 25)
            if not self.proc.group_alive(pgid):
                return False
        return True

    def end_attempt(self, running: Running, returncode: int) -> None:
        """Commit an exited attempt, or give its job back when this manager's drain stopped it."""
        if running.drained and not published(self.handle.fs, running.plan.control):
            self.drain.release(running, returncode)
        else:
            # An outcome published during the drain is committed like any other.
            self.committer.commit_exited(running, returncode)

    # -- odds and ends -----------------------------------------------------------------------
    def _warn_empty_prefixes(self) -> None:
        layout = self.handle.layout
        for prefix in self.config.placement_prefixes:
            clean = prefix.strip("/")
            if not any(self.handle.fs.exists(f"{layout.kind_dir(kind)}/{clean}") for kind in StateKind):
                log.warning(
                    "placement prefix %r matches no job yet; this manager will serve that subtree once work "
                    "arrives there", prefix,
                )

    def _idle_timeout_advice(self) -> int:
        for line in idle_advice(self.ctx, self.recovery):
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
