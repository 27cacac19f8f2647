"""Each pass of the tick built alone on the in-memory ports, without a Manager.

A pass receives a ``TickContext`` (``engine/context.py``). Here it is either a
small hand-written one (:class:`SmallContext`: exactly the protocol, transitions
straight through the store, refusals and events recorded) or the engine's own
:class:`~httk.workflow.engine.context.EngineContext`, which also writes the join
notes a waiting parent reads. The registration, claiming, commit, recovery and
waiting passes then run on it one call at a time.
"""

from __future__ import annotations

from typing import Any

import attrs

from httk.workflow.domain.frames import Owner, StateFrame
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.domain.model import JobKey
from httk.workflow.domain.scheduling import Offer
from httk.workflow.engine.commit import CommitPass
from httk.workflow.engine.context import EngineContext, ManagerConfig, Running, TickContext
from httk.workflow.engine.launching import Launcher
from httk.workflow.engine.recovery import Recovery
from httk.workflow.engine.registration import Registration
from httk.workflow.engine.waiting import WaitingPass
from httk.workflow.protocol import JobSpec
from httk.workflow.store.markers import Marker
from httk.workflow.store.store import LostRace, Store
from httk.workflow.store.workspaces import WorkspaceHandle
from httk.workflow.testing import (
    LAUNCH_SETTINGS,
    FakeProcessControl,
    InMemoryFilesystem,
    memory_workspace,
    outcome_document,
    scripted_runner,
)
from httk.workflow.testing.process import Behaviour
from memory_support import kinds

CHILD_JOB = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()


@attrs.define
class SmallContext:
    """A :class:`TickContext` by hand: the protocol's members and nothing else."""

    handle: WorkspaceHandle
    proc: FakeProcessControl
    config: ManagerConfig = ManagerConfig(lease_seconds=10.0)
    manager_id: str = "m-small"
    running: dict[str, Running] = attrs.Factory(dict)
    refused: dict[str, str] = attrs.Factory(dict)
    events: list[Event] = attrs.Factory(list)
    progress: int = 0

    @property
    def store(self) -> Store:
        return self.handle.store

    @property
    def clock(self) -> Any:
        return self.handle.ports.clock

    @property
    def ids(self) -> Any:
        return self.handle.ports.ids

    @property
    def host(self) -> str:
        return self.proc.hostname()

    @property
    def uid(self) -> int:
        return self.proc.uid()

    @property
    def lease(self) -> float:
        return float(self.config.lease_seconds or 10.0)

    @property
    def offer(self) -> Offer:
        return Offer(pools=frozenset(self.config.pools), capabilities=frozenset(),
                     executors=frozenset(self.config.executors), placement_prefixes=())

    def owner_record(self) -> Owner:
        return Owner(manager_id=self.manager_id, host=self.host, lease_seconds=self.lease,
                     claimed_at=self.clock.now())

    def heartbeat(self) -> None:
        pass

    def progressed(self) -> None:
        self.progress += 1

    def refuse(self, marker: Marker, reason: str) -> None:
        self.refused[str(marker.key)] = reason

    def finish(self, marker: Marker, frame: StateFrame, event: Event, changes: dict[str, Any], *,
               workdir: str | None = None) -> tuple[Marker, StateFrame] | None:
        try:
            result = self.store.transition(marker, frame, event, **changes)
        except LostRace:
            return None
        self.events.append(event)
        return result


def _small(behaviour: Behaviour | None = None, *, manager_id: str = "m-small", **spec: Any) -> SmallContext:
    ports, handle, _ = memory_workspace(**spec)
    proc = FakeProcessControl(ports.clock, behaviour or scripted_runner(ports.fs), uid=ports.fs.uid)
    return SmallContext(handle, proc, manager_id=manager_id)


def _only(ctx: TickContext, kind: StateKind) -> Marker:
    [marker] = list(ctx.store.iter_markers(kind))
    return marker


def _launch(ctx: TickContext) -> Running:
    """Register and claim the one submitted job with the passes themselves; its attempt has run."""
    Registration(ctx).register(_only(ctx, StateKind.SUBMITTED))
    Launcher(ctx, LAUNCH_SETTINGS).consider(_only(ctx, StateKind.READY))
    [running] = ctx.running.values()
    return running


