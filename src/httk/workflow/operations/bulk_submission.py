"""Bulk submission: many prepared payloads become jobs with grouped syncs.

The result on disk is exactly what one :func:`.submission.submit` per payload
leaves (the same id reservations, staged and placed payloads, generation-0
markers, in the same order per job); only the fsyncs are grouped. Every payload
is checked first, by the single submission's own checks
(:func:`.submission.plan_submission`; what repeats, a pinned runner, a job.json
content, a path shape, is checked once per batch): one bad payload refuses the
whole batch with one line naming it, and nothing is written. :func:`submit_specs`
is the one-pass form for job definitions: each job.json is written where a copy
would be staged. Then, per chunk of jobs:

1. the missing directories (id buckets, placements, marker directories), each new
   name's parent synced once;
2. the id reservations (:func:`.job_ids.reserve_job_ids`): written beside their
   names, synced together, renamed into place, each bucket synced once;
3. the payloads: copied to ``tmp/submit-<id>-<token>`` (the batch's own names) a slice
   of 1,000 at a time (one at a time without syncs), each slice's copies synced together
   and renamed into place, then each placement directory and ``tmp/`` synced once
   (``move``: the sources synced together, then renamed into place, each directory
   involved synced once);
4. the markers (:meth:`.store.Store.create_submitted_many`), after every payload
   of the chunk is durable; each marker directory synced once.

A crash at any point leaves each job submitted in full or absent: a marker is
created only once its payload and reservation are durable, and what a crash can
leave without a marker (a reservation, a staged copy, an ``orphaned_payload``) is
what a single submission interrupted at the same step leaves. Generation 0 has no
journal frame (its marker names ``init``), so nothing is appended to the journal.
Spec: 000 "Submit a job"; docs/workflow_filesystem_api.md "Job ids", "Markers".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

import attrs

from ..domain.lifecycle import StateKind
from ..protocol import JOB_FILE, JobSpec
from ..store.job_ids import JobIdTaken, Reservation, release_job_id, reserve_job_ids
from ..store.markers import Marker
from ..store.workspaces import WorkspaceHandle
from .submission import (
    Planned,
    SubmissionError,
    Submitted,
    check_runner,
    id_refusal,
    missing_ancestors,
    plan_spec,
    plan_submission,
    staging_token,
    write_refusal,
)

#: What a batch does, in order; :data:`Progress` is told each phase's jobs as they are done.
PHASES = ("checking", "reserving", "copying", "publishing")
#: ``progress(phase, jobs)``: ``jobs`` more jobs went through ``phase``; each phase totals the batch.
Progress = Callable[[str, int], None]
#: Jobs per group commit: large enough that the grouped directory syncs are rare, small enough
#: that a failed write rolls back little and a crash loses at most one chunk's unsynced work.
DEFAULT_CHUNK = 10_000
#: Staged copies synced together and renamed into place before the next are made (durable only).
_STAGED_SLICE = 1000
#: Progress is reported every this many jobs (and at the end of each phase).
_TICK = 100


class BulkSubmissionError(SubmissionError):
    """A write failed part way through a batch: ``submitted`` were submitted, the others were not.

    Also raised with no job submitted when taking a failed chunk back left something
    behind (named in the message): either way the workspace is not as it was.
    """

    def __init__(self, message: str, submitted: Sequence[Submitted]) -> None:
        super().__init__(message)
        self.submitted = list(submitted)


def submit_many(
    workspace: WorkspaceHandle,
    payloads: Sequence[str],
    placement: str | Sequence[str],
    *,
    move: bool = False,
    tag: str | None = None,
    allow_missing_runner: bool = False,
    progress: Progress | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> list[Submitted]:
    """Submit every payload directory of ``payloads`` and return the new jobs, in order.

    ``placement`` is one placement for all, or one per payload. Raises
    :class:`SubmissionError` (nothing written) when any payload cannot be submitted,
    and :class:`BulkSubmissionError` when a write fails after earlier chunks were
    submitted (the jobs of the failing chunk are taken back).
    """
    places = _placements(placement, len(payloads), chunk, "payload")
    tick = _Ticker(progress)
    planned = _plan_all(workspace, payloads, places, move=move, tag=tag, allow_missing=allow_missing_runner,
                        tick=tick)
    return _write_all(workspace, planned, move=move, tick=tick, chunk=chunk)


def submit_specs(
    workspace: WorkspaceHandle,
    specs: Sequence[JobSpec],
    placement: str | Sequence[str],
    *,
    tag: str | None = None,
    allow_missing_runner: bool = False,
    progress: Progress | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> list[Submitted]:
    """Submit one job per definition of ``specs`` in one pass, and return the new jobs, in order.

    The jobs are those ``prepare_job_payloads`` of each spec and then :func:`submit_many`
    with ``move=True`` make, payload ``job.json`` alone, but no payload directory is
    prepared, read back or moved: each job.json is written straight into the staging area
    (``tmp/submit-<id>-<token>/``) and renamed into place, with the syncs grouped as
    :func:`submit_many` groups them. The same refusals (a spec naming its index and
    name; nothing written) and the same crash guarantee.
    """
    places = _placements(placement, len(specs), chunk, "spec")
    tick = _Ticker(progress)
    runner_check = _runner_checker(workspace, allow_missing=allow_missing_runner)
    planned: list[Planned] = []
    shapes: set[tuple[object, ...]] = set()
    token = staging_token(workspace)
    for index, (spec, place) in enumerate(zip(specs, places, strict=True)):
        label = f"job spec {index + 1} (name {spec.name!r})" if isinstance(spec, JobSpec) else f"job spec {index + 1}"
        if not isinstance(spec, JobSpec):
            raise SubmissionError(f"{label} is a {type(spec).__name__}, not a JobSpec; pass JobSpec objects")
        try:
            planned.append(plan_spec(workspace, spec, place, label=label, tag=tag, runner_check=runner_check,
                                     shapes=shapes, token=token))
        except SubmissionError as error:
            raise SubmissionError(_naming(label, index, len(specs), str(error), noun="spec")) from None
        tick("checking")
    tick.flush("checking")
    return _write_all(workspace, planned, move=False, tick=tick, chunk=chunk)


def _placements(placement: str | Sequence[str], count: int, chunk: int, noun: str) -> list[str]:
    """One placement per job (``placement`` is one for all, or one each); refused when the counts differ."""
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, not {chunk}")
    places = [placement] * count if isinstance(placement, str) else list(placement)
    if len(places) != count:
        raise SubmissionError(f"{count} {noun}s but {len(places)} placements; give one placement per {noun}")
    return places


def _write_all(workspace: WorkspaceHandle, planned: Sequence[Planned], *, move: bool, tick: _Ticker,
               chunk: int) -> list[Submitted]:
    submitted: list[Submitted] = []
    for start in range(0, len(planned), chunk):
        submitted.extend(_write_chunk(workspace, planned[start : start + chunk], submitted, move=move,
                                      total=len(planned), tick=tick))
    return submitted


def _runner_checker(workspace: WorkspaceHandle, *, allow_missing: bool) -> Callable[[JobSpec, str | None], str | None]:
    """:func:`.submission.check_runner`, once per distinct pinned runner of the batch."""
    runners: dict[tuple[str, str, str | None], str | None] = {}

    def runner_check(spec: JobSpec, payload: str | None) -> str | None:
        # Many jobs pin one runner: resolve and digest it once per batch.
        identity = (spec.runner_source, spec.runner_path, spec.runner_sha256)
        if identity not in runners:
            runners[identity] = check_runner(workspace, spec, allow_missing=allow_missing, payload=payload)
        return runners[identity]

    return runner_check


def _plan_all(
    workspace: WorkspaceHandle, payloads: Sequence[str], places: Sequence[str], *, move: bool, tag: str | None,
    allow_missing: bool, tick: _Ticker,
) -> list[Planned]:
    """Every payload checked, before anything is written; the first refusal names its payload."""
    if not payloads:
        return []
    runner_check = _runner_checker(workspace, allow_missing=allow_missing)
    planned: list[Planned] = []
    seen: dict[str, int] = {}
    # Campaign payloads repeat their shapes and often their job.json: each is checked once.
    shapes: set[tuple[object, ...]] = set()
    parsed: dict[bytes, JobSpec] = {}
    total = len(payloads)
    token = staging_token(workspace)
    for index, (payload, place) in enumerate(zip(payloads, places, strict=True)):
        source = posixpath.normpath(payload)
        if move and source in seen:
            raise SubmissionError(
                f"payload {source} is listed twice (entries {seen[source] + 1} and {index + 1} of {total}); "
                "--move consumes a payload, so list each once"
            )
        seen[source] = index
        try:
            planned.append(plan_submission(workspace, source, place, move=move, tag=tag, runner_check=runner_check,
                                            shapes=shapes, parsed=parsed, token=token))
        except SubmissionError as error:
            raise SubmissionError(_naming(source, index, total, str(error))) from None
        tick("checking")
    tick.flush("checking")
    return planned


def _naming(source: str, index: int, total: int, message: str, *, noun: str = "payload") -> str:
    """The refusal of one payload (or spec) of a batch, naming it (and saying nothing was submitted)."""
    where = "" if source in message else (f"payload {source}: " if noun == "payload" else f"{source}: ")
    return f"{where}{message} ({noun} {index + 1} of {total}; none of the {total} was submitted)"


@attrs.define
class _Written:
    """What one chunk has written so far, so that a failed write can take it back."""

    created: list[str]
    #: The job whose write is under way, named by the error of a failed one.
    current: Planned
    reserved: list[Reservation] = attrs.Factory(list)
    staged: list[Planned] = attrs.Factory(list)
    placed: list[Planned] = attrs.Factory(list)
    markers: list[Marker] = attrs.Factory(list)


def _write_chunk(
    workspace: WorkspaceHandle, items: Sequence[Planned], before: Sequence[Submitted], *, move: bool, total: int,
    tick: _Ticker,
) -> list[Submitted]:
    fs, layout, durable = workspace.fs, workspace.layout, workspace.durable
    kind_dir = layout.kind_dir(StateKind.SUBMITTED)
    directories = {posixpath.dirname(layout.id_reservation(item.key.job_id)) for item in items}
    directories |= {posixpath.dirname(item.destination) for item in items}
    directories |= {f"{kind_dir}/{item.placement}" for item in items}
    if not move:
        directories.add(layout.tmp)
    created = sorted({path for directory in directories for path in missing_ancestors(fs, f"{directory}/-")})
    by_id = {item.key.job_id: item for item in items}
    # In id order, so that consecutive creations share a bucket directory (about 10 % cheaper).
    reservations = sorted((item.reservation for item in items), key=lambda reservation: reservation.job_id)
    written = _Written(created, by_id[reservations[0].job_id])

    def reserved(reservation: Reservation) -> None:
        written.reserved.append(reservation)
        # A failure is the next reservation's job.
        written.current = by_id[reservations[min(len(written.reserved), len(items) - 1)].job_id]
        tick("reserving")

    try:
        for directory in sorted(directories):
            fs.makedirs(directory, durable=False)
        if durable:
            fs.fsync_dirs(sorted({posixpath.dirname(path) for path in created}))
        # The ids first: from here on no other job, at any placement, can take them.
        reserve_job_ids(fs, layout, reservations, durable=durable, writer=workspace.store.writer.writer_id,
                        reserved=reserved)
        tick.flush("reserving")
        _place(workspace, items, written, move=move, tick=tick)
    except (JobIdTaken, OSError) as error:
        left = _undo(workspace, written, move=move)
        item = by_id.get(error.job_id, written.current) if isinstance(error, JobIdTaken) else written.current
        if isinstance(error, JobIdTaken):  # another creation took an id since the check
            message = id_refusal(item.placement, error)
        else:
            message = write_refusal(error, item.source, item.placement, workspace.root, move=move)
        raise _failure(message, before, total, left, items) from None

    def published(marker: Marker) -> None:
        written.markers.append(marker)
        tick("publishing")

    jobs = [(item.placement, item.key, item.spec.priority) for item in items]
    try:
        workspace.store.create_submitted_many(jobs, created=published)
    except OSError as error:
        _partial_markers(workspace, items, written, before, total, error, move=move)
    tick.flush("publishing")
    return [Submitted(marker, item.destination, item.spec, item.warning)
            for marker, item in zip(written.markers, items, strict=True)]


def _place(workspace: WorkspaceHandle, items: Sequence[Planned], written: _Written, *, move: bool,
           tick: _Ticker) -> None:
    """Put every payload of the chunk in place, durably when the workspace is."""
    fs, durable = workspace.fs, workspace.durable
    synced = {posixpath.dirname(item.destination) for item in items}

    def rename_into_place(item: Planned, source: str) -> None:
        written.current = item
        fs.rename(source, item.destination, durable=False)
        written.placed.append(item)

    if move:
        if durable:
            # The caller may never have synced its payloads: a rename moves the names, not
            # the unsynced data, so a marker over them could survive a crash the payload does not.
            fs.sync_trees([item.source for item in items])
        for item in items:
            rename_into_place(item, item.source)
            tick("copying")
        synced |= {posixpath.dirname(item.source) for item in items}
    else:
        # A slice at a time (a job at a time without syncs to group): tmp/ never holds the whole
        # chunk, and a directory of 10,000 names makes every creation and rename in it slower
        # (measured: 85 against 30 us a job). The renames' directories are synced once, below.
        step = _STAGED_SLICE if durable else 1
        for first in range(0, len(items), step):
            group = items[first : first + step]
            for item in group:
                written.current = item
                # Straight into the staging name: it is private until renamed into place, so neither
                # the copy nor the job.json needs a temp sibling of its own (a rename and a create fewer).
                if item.data is None:
                    fs.copy_tree(item.source, item.staging, durable=False, staged=True)
                    written.staged.append(item)
                else:  # a job from its definition: its payload is the job.json, written where a copy is staged
                    fs.makedirs(item.staging)
                    written.staged.append(item)
                    fs.write_staged(f"{item.staging}/{JOB_FILE}", item.data, durable=False)
                tick("copying")
            if durable:
                fs.sync_trees([item.staging for item in group])
            for item in group:
                rename_into_place(item, item.staging)
        synced.add(workspace.layout.tmp)
    tick.flush("copying")
    if durable:
        fs.fsync_dirs(sorted(synced))


def _undo(
    workspace: WorkspaceHandle, written: _Written, *, move: bool, kept: frozenset[str] = frozenset()
) -> list[str]:
    """Take back what the chunk wrote, except for the jobs (ids) in ``kept``, which were submitted.

    Runs inside the handling of the write error that made it necessary, so it never
    raises :class:`OSError` itself: it goes on with the rest and returns what it
    could not take back, one phrase each, for that error's message.
    """
    fs, layout = workspace.fs, workspace.layout
    left: list[str] = []

    def attempt(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as error:
            left.append(f"{what} ({error.strerror or error})")

    for item in reversed(written.placed):
        if item.key.job_id in kept:
            continue
        if move:
            attempt(f"payload {item.destination} (not moved back to {item.source})",
                    lambda item=item: fs.rename(item.destination, item.source, durable=False))
        else:
            attempt(f"payload copy {item.destination}", lambda item=item: fs.rmtree(item.destination))
    placed = {item.key.job_id for item in written.placed}
    for item in written.staged:
        if item.key.job_id not in placed:
            attempt(f"staged copy {item.staging}", lambda item=item: fs.rmtree(item.staging))
    for reservation in written.reserved:
        if reservation.job_id not in kept:
            attempt(f"id reservation {layout.id_reservation(reservation.job_id)}",
                    lambda reservation=reservation: release_job_id(fs, layout, reservation))
    for directory in sorted(written.created, key=len, reverse=True):
        try:
            fs.rmdir(directory)
        except OSError:
            pass  # not empty: a job of this batch (or of another submission) is there
    return left


def _leftovers(left: Sequence[str]) -> str:
    """The clause a failure's message gets when its rollback left ``left`` behind ('' when nothing)."""
    if not left:
        return ""
    shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    return f"; the rollback failed too and left {shown}: see 'httk workflow workspace fsck'"


