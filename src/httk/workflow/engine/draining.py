"""Draining: the attempts a manager stops itself on SIGTERM or SIGINT (a batch system's walltime).

The first signal terminates every running attempt; each is marked as stopped by
this manager. When one exits without having published an outcome and its whole
process group is verified gone, the stop was not the job's doing: the job is
given back to ``ready`` (or ``paused``, when a pause waited for that attempt's
commit) by the recorded ``drain_release`` event, uncharged, with the reason in
its frame for ``job log`` and ``job why``. An outcome published during the drain
is committed as usual; a group that cannot be verified gone is left ``running``
for lease recovery. Spec: 000 "Run" (drain), "Taking over another manager's attempt".
"""

from __future__ import annotations

import logging
from typing import Any

from ..domain.commit import CommitDecision, decide_drained
from ..domain.frames import StateFrame
from ..domain.lifecycle import Event
from .commit import CommitPass
from .context import Running, TickContext

log = logging.getLogger("httk.workflow.manager")

#: How long SIGKILLed members of a drained attempt's group may take to vanish before it counts as unverified.
KILL_SETTLE_SECONDS = 2.0


class Drain:
    """The drain of one manager: which signal started it and what it stopped."""

    def __init__(self, ctx: TickContext, committer: CommitPass) -> None:
        self.ctx = ctx
        self.committer = committer
        self.signal: int | None = None

    def terminate(self) -> None:
        """SIGTERM every attempt the drain has not stopped yet, remembering the ones this signal reached.

        A group that no longer exists ended on its own before the drain: its exit is the job's.
        """
        for running in list(self.ctx.running.values()):
            if not running.drained:
                running.drained = self.ctx.proc.terminate_group(running.process.identity.pgid)

    def release(self, running: Running, returncode: int) -> None:
        """Give back, uncharged, the job of an attempt the drain stopped and that published nothing.

        Only once the attempt's whole process group is verified gone: otherwise a
        second writer could join the survivors in a persistent workdir, so the job
        stays ``running`` under this manager's (soon stopped) lease for lease recovery.
        """
        ctx = self.ctx
        pgid = running.process.identity.pgid
        if not self._group_gone(pgid):
            log.warning("job %s: the drained attempt's process group %d survives SIGKILL; leaving the job to "
                        "lease recovery", running.marker.key, pgid)
            return
        reason = (f"drained: manager {ctx.manager_id} stopped attempt {running.view.frame.attempt_ordinal} on "
                  f"signal {self.signal} (exit status {returncode}); process group {pgid} verified gone on "
                  f"{ctx.host}; not charged to the budgets")
        decided: list[CommitDecision] = []

        def change(frame: StateFrame) -> tuple[Event, dict[str, Any]]:
            decided.append(decide_drained(frame, reason))
            return decided[-1].event, dict(decided[-1].changes)

        if self.committer.attempt_transition(running, change) is not None:
            ctx.progressed()
            log.info("job %s: %s", running.marker.key, decided[-1].summary)

    def _group_gone(self, pgid: int) -> bool:
        """Whether process group ``pgid`` is gone, allowing SIGKILLed members a moment to die."""
        clock = self.ctx.clock
        deadline = clock.monotonic() + KILL_SETTLE_SECONDS
        while self.ctx.proc.group_alive(pgid):
            if clock.monotonic() >= deadline:
                return False
            clock.sleep(0.02)
        return True
