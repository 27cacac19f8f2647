"""Registration, and the safety property every pass checks before it acts on a job.

A submitted job is registered (``submitted`` -> ``ready`` at its initial step) by
a manager that serves its executor. Before any pass changes a job it checks the
safety property (:func:`owned_by_me`): the job's marker, payload directory and
``job.json`` are regular, not symbolic links, and owned by the manager's own
account. Spec: 000 "Run" (the safety property).
"""

from __future__ import annotations

import logging

from ..domain.lifecycle import Event
from ..store.markers import Marker
from ..store.store import LostRace
from .context import TickContext, read_or_refuse

log = logging.getLogger("httk.workflow.manager")


def safety_problem(ctx: TickContext, marker: Marker) -> str | None:
    """Which check of the safety property fails (``""``: a name is gone), or ``None`` when all hold."""
    store, uid = ctx.store, ctx.uid
    payload = store.payload_dir(marker)
    for what, path, want_dir in (
        ("marker", store.marker_path(marker), False),
        ("payload directory", payload, True),
        ("job.json", f"{payload}/job.json", False),
    ):
        info = store.fs.lstat(path)
        if info is None:
            return ""
        if info.is_symlink:
            return f"its {what} {path} is a symbolic link"
        if info.uid != uid:
            return f"its {what} {path} is owned by uid {info.uid}, not by this manager's uid {uid}"
        if want_dir != info.is_dir or (not want_dir and not info.is_file):
            return f"its {what} {path} is not a {'directory' if want_dir else 'regular file'}"
    return None


def owned_by_me(ctx: TickContext, marker: Marker) -> bool:
    """The safety property: marker, payload and job.json are regular, non-symlink, ours.

    A job it refuses is refused like any other (logged once, counted in the summary,
    named by ``job why`` with the check that failed); a name that vanished meanwhile
    (another manager moved the marker) is no refusal.
    """
    problem = safety_problem(ctx, marker)
    if problem:
        ctx.refuse(marker, f"the safety property refuses it: {problem}")
    return problem is None


class Registration:
    """The registration pass of one manager."""

    def __init__(self, ctx: TickContext) -> None:
        self.ctx = ctx

    def register(self, marker: Marker) -> None:
        """Register one submitted job at its initial step, or refuse it."""
        ctx = self.ctx
        view = read_or_refuse(ctx, marker, "cannot register")
        if view is None:
            return
        if view.spec is None:
            ctx.refuse(marker, f"cannot register: {view.spec_error}")
            return
        if view.spec.executor not in ctx.offer.executors or not owned_by_me(ctx, marker):
            return
        try:
            ctx.store.transition(
                marker,
                view.frame,
                Event.REGISTER,
                step=view.spec.initial_step,
                activation_id=ctx.ids.new_id(),
                activation_ordinal=1,
            )
        except LostRace:
            return
        log.info("registered %s at %s", marker.key, marker.placement)
        ctx.progressed()
