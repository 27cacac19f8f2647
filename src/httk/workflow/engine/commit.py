"""Committing an attempt's outcome: children, join notes, and the one transition.

A commit runs while the job's marker is ``committing`` and owned by this
manager. Every side effect is idempotent (children are verified and created by
:mod:`.children`, data by :mod:`.transactions`), so a manager that dies
mid-commit leaves work that the next owner redoes to the same result; and since
a lease is evidence, not a fence, a live owner and the manager recovering its
job may run the same commit at once: both then reach the same result, and only
the holder of the marker turns an error into a failure (:func:`apply_outcome`).
A join note names the exact terminal marker it was written for and is trusted
only while that marker exists (:func:`checked_note`). The decision itself
(advance, wait, retry, …) is the domain's :func:`~httk.workflow.domain.commit.decide_commit`:
:class:`CommitPass` observes and applies. Spec: 001 "What an attempt publishes",
"Spawning children", "Gathering them"; 000 "Clocks".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .. import codec
from ..domain.commit import AttemptEnding, activation_changes, decide_commit
from ..domain.data import decide_staged_data
from ..domain.frames import ChildRef, StateFrame
from ..domain.lifecycle import TERMINAL_NAMES, Event, StateKind, is_terminal
from ..domain.model import Failure
from ..ports import Filesystem, Ids
from ..protocol import PRIVATE_DIR, JobSpec, parse_job_bytes
from ..store.layout import Layout
from ..store.links import UntrustedLink
from ..store.markers import Marker, MarkerNameError
from ..store.store import JobDamage, LostRace, Store
from ..store.transactions import TransactionError, apply_transaction
from .children import PARENT_FILE, ChildPlan, ChildrenError, plan_children
from .outcome_reader import Outcome, read_outcome

if TYPE_CHECKING:  # the context implements the one transition with this module's join notes
    from .context import Running, TickContext

log = logging.getLogger("httk.workflow.manager")


#: The kinds a join note can name (only a terminal transition writes one).


def new_activation(frame: StateFrame, ids: Ids, step: str, **changes: Any) -> dict[str, Any]:
    """The domain's changes for a new activation at ``step`` (:func:`.commit.activation_changes`), with its id."""
    return {**activation_changes(frame, step, **changes), "activation_id": ids.new_id()}


def ending_of(outcome: Outcome, *, data_applied: bool) -> AttemptEnding:
    """What the domain decides a commit from: the outcome as read and applied."""
    spawned = tuple(ChildRef(child["label"], child["job_id"], child["job_key"], child["placement"])
                    for child in outcome.spawned)
    wait = outcome.join
    return AttemptEnding(
        action=outcome.action,
        failure=outcome.failure,
        reason=outcome.reason,
        step=outcome.step,
        priority=outcome.priority,
        join=wait,
        spawned=spawned,
        runner_steps=outcome.runner_steps,
        unclean=outcome.unclean,
        data_applied=data_applied,
    )


