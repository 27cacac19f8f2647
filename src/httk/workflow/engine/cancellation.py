"""Fenced, verified cancellation of a running attempt.

The marker is renamed ``running`` → ``cancelling`` first, which fences the
attempt so it can no longer commit. Only then is the process group sent
SIGTERM, SIGKILL after the grace, and only a verified exit moves the job to
``cancelled``, with how it was verified recorded in the terminal frame. A
process recorded on another host cannot be proven stopped here: the job stays
``cancelling`` and a warning is logged on every retry. The procedure is
non-blocking (a tick never waits out the grace) and restartable: a manager that
dies mid-cancel leaves ``cancelling`` and the next one finishes it once the
takeover table admits it (the owner's lease expired), from the same verdict the
recovery pass and ``job why`` use. Spec: 000 "Cancelling a running job".
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from ..domain.frames import StateFrame
from ..domain.lifecycle import Event
from ..domain.takeover import TakeoverAction
from ..store.markers import Marker
from .context import TickContext, read_or_refuse
from .recovery import Recovery
from .registration import owned_by_me

log = logging.getLogger("httk.workflow.manager")


@attrs.define
class Pending:
    marker: Marker
    frame: StateFrame
    pgid: int
    started: float
    killed: bool = False


class Cancellation:
    """The cancellations this manager is carrying out."""

    def __init__(self, ctx: TickContext, recovery: Recovery) -> None:
        self.ctx = ctx
        self.recovery = recovery
        self.pending: dict[str, Pending] = {}

    def start(self, marker: Marker, frame: StateFrame) -> bool:
        """Begin (or resume) the signal procedure for a ``cancelling`` job; False when it is not ours to do."""
        ctx = self.ctx
        process = frame.process
        if process is None or not process.pid:
            return self._verified(marker, frame, {"method": "none", "verified": "no process was ever launched"})
        host = process.host
        if host != ctx.host:
            log.warning("job %s: cancelling, but its process ran on host %s; it cannot be proven stopped from "
                        "%s. Run a manager on %s to finish the cancellation", marker.key, host, ctx.host, host)
            return False
        pgid = process.pgid or process.pid
        ctx.proc.terminate_group(pgid)
        self.pending[marker.job_id] = Pending(marker, frame, pgid, ctx.clock.monotonic())
        log.info("job %s: SIGTERM sent to process group %d", marker.key, pgid)
        return False

    def consider(self, marker: Marker) -> bool:
        """A ``cancelling`` marker found by the pass: finish it if it is ours or its owner is gone."""
        ctx = self.ctx
        if marker.job_id in self.pending:
            return False
        view = read_or_refuse(ctx, marker, "cancelling job unreadable")
        if view is None:
            return False
        if not owned_by_me(ctx, marker):
            return False
        if view.frame.owner_id != ctx.manager_id:
            # Another manager's fenced procedure: finish it only when the takeover table admits it.
            verdict = self.recovery.judge(view)
            if verdict is None or verdict.action != TakeoverAction.FINISH:
                self.recovery.note(marker, verdict)
                return False
            log.info("job %s: %s", marker.key, verdict.message)
        return self.start(marker, view.frame)

    def poll(self) -> bool:
        """Advance every pending cancellation; True when a job became ``cancelled``."""
        ctx = self.ctx
        changed = False
        for job_id, pending in list(self.pending.items()):
            if not ctx.proc.group_alive(pending.pgid):
                del self.pending[job_id]
                running = ctx.running.pop(job_id, None)
                if running is not None:
                    running.process.poll()
                    running.process.close()
                method = "sigkill" if pending.killed else "sigterm"
                evidence = {
                    "method": method,
                    "verified": f"process group {pending.pgid} gone on host {ctx.host}",
                    "seconds": round(ctx.clock.monotonic() - pending.started, 3),
                }
                changed |= self._verified(pending.marker, pending.frame, evidence)
            elif not pending.killed and ctx.clock.monotonic() - pending.started >= ctx.config.kill_grace:
                ctx.proc.kill_group(pending.pgid)
                pending.killed = True
                log.warning("job %s: process group %d ignored SIGTERM for %.0fs; SIGKILL sent",
                            pending.marker.key, pending.pgid, ctx.config.kill_grace)
        return changed

    def _verified(self, marker: Marker, frame: StateFrame, evidence: dict[str, Any]) -> bool:
        ctx = self.ctx
        notes = {**frame.notes, "cancellation": evidence}
        result = ctx.finish(marker, frame, Event.CANCEL_VERIFIED, {"notes": notes, "owner": None, "process": None})
        if result is not None:
            log.info("job %s cancelled (%s)", marker.key, evidence["verified"])
        return result is not None
