"""The waiting pass: resolve joins from the children's terminal notes.

A parent learns its children's outcomes from ``joins/<parent-id>/`` (written by
whoever made each child terminal), so evaluating a gather of thousands of
children is one directory listing and never opens the terminal state trees. A
child with no note whose payload is gone cannot be resolved here; the first
instant that is seen is persisted in the parent's frame, so the grace survives
a manager restart. Spec: 001 "Gathering them"; 000 "Unresolvable join children".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from .. import codec
from ..domain import budgets
from ..domain.frames import StateFrame
from ..domain.joins import JoinAction, JoinDecision, resolve_join
from ..domain.lifecycle import Event, StateKind
from ..domain.model import Failure, JoinSpec, ValidationError
from ..ports import Filesystem
from ..protocol import parse_job_bytes
from ..store.layout import Layout
from ..store.markers import Marker
from ..store.store import UNRESOLVABLE_CHILD, JobView, Store, current_kinds
from .commit import checked_note, child_failure, new_activation, read_note, read_notes
from .context import TickContext, read_or_refuse
from .registration import owned_by_me

log = logging.getLogger("httk.workflow.manager")


#: The stand-in kind of a child that has no terminal note but whose payload exists: somewhere active.
ACTIVE_CHILD = StateKind.SUBMITTED


def child_kinds(
    fs: Filesystem, layout: Layout, frame: StateFrame, notes: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, StateKind | None]:
    """Each join child's kind by label: its terminal note's kind, ``ACTIVE_CHILD``, or ``None`` (unresolvable).

    The one classification of join children: the waiting pass decides from it and ``job why`` reports it.
    ``notes`` are the children's notes when already read (and checked, :func:`checked_notes`).
    """
    if notes is None:
        notes = read_notes(fs, layout, frame.job_id)
    kinds: dict[str, StateKind | None] = {}
    for child in frame.join.children if frame.join is not None else ():
        note = notes.get(child.job_id)
        if note is not None:
            kinds[child.label] = StateKind(note["kind"])
        elif fs.exists(layout.payload(child.placement, child.job_key)):
            kinds[child.label] = ACTIVE_CHILD
        else:
            kinds[child.label] = None
    return kinds


def checked_notes(store: Store, frame: StateFrame, notes: Mapping[str, dict[str, Any]], *,
                  repair: bool) -> dict[str, dict[str, Any]]:
    """The notes of a join's children that match each child's actual terminal marker (:func:`.commit.checked_note`).

    A note whose rename lost or never came is replaced by what the child's marker
    says (and, with ``repair``, rewritten or removed). Costs one name per noted child,
    so it is called only when a decision is about to rest on the notes.
    """
    checked: dict[str, dict[str, Any]] = {}
    directory = f"{store.layout.control}/joins/{frame.job_id}"
    for child in frame.join.children if frame.join is not None else ():
        note = notes.get(child.job_id)
        if note is None:
            continue
        note = checked_note(store, child.placement, child.job_key, note,
                            f"{directory}/{child.job_id}.json", repair=repair)
        if note is not None:
            checked[child.job_id] = note
    return checked


def join_decision(
    fs: Filesystem, layout: Layout, frame: StateFrame, *, now: float, grace_seconds: float,
    notes: Mapping[str, dict[str, Any]] | None = None,
) -> JoinDecision:
    """The domain's decision for a waiting job's recorded join; raises ``ValidationError`` for a bad join."""
    join = frame.join
    if join is None:
        raise ValidationError("the frame records no join")
    spec_join = JoinSpec(
        step=join.step,
        when=join.when,
        count=join.count,
        on_impossible=join.on_impossible,
        children=tuple((child.label, child.job_key) for child in join.children),
    )
    return resolve_join(
        spec_join,
        child_kinds(fs, layout, frame, notes),
        first_unresolved_at=join.first_unresolved_at,
        now=now,
        grace_seconds=grace_seconds,
    )


#: A waiting job is read afresh (frame and notes) after this many seconds at the latest, whatever
#: the remembered view says (a child's payload can leave without a note: it then becomes
#: unresolvable; a note can be replaced under its name).
RECHECK_SECONDS = 30.0
#: At most this many waiting jobs are remembered (the memory of the pass stays bounded).
REMEMBERED_WAITS = 4096
#: What :meth:`WaitingPass._evaluate` returns for a verdict it must not act on without a fresh read.
_REREAD = object()
#: What it returns for a ``WAIT`` reached after checking (and perhaps repairing) notes: remember nothing.
_FORGET = object()


@attrs.define
class _Remembered:
    """What the pass last read of one waiting job: valid while its marker is the same and not stale."""

    marker_name: str
    view: JobView
    notes: dict[str, dict[str, Any]]
    read_at: float
    #: The note names of the last listing, and whether it then had to wait on time alone.
    listed: frozenset[str] = frozenset()
    waited_unchanged: bool = False


class WaitingPass:
    """Join evaluation for one manager.

    A join's decision depends on its job's frame (named by its marker, so immutable
    under one name), its children's notes and, for children without a note, whether
    their payloads exist. Reading the frame of a gather of thousands of children and
    every note again at every tick made a fan-out quadratic, so the pass remembers
    both per waiting job: each tick lists the note names, reads only the new ones, and
    decides on the remembered rest. A ``WAIT`` may rest on them; any other verdict is
    decided again from a fresh read (and the notes checked against the children's
    markers) before it is acted on, and everything is read afresh after
    :data:`RECHECK_SECONDS`.
    """

    def __init__(self, ctx: TickContext) -> None:
        self.ctx = ctx
        self._remembered: dict[str, _Remembered] = {}

    def evaluate(self, marker: Marker) -> bool:
        """Resolve one waiting job's join; True when it transitioned."""
        ctx = self.ctx
        fs = ctx.store.fs
        now = ctx.clock.monotonic()
        directory = f"{ctx.store.layout.control}/joins/{marker.job_id}"
        listed = frozenset(entry.name for entry in fs.scandir(directory) if entry.name.endswith(".json"))
        seen = self._remembered.pop(marker.job_id, None)
        if seen is not None and (seen.marker_name != marker.name or now - seen.read_at >= RECHECK_SECONDS):
            seen = None
        if seen is not None and seen.waited_unchanged and seen.listed == listed:
            self._remembered[marker.job_id] = seen  # nothing a decision rests on changed
            return False
        fresh = seen is None
        if seen is None:
            view = read_or_refuse(ctx, marker, "waiting job unreadable")
            if view is None:
                return False
            seen = _Remembered(marker.name, view, {}, now)
        for name in seen.listed - listed:
            seen.notes.pop(name[:-5], None)
        for name in listed - seen.listed:
            note = read_note(fs, f"{directory}/{name}")
            if note is not None:
                seen.notes[name[:-5]] = note
        seen.listed = listed
        decided = self._evaluate(marker, seen.view, seen.notes, fresh=fresh)
        if decided is _FORGET:
            return False
        if decided is _REREAD:
            # A decision rests on what the job and its notes say now, not on what was remembered.
            view = read_or_refuse(ctx, marker, "waiting job unreadable")
            if view is None:
                return False
            # Not remembered afterwards: the notes may have been repaired (rewritten or removed) on the way.
            return self._evaluate(marker, view, read_notes(fs, ctx.store.layout, marker.job_id), fresh=True) is True
        if decided is True:
            return True
        seen.waited_unchanged = decided is None
        if len(self._remembered) >= REMEMBERED_WAITS:
            self._remembered.clear()
        self._remembered[marker.job_id] = seen
        return False

    def _evaluate(self, marker: Marker, view: JobView, notes: Mapping[str, dict[str, Any]], *,
                  fresh: bool) -> bool | None | object:
        """One decision on ``view`` and ``notes``: True when it transitioned, ``None`` for a ``WAIT``
        that only a new note (or time) can end, False for anything else that did not transition.

        A verdict other than ``WAIT`` reached on remembered reads (``fresh`` false) is not
        acted on: :data:`_REREAD` asks for a fresh read first.
        """
        ctx = self.ctx
        frame, spec = view.frame, view.spec
        join = frame.join
        if join is None or spec is None or not owned_by_me(ctx, marker):
            return False
        fs, layout = ctx.store.fs, ctx.store.layout
        try:
            decision = join_decision(fs, layout, frame, now=ctx.clock.now(),
                                     grace_seconds=ctx.config.join_grace_seconds, notes=notes)
            checked = decision.action != JoinAction.WAIT
            if checked and not fresh:
                return _REREAD
            if checked:
                # The notes are consumed now: each must match its child's terminal marker (a note
                # whose rename lost must not fail a parent whose children all succeeded).
                decision = join_decision(fs, layout, frame, now=ctx.clock.now(),
                                         grace_seconds=ctx.config.join_grace_seconds,
                                         notes=checked_notes(ctx.store, frame, notes, repair=True))
        except (ValidationError, KeyError) as error:
            # A join recorded before its rule was checked at commit: report it, never crash the pass.
            ctx.refuse(marker, f"its recorded join is invalid: {error}")
            return False
        action = decision.action
        if action == JoinAction.WAIT:
            if checked:
                return _FORGET  # the check may have repaired notes: what was read is not the disk now
            return None if not decision.unresolved else False
        if action == JoinAction.NOTE_UNRESOLVED:
            log.warning("job %s: children %s cannot be resolved here; failing after %.0fs",
                        marker.key, ", ".join(decision.unresolved), ctx.config.join_grace_seconds)
            noted = attrs.evolve(join, first_unresolved_at=decision.first_unresolved_at)
            return ctx.finish(marker, frame, Event.JOIN_NOTE, {"join": noted}) is not None
        if action in (JoinAction.SATISFIED, JoinAction.IMPOSSIBLE_ADVANCE):
            step = decision.next_step or join.step
            verdict = budgets.can_advance(spec.retry_policy, budgets.counters_of(frame))
            if not verdict.allowed:
                failure = Failure(verdict.failure_code or "activations_exhausted", verdict.reason)
                return ctx.finish(marker, frame, Event.JOIN_IMPOSSIBLE_FAIL,
                                  {"failure": failure}) is not None
            event = Event.JOIN_SATISFIED if action == JoinAction.SATISFIED else Event.JOIN_IMPOSSIBLE_ADVANCE
            changes = new_activation(frame, ctx.ids, step, join=attrs.evolve(join, resolved=action.value),
                                     failure=None)
            log.info("job %s: join %s; next step %r", marker.key, action.value, step)
            return ctx.finish(marker, frame, event, changes) is not None
        failure = Failure(
            "dependency_failure",
            decision.reason,
            {"blocking": list(decision.blocking), "unresolved": list(decision.unresolved)},
        )
        event = Event.JOIN_UNRESOLVABLE if action == JoinAction.UNRESOLVABLE_FAIL else Event.JOIN_IMPOSSIBLE_FAIL
        log.info("job %s: join failed: %s", marker.key, decision.reason)
        return ctx.finish(marker, frame, event, {"failure": failure}) is not None


