"""Claiming and launching: the best ready jobs within the window become running attempts.

A claim is the marker rename ``ready`` → ``claimed``; the attempt is prepared
(verified runner copy, workdir, context), the runner is started behind its
closed launch gate, the ``running`` marker recording its process identity is
committed, and only then is the gate released. A runner whose manager vanished
before that sees end-of-file on the gate and never runs. Spec: 000 "Runner
contract", "Scheduling".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from .. import codec
from ..domain import budgets
from ..domain.frames import ProcessRecord
from ..domain.lifecycle import Event
from ..domain.model import Failure
from ..domain.scheduling import Candidate, Requirements, best_within_window, mismatches
from ..store.markers import Marker
from ..store.store import JobDamage, JobView, LostRace
from .attempts import LaunchRefused, LaunchSettings, prepare_attempt
from .context import Running, TickContext
from .registration import owned_by_me
from .waiting import children_context

log = logging.getLogger("httk.workflow.manager")


class Launcher:
    """The claiming pass of one manager."""

    def __init__(self, ctx: TickContext, settings: LaunchSettings) -> None:
        self.ctx = ctx
        #: How attempts start on this host, naming this manager.
        self.settings = settings

    def window(self, markers: list[Marker]) -> Iterator[Marker]:
        """The ready markers to claim, best first, while a worker slot is free.

        The caller handles each one (:meth:`consider`) under its own containment, so one
        job's fault refuses that job and the rest of the window is still claimed.
        """
        candidates = [Candidate(marker.priority, marker.relative_path(), marker) for marker in markers]
        for candidate in best_within_window(candidates, len(candidates)):
            if len(self.ctx.running) >= self.ctx.config.workers:
                return
            marker = candidate.item
            assert isinstance(marker, Marker)
            yield marker

    def consider(self, marker: Marker) -> None:
        """Claim and launch one ready job if this manager may."""
        try:
            view = self.ctx.store.read_job(marker)
        except JobDamage as damage:
            self.ctx.refuse(marker, f"not claimable: {damage}")
            return
        if view.spec is None:
            self.ctx.refuse(marker, f"not claimable: {view.spec_error}")
            return
        requirements = Requirements(
            pool=view.spec.pool,
            capabilities=frozenset(view.spec.capabilities),
            executor=view.spec.executor,
            placement=marker.placement,
        )
        if mismatches(self.ctx.offer, requirements) or not owned_by_me(self.ctx, marker):
            return
        try:
            # Read before the claim: an unreadable settings.json leaves the job ready, refused by name,
            # and the next tick after the file is fixed launches it.
            settings = self.ctx.handle.settings()
        except codec.DocumentError as error:
            self.ctx.refuse(marker, f"not claimable: {error}")
            return
        self.claim_and_launch(marker, view, settings)

    def claim_and_launch(self, marker: Marker, view: JobView, settings: dict[str, Any]) -> None:
        frame = view.frame
        spec = view.spec
        assert spec is not None
        budget = budgets.may_start(spec.retry_policy, budgets.counters_of(frame), budgets.Start.CLAIM)
        if not budget.allowed:
            self._fail_unstarted(marker, view, budget)
            return
        previous_attempt = frame.attempt_id
        previous_takeover = frame.takeover
        owner = self.ctx.owner_record()
        try:
            claimed, frame = self.ctx.store.transition(
                marker,
                frame,
                Event.CLAIM,
                owner=owner,
                attempt_id=self.ctx.ids.new_id(),
                attempt_ordinal=frame.attempt_ordinal + 1,
                total_attempts=frame.total_attempts + 1,
                activation_id=frame.activation_id or self.ctx.ids.new_id(),
                activation_ordinal=max(frame.activation_ordinal, 1),
                takeover=None,
                # An earlier attempt's exit status must never be mistaken for this one's.
                notes={key: value for key, value in frame.notes.items() if key != "returncode"},
            )
        except LostRace:
            return
        self.ctx.progressed()
        log.info("claimed %s (step %s, attempt %d)", marker.key, frame.step, frame.attempt_ordinal)
        view = JobView(claimed, frame, spec)
        try:
            plan = prepare_attempt(
                self.ctx.store.fs,
                self.ctx.store.layout,
                self.settings,
                workspace_id=self.ctx.handle.workspace_id,
                durable=self.ctx.handle.durable,
                marker=claimed,
                frame=frame,
                spec=spec,
                workspace_settings=settings,
                children=children_context(self.ctx.store.fs, self.ctx.store.layout, frame),
                restart={
                    "previous_attempt_id": previous_attempt,
                    "unclean": frame.unclean_exits > 0,
                    "takeover": codec.unstructure(previous_takeover),
                    "last_failure": codec.unstructure(frame.failure),
                },
                now=self.ctx.clock.now(),
                uid=self.ctx.uid,
            )
        except LaunchRefused as refused:
            log.warning("job %s: %s", marker.key, refused)
            self.ctx.finish(claimed, frame, Event.LAUNCH_FAILED, {"owner": None, "failure": refused.failure})
            return
        launched = self.ctx.proc.launch(
            plan.argv,
            cwd=plan.workdir,
            env=plan.env,
            stdout_path=f"{plan.control}/stdout.log",
            stderr_path=f"{plan.control}/stderr.log",
        )
        identity = launched.identity
        process = ProcessRecord(host=identity.host, pid=identity.pid, start_ticks=identity.start_ticks,
                                pgid=identity.pgid, control=plan.control)
        try:
            running, frame = self.ctx.store.transition(claimed, frame, Event.LAUNCH, process=process)
        except LostRace:
            # Someone (an operator cancel) took the claim: the gate stays shut, the runner never runs.
            launched.abandon()
            launched.close()
            return
        except BaseException:
            # Whatever stops this launch keeps the gate shut: an unrecorded runner must never run.
            launched.abandon()
            launched.close()
            raise
        launched.release()
        self.ctx.running[marker.job_id] = Running(running, JobView(running, frame, spec), plan, launched)
        log.info("launched %s pid %d: %s", marker.key, identity.pid, " ".join(plan.argv))

    def _fail_unstarted(self, marker: Marker, view: JobView, budget: budgets.BudgetDecision) -> None:
        """A ready job whose budget is spent fails at its claim, without starting (or counting) an attempt.

        Every decision that makes a job ready checks the budget first; this is the last
        gate, for a job made ready by an older version or by hand.
        """
        try:
            claimed, frame = self.ctx.store.transition(marker, view.frame, Event.CLAIM,
                                                       owner=self.ctx.owner_record())
        except LostRace:
            return
        failure = Failure(budget.failure_code or budgets.ATTEMPTS_EXHAUSTED, f"no attempt started: {budget.reason}")
        log.warning("job %s: %s", marker.key, failure.message)
        self.ctx.finish(claimed, frame, Event.LAUNCH_FAILED,
                      {"owner": None, "failure": failure, "reason": budget.reason})