def test_registration_launch_and_commit_run_on_a_small_context():
    ctx = _small()
    running = _launch(ctx)
    returncode = running.process.poll()
    assert returncode == 0  # the scripted runner published its outcome and exited
    CommitPass(ctx).commit_exited(running, returncode)
    assert kinds(ctx.handle) == {"succeeded": 1}
    assert ctx.events == [Event.COMMIT_SUCCEED]
    assert ctx.refused == {}


def test_the_commit_pass_starts_the_next_activation_with_a_new_id():
    advance = outcome_document("advance", next_step="second", priority=7)
    ports, handle, _ = memory_workspace()
    ctx = SmallContext(handle, FakeProcessControl(
        ports.clock, scripted_runner(ports.fs, lambda launch: {"outcome.json": advance}), uid=ports.fs.uid))
    running = _launch(ctx)
    first_activation = running.view.frame.activation_id
    CommitPass(ctx).commit_exited(running, running.process.poll() or 0)
    frame = ctx.store.read_frame(_only(ctx, StateKind.READY))
    assert frame is not None and ctx.events == [Event.COMMIT_ADVANCE]
    assert (frame.step, frame.activation_ordinal, frame.attempt_ordinal, frame.priority) == ("second", 2, 0, 7)
    assert frame.activation_id not in (None, first_activation)
    assert frame.owner is None and frame.process is None and frame.total_attempts == 1


def test_the_recovery_pass_gives_back_a_claim_whose_owner_stopped():
    dead = _small(manager_id="m-dead")
    Registration(dead).register(_only(dead, StateKind.SUBMITTED))
    ready = _only(dead, StateKind.READY)
    frame = dead.store.read_frame(ready)
    assert frame is not None
    # Claimed by a manager that never heartbeat and never launched.
    dead.store.transition(ready, frame, Event.CLAIM, owner=dead.owner_record(), attempt_id=dead.ids.new_id(),
                          attempt_ordinal=1, total_attempts=1)
    dead.clock.advance(1000.0)
    ctx = SmallContext(dead.handle, dead.proc, manager_id="m-live")
    recovery = Recovery(ctx, CommitPass(ctx))
    assert recovery.consider(_only(ctx, StateKind.CLAIMED))
    assert ctx.events == [Event.LEASE_RECOVERY]
    given_back = ctx.store.read_frame(_only(ctx, StateKind.READY))
    assert given_back is not None and given_back.owner is None
    assert (given_back.attempt_ordinal, given_back.total_attempts) == (0, 0)
    assert given_back.takeover is not None and given_back.takeover.rule == "claim_expired"


def test_the_recovery_pass_commits_the_published_outcome_of_an_owner_that_died():
    dead = _small(manager_id="m-dead")
    running = _launch(dead)
    assert running.process.poll() == 0  # published and exited; its manager died before the commit
    dead.clock.advance(1000.0)
    ctx = SmallContext(dead.handle, dead.proc, manager_id="m-live")
    recovery = Recovery(ctx, CommitPass(ctx))
    assert recovery.consider(_only(ctx, StateKind.RUNNING))
    assert ctx.events == [Event.PUBLISH, Event.COMMIT_SUCCEED]
    assert kinds(ctx.handle) == {"succeeded": 1}
    frame = ctx.store.read_frame(_only(ctx, StateKind.SUCCEEDED))
    assert frame is not None and frame.takeover is not None and frame.takeover.by == "m-live"


def test_the_recovery_pass_leaves_a_job_whose_owner_heartbeats():
    dead = _small(manager_id="m-owner")
    _launch(dead)
    live_owner = EngineContext(dead.handle, dead.proc, dead.config, manager_id="m-owner")
    live_owner.heartbeat(force=True)
    ctx = SmallContext(dead.handle, dead.proc, manager_id="m-other")
    assert not Recovery(ctx, CommitPass(ctx)).consider(_only(ctx, StateKind.RUNNING))
    assert ctx.events == [] and kinds(ctx.handle) == {"running": 1}


def test_a_pass_refuses_through_the_context_a_job_that_fails_the_safety_property():
    ctx = _small()
    Registration(ctx).register(_only(ctx, StateKind.SUBMITTED))
    ready = _only(ctx, StateKind.READY)
    other = SmallContext(ctx.handle, FakeProcessControl(ctx.clock, scripted_runner(ctx.handle.fs), uid=4242))
    Launcher(other, LAUNCH_SETTINGS).consider(ready)
    assert other.running == {} and kinds(ctx.handle) == {"ready": 1}
    assert "owned by uid 1000, not by this manager's uid 4242" in other.refused[str(ready.key)]