class CommitPass:
    """Ends attempts: an exited one is published and committed, a job held in ``committing`` is committed."""

    def __init__(self, ctx: TickContext) -> None:
        self.ctx = ctx

    def commit_exited(self, running: Running, returncode: int) -> None:
        """Publish (``running`` -> ``committing``) the attempt that exited with ``returncode``, then commit it."""
        result = self.attempt_transition(
            running, lambda frame: (Event.PUBLISH, {"notes": {**frame.notes, "returncode": returncode}})
        )
        if result is None:
            return
        marker, frame = result
        outcome = read_outcome(self.ctx.store.fs, running.plan.control, returncode)
        self.commit(marker, frame, running.view.spec, running.plan.control, outcome)

    def attempt_transition(
        self, running: Running, change: Callable[[StateFrame], tuple[Event, dict[str, Any]]]
    ) -> tuple[Marker, StateFrame] | None:
        """Move the running marker of this very attempt by ``change(frame)``; ``None`` if it is not ours now."""
        marker, frame = running.marker, running.view.frame
        for _try in range(3):
            event, changes = change(frame)
            try:
                return self.ctx.store.transition(marker, frame, event, **changes)
            except LostRace:
                # Another actor (a deferred pause applied elsewhere) may have renamed the running marker
                # of this very attempt; anything else (a cancel) means the attempt is not ours to end.
                current = self._current_running(marker, frame.attempt_id)
                if current is None:
                    log.info("job %s changed under its attempt (cancelled?); leaving it", marker.key)
                    return None
                marker, frame = current
        return None

    def _current_running(self, marker: Marker, attempt_id: str | None) -> tuple[Marker, StateFrame] | None:
        """The job's current ``running`` marker and frame if it is still the same attempt."""
        store = self.ctx.store
        for current in store.locate(marker.placement, str(marker.key), (StateKind.RUNNING,)):
            try:
                frame = store.read_frame(current)
            except JobDamage:
                return None
            if frame is not None and frame.attempt_id == attempt_id:
                return current, frame
        return None

    def commit(self, marker: Marker, frame: StateFrame, spec: JobSpec, control: str, outcome: Outcome) -> None:
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

    def _commit(self, marker: Marker, frame: StateFrame, spec: JobSpec, control: str, outcome: Outcome) -> None:
        ctx = self.ctx
        outcome, applied = apply_outcome(ctx.store, marker, frame, spec, control, outcome,
                                         applier=f"{ctx.manager_id}.g{marker.generation}",
                                         between=self._checkpoint(marker))
        decision = decide_commit(ending_of(outcome, data_applied=applied), frame, spec.retry_policy)
        changes = dict(decision.changes)
        if decision.new_activation:
            changes["activation_id"] = ctx.ids.new_id()
        if outcome.failure is not None and outcome.failure.code in ("protocol_error", "runner_exit", "runner_error"):
            log.warning("job %s attempt %d: %s", marker.key, frame.total_attempts, outcome.failure.message)
        workdir = (f"{control}/workdir" if spec.workdir_mode == "isolated"
                   else ctx.store.layout.persistent_workdir(marker.job_id))
        if ctx.finish(marker, frame, decision.event, changes, workdir=workdir) is not None:
            log.info("committed %s: %s", marker.key, decision.summary)

    def _checkpoint(self, marker: Marker) -> Callable[[], None]:
        """Called between a commit's operations and children: heartbeat, and stop once the marker is gone.

        A long commit must not make a live owner look expired; and an owner whose
        ``committing`` marker was renamed by a manager recovering it has lost the
        commit, so it stops at the next step instead of racing that manager to the end.
        """
        path = self.ctx.store.marker_path(marker)

        def checkpoint() -> None:
            self.ctx.heartbeat()
            if self.ctx.store.fs.lstat(path) is None:
                raise LostRace(marker)

        return checkpoint


def apply_outcome(
    store: Store, marker: Marker, frame: StateFrame, spec: JobSpec, control: str, outcome: Outcome, *,
    applier: str, between: Callable[[], None],
) -> tuple[Outcome, bool]:
    """Create the children and apply the data an outcome publishes; the outcome to decide on, and whether
    its transaction was applied.

    An outcome that cannot be applied becomes a failure (``protocol_error``,
    ``transaction_error``), but only once ``between`` (called before each operation and
    child too) has seen that this manager still holds the commit: when another manager
    took it over meanwhile, an error met on the way is that race, not the runner's, and
    ``between`` raises :class:`~.store.LostRace` instead.
    """

    def failed(code: str, message: str) -> Outcome:
        between()
        return Outcome("fail", failure=Failure(code, message), published=False)

    applied = False
    children: ChildPlan | None = None
    if outcome.published and outcome.spawned:
        # Verified before the data changes: an outcome whose children clash changes nothing.
        try:
            children = plan_children(store, control, outcome, marker, attempt_id=frame.attempt_id or "")
        except (ChildrenError, codec.DocumentError, OSError) as error:
            outcome = failed("protocol_error", f"children not created: {error}")
    staged = decide_staged_data(spec.data_mode, staged=bool(outcome.published and outcome.transaction))
    if staged.failure is not None:
        outcome = Outcome("fail", failure=staged.failure, published=False)
    elif staged.apply:
        try:
            apply_transaction(store.fs, store.layout, marker.job_id, control, outcome.transaction,
                              durable=store.config.durable, applier=applier, between=between)
            applied = True
        except UntrustedLink as error:
            outcome = failed("protocol_error", str(error))
        except (TransactionError, OSError) as error:
            outcome = failed("transaction_error", str(error))
    if outcome.published and children is not None:
        try:
            created = children.create(between)
        except (ChildrenError, codec.DocumentError, OSError) as error:
            outcome = failed("protocol_error", f"children not created: {error}")
        else:
            if created:
                log.info("job %s spawned %d children", marker.key, len(created))
    return outcome, applied


@attrs.frozen
class JoinNote:
    """One join note as it was written: where, and what it says (a writer that lost removes only its own)."""

    path: str
    note: dict[str, Any]


def _note_path(layout: Layout, parent_id: str, child_id: str) -> str:
    return f"{layout.control}/joins/{parent_id}/{child_id}.json"