def _data_of(fs: Filesystem, layout: Layout, job_id: str, payload: str) -> str | None:
    try:
        spec = parse_job_bytes(fs.read_document(f"{payload}/job.json"), f"{payload}/job.json")
    except (OSError, codec.DocumentError):
        return None
    return f"{layout.data_dir(job_id)}/current" if spec.data_mode == "transactional" else None


def children_context(fs: Filesystem, layout: Layout, frame: StateFrame) -> list[dict[str, Any]]:
    """The ``children`` of context.json: the join that started this activation, else empty.

    Read from disk when the context is built (never from the waiting pass's remembered view):
    a child's ``kind`` is its terminal note's, else the kind of its marker now — a join satisfied
    early (``any_succeeded``, ``at_least``) leaves children ``ready``, ``running``, ``waiting``...
    """
    join = frame.join
    if join is None or not join.resolved:
        return []
    notes = read_notes(fs, layout, frame.job_id)
    kinds = current_kinds(fs, layout, [child for child in join.children if child.job_id not in notes])
    out = []
    for child in join.children:
        note = notes.get(child.job_id)
        payload = layout.payload(child.placement, child.job_key)
        if note is None:
            current = kinds.get(child.job_id)
            note = {"kind": current.value if current is not None else UNRESOLVABLE_CHILD,
                    "data": _data_of(fs, layout, child.job_id, payload)}
        failure = note.get("failure")
        if note.get("kind") == StateKind.CANCELLED.value:
            failure = codec.unstructure(child_failure(StateKind.CANCELLED, None))  # also for an older note
        out.append(
            {
                "label": child.label,
                "job_id": child.job_id,
                "job_key": child.job_key,
                "kind": note.get("kind"),
                "failure": failure,
                "payload": payload,
                "workdir": note.get("workdir") or layout.persistent_workdir(child.job_id),
                "data": note.get("data"),
            }
        )
    return out