def _spawning(fs: InMemoryFilesystem, parent_id: str) -> Behaviour:
    """The parent spawns one child and waits for it; every other attempt succeeds."""
    key = JobKey("cccccccc-0000-4000-8000-000000000001", "a")
    payload = f"jobs/{key}"

    def tree(launch: Any) -> dict[str, Any]:
        if launch.env["HTTK_WORKFLOW_JOB_ID"] != parent_id or launch.env["HTTK_WORKFLOW_STEP"] != "main":
            return {"outcome.json": outcome_document()}
        child = {"label": "a", "job_id": key.job_id, "job_key": str(key), "placement": "kids", "payload": payload}
        return {
            "outcome.json": outcome_document("wait", join={"step": "after", "children": ["a"]}),
            "children/spawn.json": {"format": "httk-workflow-spawn", "format_version": 1, "children": [child]},
            f"children/{payload}/job.json": CHILD_JOB,
            f"children/{payload}/run.sh": b"#!/bin/sh\n",
        }

    return scripted_runner(fs, tree)


def _waiting_parent() -> tuple[Any, WorkspaceHandle, Marker, EngineContext, CommitPass, WaitingPass, Marker]:
    """A parent that spawned one child and waits on it, committed by the passes themselves."""
    ports, handle, [parent] = memory_workspace()
    proc = FakeProcessControl(ports.clock, _spawning(ports.fs, parent.job_id), uid=ports.fs.uid)
    ctx = EngineContext(handle, proc, ManagerConfig(lease_seconds=10.0), manager_id="m-engine")
    committer, waiting = CommitPass(ctx), WaitingPass(ctx)
    running = _launch(ctx)
    ctx.running.clear()
    committer.commit_exited(running, running.process.poll() or 0)
    return ports, handle, parent, ctx, committer, waiting, _only(ctx, StateKind.WAITING)


def test_the_waiting_pass_resolves_a_join_from_the_note_its_child_left():
    ports, handle, parent, ctx, committer, waiting, waiting_marker = _waiting_parent()
    assert not waiting.evaluate(waiting_marker)  # the child has not run yet
    running = _launch(ctx)  # the child: registered, claimed and run by the same passes
    ctx.running.clear()
    committer.commit_exited(running, running.process.poll() or 0)
    assert kinds(handle) == {"waiting": 1, "succeeded": 1}
    assert waiting.evaluate(waiting_marker)
    resumed = ctx.store.read_frame(_only(ctx, StateKind.READY))
    assert resumed is not None and resumed.job_id == parent.job_id
    assert (resumed.step, resumed.activation_ordinal) == ("after", 2)
    assert resumed.join is not None and resumed.join.resolved == "satisfied"
    # Two registrations, two claims, two commits and the join: each counted once as progress.
    assert ctx.finished == {"succeeded": 1} and ctx.progress == 7


def test_the_waiting_pass_reads_a_waiting_job_again_only_for_a_new_note_or_after_the_recheck():
    from httk.workflow.engine.waiting import RECHECK_SECONDS

    ports, handle, parent, ctx, committer, waiting, waiting_marker = _waiting_parent()
    reads: list[str] = []
    read_job = ctx.store.read_job

    def counted(marker: Marker) -> Any:
        reads.append(marker.job_id)
        return read_job(marker)

    ctx.store.read_job = counted  # type: ignore[method-assign]
    assert not waiting.evaluate(waiting_marker) and len(reads) == 1  # the child has not run yet
    assert not waiting.evaluate(waiting_marker) and len(reads) == 1  # nothing changed: not read again
    ports.clock.advance(RECHECK_SECONDS)
    assert not waiting.evaluate(waiting_marker) and len(reads) == 2  # the recheck reads it anyway
    running = _launch(ctx)  # the child runs and leaves its note
    ctx.running.clear()
    committer.commit_exited(running, running.process.poll() or 0)
    assert waiting.evaluate(waiting_marker) and reads.count(parent.job_id) == 3  # the note: read and resolved