def _parent_link(fs: Filesystem, layout: Layout, marker: Marker) -> dict[str, Any] | None:
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        link = codec.decode_object(fs.read_document(f"{payload}/{PRIVATE_DIR}/{PARENT_FILE}"), "parent.json")
    except (OSError, codec.DocumentError):  # absent, malformed, or not a small regular file
        return None
    return link if isinstance(link.get("job_id"), str) else None


#: The failure code of a cancelled job as its parent's join sees it.
CANCELLED_CODE = "cancelled"


def child_failure(kind: StateKind, failure: Failure | None) -> Failure | None:
    """The failure a parent's join reports for a child that ended ``kind`` with ``failure`` recorded.

    Spec 001: every child carries "its published failure as the canonical Failure", and
    ``a.children.failed`` holds the cancelled children too, so ``child.failure.code`` must work for
    them. A cancel transition records no failure of its own (the frame may still hold the failure
    of an attempt before it, which is not why the child ended), so a cancelled child's is this one.
    """
    if kind == StateKind.CANCELLED:
        return Failure(CANCELLED_CODE, "the job was cancelled by an operator request")
    return failure


def _build_note(
    fs: Filesystem, layout: Layout, marker: Marker, link: dict[str, Any], failure: Failure | None,
    workdir: str | None, source: Marker | None,
) -> dict[str, Any]:
    failure = child_failure(marker.kind, failure)
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        data_mode = parse_job_bytes(fs.read_document(f"{payload}/job.json"), "job.json").data_mode
    except (OSError, codec.DocumentError):
        data_mode = "none"
    return {
        "data": f"{layout.data_dir(marker.job_id)}/current" if data_mode == "transactional" else None,
        "kind": marker.kind.value,
        "failure": codec.unstructure(failure),
        "job_id": marker.job_id,
        "job_key": str(marker.key),
        "placement": marker.placement,
        "label": link.get("label"),
        "workdir": workdir,
        # The exact terminal marker this note was written for, and the marker its rename starts from.
        "marker": marker.relative_path(),
        "from": source.relative_path() if source is not None else None,
    }


def note_for_parent(
    fs: Filesystem,
    layout: Layout,
    source: Marker,
    marker: Marker,
    failure: Failure | None,
    *,
    durable: bool,
    workdir: str | None,
) -> JoinNote | None:
    """Tell a waiting parent that this child reaches the terminal ``marker`` by renaming ``source``.

    Written after the frame and before the rename makes it so (a crash in between
    leaves a note the parent's reader checks against the markers, :func:`checked_notes`).
    Parents read these notes instead of opening the terminal trees, so a gather
    costs one directory listing however large the workspace history is.
    """
    if not is_terminal(marker.kind):
        return None
    link = _parent_link(fs, layout, marker)
    if link is None:
        return None
    written = JoinNote(_note_path(layout, link["job_id"], marker.job_id),
                       _build_note(fs, layout, marker, link, failure, workdir, source))
    fs.write_atomic(written.path, codec.encode(written.note), durable=durable)
    return written


def settle_lost_note(store: Store, source: Marker, written: JoinNote) -> None:
    """After the rename of ``source`` that ``written`` announced lost: make the note match the winner.

    The note may have overwritten the winner's own (both are written before their
    renames), so it is rewritten for the winner's marker when that one is terminal,
    and removed when it is not. A winner not visible yet (a lagging view) leaves it to
    the parent's reader, which checks every note it consumes.
    """
    note = written.note
    reread_child(store, note["placement"], note["job_key"], written, after=source.generation, repair=True)


def reread_child(store: Store, placement: str, job_key: str, stale: JoinNote | None, *, after: int | None,
                 repair: bool) -> dict[str, Any] | None:
    """The note of a child's actual terminal marker (one targeted lookup), or ``None`` when it is not terminal.

    ``stale`` is a note that does not hold; ``after`` the generation its transition
    started from (``None``: unknown), so a marker seen at that generation or before is
    a lagging view, not the child's answer. With ``repair`` the note file is made to
    say what the child's marker says: rewritten for its terminal marker, or removed
    (while it still holds ``stale``) once the child is seen past that transition and
    not terminal.
    """
    fs, layout = store.fs, store.layout
    found = store.locate(placement, job_key)
    current = found[0] if found else None
    if current is None or (after is not None and current.generation <= after):
        return None
    if is_terminal(current.kind):
        link = _parent_link(fs, layout, current)
        if link is None:
            return None
        path = _note_path(layout, link["job_id"], current.job_id)
        held = _read_note(fs, path)
        if held is not None and held.get("marker") == current.relative_path():
            return held  # the winner's own note, intact
        try:
            frame = store.read_frame(current)
        except JobDamage:
            frame = None
        note = _build_note(fs, layout, current, link, frame.failure if frame is not None else None,
                           _workdir_of(fs, layout, current, frame), None)
        if repair:
            fs.write_atomic(path, codec.encode(note), durable=store.config.durable)
        return note
    if repair and stale is not None and after is not None and _read_note(fs, stale.path) == stale.note:
        try:
            fs.remove(stale.path)
        except FileNotFoundError:
            pass
    return None