def _partial_markers(
    workspace: WorkspaceHandle, items: Sequence[Planned], written: _Written, before: Sequence[Submitted],
    total: int, error: OSError, *, move: bool,
) -> None:
    """A marker could not be made: the jobs with one are submitted (synced now), the rest are taken back."""
    fs = workspace.fs
    # Markers are made in the chunk's order, so the jobs with one are its first ones.
    done = len(written.markers)
    left: list[str] = []
    if workspace.durable and written.markers:
        try:
            fs.fsync_dirs(sorted({posixpath.dirname(workspace.store.marker_path(marker))
                                  for marker in written.markers}))
        except OSError as sync_error:  # keep the error that stopped the batch; say what this one leaves
            left.append(f"the markers of those {done} jobs unsynced ({sync_error.strerror or sync_error})")
    left += _undo(workspace, written, move=move, kept=frozenset(item.key.job_id for item in items[:done]))
    submitted = [*before, *(Submitted(marker, item.destination, item.spec, item.warning)
                            for marker, item in zip(written.markers, items, strict=False))]
    reason = error.strerror or str(error)
    what = (f"cannot submit {items[done].source} at placement {items[done].placement!r}" if done < len(items)
            else f"cannot sync the markers of {len(items)} jobs")
    raise BulkSubmissionError(
        f"{what}: {reason}; the first {len(submitted)} of {total} jobs were submitted, the other "
        f"{total - len(submitted)} were not ({_again(items)}){_leftovers(left)}",
        submitted,
    )