def _read_note(fs: Filesystem, path: str) -> dict[str, Any] | None:
    try:
        return codec.decode_object(fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        return None


def _workdir_of(fs: Filesystem, layout: Layout, marker: Marker, frame: StateFrame | None) -> str | None:
    """An isolated job's last attempt workdir, as its commit names it; ``None`` (the persistent one) otherwise."""
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        mode = parse_job_bytes(fs.read_document(f"{payload}/job.json"), "job.json").workdir_mode
    except (OSError, codec.DocumentError):
        return None
    attempt_id = frame.attempt_id if frame is not None else None
    if mode != "isolated" or not attempt_id:
        return None
    for entry in fs.scandir(layout.job_attempts(marker.job_id)):
        if entry.name.partition("-")[2] == attempt_id:
            return f"{entry.path}/workdir"
    return None


def _marker_of(name: Any, placement: str, job_key: str) -> Marker | None:
    """The marker a note member names, when it is one of this child's; ``None`` otherwise."""
    if not isinstance(name, str):
        return None
    kind, _, rest = name.partition("/")
    at, _, base = rest.rpartition("/")
    try:
        marker = Marker.parse(kind, at, base)
    except (MarkerNameError, ValueError):
        return None
    return marker if at == placement and str(marker.key) == job_key else None


def checked_note(store: Store, placement: str, job_key: str, note: dict[str, Any], path: str, *,
                 repair: bool) -> dict[str, Any] | None:
    """``note`` if the child's terminal marker it names exists; else what the child's actual marker says.

    A note is written before its rename, so a note whose marker is absent is one of a
    rename under way (its source marker still exists: the child counts as not
    terminal yet, and the note is kept), or of a rename that lost or never came: the
    child is re-read (:func:`reread_child`). One name is read for a note that holds,
    two or three and one targeted lookup for one that does not.
    """
    fs = store.fs
    marker = _marker_of(note.get("marker"), placement, job_key)
    if marker is not None and marker.kind.value != note.get("kind"):
        marker = None  # a note must say the kind of the marker it names
    if marker is not None and fs.lstat(store.marker_path(marker)) is not None:
        return note
    source = _marker_of(note.get("from"), placement, job_key)
    if marker is not None and source is not None:
        if fs.lstat(store.marker_path(source)) is not None:
            return None  # the rename may still come
        if fs.lstat(store.marker_path(marker)) is not None:
            return note  # it came between the two reads
    return reread_child(store, placement, job_key, JoinNote(path, note),
                        after=source.generation if marker is not None and source is not None else None,
                        repair=repair)


def clear_note(fs: Filesystem, layout: Layout, marker: Marker) -> None:
    """A job leaving a terminal kind (operator continue) is no longer terminal for its parent."""
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        link = codec.decode_object(fs.read_document(f"{payload}/{PRIVATE_DIR}/{PARENT_FILE}"), "parent.json")
    except (OSError, codec.DocumentError):
        return
    try:
        fs.remove(f"{layout.control}/joins/{link.get('job_id')}/{marker.job_id}.json")
    except FileNotFoundError:
        pass


def read_notes(fs: Filesystem, layout: Layout, parent_id: str) -> dict[str, dict[str, Any]]:
    """The terminal notes of a parent's children, by child job id.

    Only :func:`note_for_parent` writes them, always naming a terminal kind: a note
    that is unreadable or names none is damage, read as no note (the child counts
    as still active), so no reader of the notes can trip over it.
    """
    notes: dict[str, dict[str, Any]] = {}
    for entry in fs.scandir(f"{layout.control}/joins/{parent_id}"):
        if entry.name.endswith(".json"):
            note = read_note(fs, entry.path)
            if note is not None:
                notes[entry.name[:-5]] = note
    return notes


def read_note(fs: Filesystem, path: str) -> dict[str, Any] | None:
    """One child's terminal note, or ``None`` when it is unreadable or names no terminal kind (damage)."""
    try:
        note = codec.decode_object(fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        return None
    return note if note.get("kind") in TERMINAL_NAMES else None