def _failure(message: str, before: Sequence[Submitted], total: int, left: Sequence[str] = (),
             items: Sequence[Planned] = ()) -> SubmissionError:
    """The error of a chunk whose writes were taken back (``left``: what could not be).

    A plain refusal when nothing was submitted yet and nothing was left behind.
    """
    if not before:
        if not left:
            return SubmissionError(message)
        return BulkSubmissionError(f"{message}{_leftovers(left)}", before)
    message = message.removesuffix("; nothing was submitted")
    return BulkSubmissionError(
        f"{message}; the first {len(before)} of {total} jobs were submitted, the other {total - len(before)} were "
        f"not ({_again(items)}){_leftovers(left)}",
        before,
    )


def _again(items: Sequence[Planned]) -> str:
    """What the caller does with the jobs a failed batch did not submit."""
    return "submit those specs again" if items and items[0].data is not None else "submit those payloads again"


class _Ticker:
    """Hands progress on every :data:`_TICK` jobs of a phase, and the rest at the phase's end."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._pending: dict[str, int] = {}

    def __call__(self, phase: str) -> None:
        """One more job went through ``phase``."""
        if self._progress is None:
            return
        pending = self._pending.get(phase, 0) + 1
        if pending >= _TICK:
            self._progress(phase, pending)
            pending = 0
        self._pending[phase] = pending

    def flush(self, phase: str) -> None:
        """The chunk is through ``phase``: hand on what is left."""
        pending = self._pending.pop(phase, 0)
        if pending and self._progress is not None:
            self._progress(phase, pending)
