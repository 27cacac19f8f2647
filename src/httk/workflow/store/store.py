"""The protocol store: the one place that creates and renames markers.

A transition appends a full state frame to this process's journal (synced when
durable) and then renames the exact old marker name to the new one. The rename
is the fence: if the old name is gone, another actor won and this one reports
:class:`LostRace` without touching anything else. The kind change itself is
decided by the domain's transition table. Spec: 000 "Workspace policy",
"Checking and repairing"; docs/workflow_filesystem_api.md "Markers", "Journal".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from .. import codec
from ..domain.frames import ChildRef, StateFrame
from ..domain.lifecycle import LEAVING_EVENTS, TERMINAL_KINDS, Event, StateKind, next_kind
from ..domain.model import JobKey
from ..domain.placement import placement_matches
from ..ports import Clock, Filesystem, unreadable
from ..protocol import JOB_FILE, JobSpec, parse_job_bytes
from .journal import FrameDamage, JournalReader, JournalWriter
from .layout import Layout
from .markers import INIT_REF, UNDECODABLE_PLACEMENT, Marker, MarkerNameError, newest_per_job, undecodable


class LostRace(Exception):
    """The marker this actor meant to rename was renamed by someone else first."""

    def __init__(self, marker: Marker) -> None:
        super().__init__(f"lost race on job {marker.key}: marker {marker.relative_path()} is gone")
        self.marker = marker


class JobDamage(Exception):
    """A job whose marker does not resolve; ``code`` is the stable damage code."""

    def __init__(self, code: str, message: str, marker: Marker | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.marker = marker


@attrs.frozen
class StoreConfig:
    workspace_id: str
    durable: bool
    segment_bytes: int
    deadline_seconds: float


@attrs.frozen
class JobView:
    """A job read the way a manager reads it: marker, then frame, then job.json."""

    marker: Marker
    frame: StateFrame
    spec: JobSpec | None
    spec_error: str | None = None


class Store:
    """Markers and the journal of one workspace, through the filesystem port."""

    def __init__(
        self, fs: Filesystem, layout: Layout, config: StoreConfig, clock: Clock, writer_id: str
    ) -> None:
        self.fs = fs
        self.layout = layout
        self.config = config
        self.clock = clock
        self.writer = JournalWriter(
            fs, layout.journal, writer_id, segment_bytes=config.segment_bytes, durable=config.durable
        )
        self.reader = JournalReader(fs, layout.journal, deadline_seconds=config.deadline_seconds)

    # -- paths -------------------------------------------------------------------------------
    def marker_path(self, marker: Marker) -> str:
        return f"{self.layout.state}/{marker.relative_path()}"

    def payload_dir(self, marker: Marker) -> str:
        return self.layout.payload(marker.placement, str(marker.key))

    # -- creation ----------------------------------------------------------------------------
    def create_submitted(self, placement: str, key: JobKey, priority: int) -> Marker:
        """Publish the generation-0 ``submitted`` marker of a payload already in place."""
        marker = Marker(StateKind.SUBMITTED, placement, key, priority, 0, INIT_REF)
        # create_empty makes missing placement directories itself, durably when asked.
        self.fs.create_empty(self.marker_path(marker), durable=self.config.durable)
        return marker

    def create_submitted_many(
        self, jobs: Sequence[tuple[str, JobKey, int]], created: Callable[[Marker], None] | None = None
    ) -> list[Marker]:
        """Publish the generation-0 markers of many payloads already in place: ``(placement, key, priority)`` each.

        The same names :meth:`create_submitted` makes, as one group commit: every marker
        is created, then each marker directory is synced once (when durable). Each marker
        is whole or absent after a crash; ``created`` is told of each one as it is made,
        so a caller that meets an error knows which exist.
        """
        markers = []
        for placement, key, priority in jobs:
            marker = Marker(StateKind.SUBMITTED, placement, key, priority, 0, INIT_REF)
            self.fs.create_empty(self.marker_path(marker), durable=False)
            markers.append(marker)
            if created is not None:
                created(marker)
        if self.config.durable:
            self.fs.fsync_dirs(sorted({posixpath.dirname(self.marker_path(marker)) for marker in markers}))
        return markers

    # -- reading -----------------------------------------------------------------------------
    def read_spec(self, marker: Marker) -> JobSpec:
        path = f"{self.payload_dir(marker)}/{JOB_FILE}"
        try:
            data = self.fs.read_document(path)
        except FileNotFoundError:
            raise JobDamage("missing_payload", f"{path} does not exist", marker) from None
        except OSError as error:
            # A directory, FIFO, symlink or oversized file is this job's bad definition, never a fault
            # of the reader; the message names the file and what it is.
            raise JobDamage("invalid_job", unreadable(path, error), marker) from None
        try:
            return parse_job_bytes(data, path)
        except codec.DocumentError as error:
            raise JobDamage("invalid_job", str(error), marker) from None

    def initial_frame(self, marker: Marker, spec: JobSpec | None) -> StateFrame:
        """The implicit frame of generation 0: the job as its job.json defines it (no step if unreadable)."""
        return StateFrame(
            workspace_id=self.config.workspace_id,
            job_id=marker.job_id,
            job_key=str(marker.key),
            placement=marker.placement,
            generation=0,
            kind=marker.kind,
            event="submit",
            previous_record_ref=None,
            created_at=0.0,
            priority=marker.priority,
            step=spec.initial_step if spec is not None else "",
        )

    def read_frame(self, marker: Marker, *, deadline_seconds: float | None = None) -> StateFrame | None:
        """The frame a marker names (``None`` for generation 0); raises :class:`JobDamage`.

        ``deadline_seconds`` overrides the visibility deadline of this one read (see :meth:`JournalReader.read`).
        """
        if marker.generation == 0:
            if marker.ref != INIT_REF:
                raise JobDamage("reference_mismatch", f"generation 0 must reference {INIT_REF!r}", marker)
            return None
        try:
            document = self.reader.read(marker.ref, deadline_seconds=deadline_seconds)
        except FrameDamage as damage:
            raise JobDamage(damage.code, damage.message, marker) from None
        try:
            frame = codec.frame_from_json(document)
        except codec.DocumentError as error:
            raise JobDamage("checksum_mismatch", str(error), marker) from None
        if (
            frame.job_id != marker.job_id
            or frame.kind != marker.kind
            or frame.generation != marker.generation
            or frame.workspace_id != self.config.workspace_id
        ):
            raise JobDamage(
                "identity_mismatch",
                f"frame names job {frame.job_id} {frame.kind.value} g{frame.generation}, "
                f"marker is {marker.job_id} {marker.kind.value} g{marker.generation}",
                marker,
            )
        return frame

    def read_job(self, marker: Marker) -> JobView:
        """Marker → frame → job.json; frame damage raises, a bad job.json is reported in the view."""
        frame = self.read_frame(marker)
        try:
            spec: JobSpec | None = self.read_spec(marker)
            error = None
        except JobDamage as damage:
            spec, error = None, str(damage)
        if frame is None:
            frame = self.initial_frame(marker, spec)
        return JobView(marker, frame, spec, error)

    # -- transitions -------------------------------------------------------------------------
    def transition(
        self,
        marker: Marker,
        current: StateFrame,
        event: Event,
        *,
        origin: StateKind | None = None,
        leave_to: str | None = None,
        before_rename: Callable[[Marker, StateFrame], None] | None = None,
        **changes: Any,
    ) -> tuple[Marker, StateFrame]:
        """Apply ``event``: append the new frame, then rename the marker onto it.

        Raises :class:`LostRace` when the old marker is gone (nothing is changed
        then beyond one orphan frame in this writer's journal, which no marker names).
        A return event (``transfer_rollback``) needs ``origin``, the kind recorded at
        detach; a leaving event (``transfer_retire``) renames the marker into the
        directory ``leave_to`` outside the state tree, still naming its last frame.
        ``before_rename`` is called with the new marker and frame between the two (a
        join note names the exact marker the rename will make).
        """
        kind = next_kind(marker.kind, event, origin=origin)
        if (Event(event) in LEAVING_EVENTS) != (leave_to is not None):
            raise ValueError(f"event {Event(event).value!r}: leave_to is for the events that leave the state tree")
        priority = changes.pop("priority", marker.priority)
        # successor, not evolve: a frame's reason, operator and per-transition notes are its own transition's.
        frame = current.successor(
            generation=marker.generation + 1,
            kind=kind,
            event=event.value,
            previous_record_ref=None if marker.ref == INIT_REF else marker.ref,
            created_at=self.clock.now(),
            priority=priority,
            **changes,
        )
        ref = self.writer.append(codec.frame_to_json(frame))
        new_marker = Marker(kind, marker.placement, marker.key, priority, frame.generation, str(ref))
        target = f"{leave_to}/{new_marker.name}" if leave_to is not None else self.marker_path(new_marker)
        if before_rename is not None:
            before_rename(new_marker, frame)
        try:
            self.fs.rename(self.marker_path(marker), target, durable=self.config.durable)
        except FileNotFoundError:
            raise LostRace(marker) from None
        return new_marker, frame

    def adopt(self, staged: str, marker: Marker) -> bool:
        """Rename the empty file ``staged`` (outside the state tree) to ``marker``; ``False`` when it is gone.

        An import stages each marker durably before it decides, so a repeated import
        moves each one at most once: a staged file that is gone was adopted already.
        """
        try:
            self.fs.rename(staged, self.marker_path(marker), durable=self.config.durable)
        except FileNotFoundError:
            return False
        return True

    # -- discovery ---------------------------------------------------------------------------
    def iter_markers(
        self,
        kind: StateKind,
        prefixes: Sequence[str] = (),
        on_damage: Callable[[str, str, str], None] | None = None,
    ) -> Iterator[Marker]:
        """Every marker of one kind, exhaustively, in a stable (sorted) order."""
        base = self.layout.kind_dir(kind)
        roots = [""] if not prefixes else sorted({prefix.strip("/") for prefix in prefixes})
        for root in roots:
            start = f"{base}/{root}" if root else base
            yield from self._walk(kind, start, root, prefixes, on_damage)

    def current_markers(self) -> dict[str, Marker]:
        """Every job's current marker, by job id, from one walk of every kind."""
        return newest_per_job(marker for kind in StateKind for marker in self.iter_markers(kind))

    def _walk(
        self,
        kind: StateKind,
        directory: str,
        placement: str,
        prefixes: Sequence[str],
        on_damage: Callable[[str, str, str], None] | None,
    ) -> Iterator[Marker]:
        entries = sorted(self.fs.scandir(directory), key=lambda entry: entry.name)
        for entry in entries:
            if entry.is_dir:
                child = f"{placement}/{entry.name}" if placement else entry.name
                if not undecodable(entry.name):
                    yield from self._walk(kind, entry.path, child, prefixes, on_damage)
                elif on_damage is not None:
                    on_damage("unparseable_name", entry.path, UNDECODABLE_PLACEMENT)
            elif placement and (not prefixes or placement_matches(placement, prefixes)):
                try:
                    yield Marker.parse(kind, placement, entry.name)
                except MarkerNameError as error:
                    if on_damage is not None:
                        on_damage("unparseable_name", entry.path, str(error))
            elif not placement and on_damage is not None:
                on_damage("unparseable_name", entry.path, "a file directly below a kind directory")

    def locate(self, placement: str, key: str, kinds: Sequence[StateKind] = tuple(StateKind)) -> list[Marker]:
        """The markers of one job whose placement and key are known, newest generation first.

        One directory listing per kind at that placement: cheap for a targeted lookup,
        never a walk of the workspace.
        """
        prefix = f"{key}."
        found = []
        for kind in kinds:
            for entry in self.fs.scandir(f"{self.layout.kind_dir(kind)}/{placement}"):
                if entry.is_dir or not entry.name.startswith(prefix):
                    continue
                try:
                    found.append(Marker.parse(kind, placement, entry.name))
                except MarkerNameError:
                    continue
        return sorted(found, key=lambda marker: marker.generation, reverse=True)

    def find(self, job_id: str, kinds: Sequence[StateKind] = tuple(StateKind)) -> Marker | None:
        """The current marker of a job (exhaustive; for inspection, never for scheduling)."""
        for kind in kinds:
            for marker in self.iter_markers(kind):
                if marker.job_id == job_id:
                    return marker
        return None


# -- many known jobs at once ---------------------------------------------------------------------
#: Where a job not known to be terminal is looked for first: every kind but the terminal ones, whose
#: trees hold the workspace's history and are listed only for the jobs found nowhere else.
NOT_TERMINAL_KINDS: tuple[StateKind, ...] = tuple(kind for kind in StateKind if kind not in TERMINAL_KINDS)

#: The kind reported for a join child that has neither a terminal note nor a marker (its payload left).
UNRESOLVABLE_CHILD = "unresolvable"


def locate_many(fs: Filesystem, layout: Layout, jobs: Iterable[ChildRef],
                kinds: Sequence[StateKind]) -> dict[str, Marker]:
    """The current (highest-generation) marker among ``kinds`` of each job whose placement and key are known.

    By job id; a job with no marker among ``kinds`` is absent. One listing per placement and
    kind, whatever the number of jobs (a join of thousands of children, say), never one per job.
    """
    wanted: dict[str, dict[str, str]] = {}
    for job in jobs:
        wanted.setdefault(job.placement, {})[job.job_key] = job.job_id
    found: list[Marker] = []
    for placement, keys in wanted.items():
        for kind in kinds:
            for entry in fs.scandir(f"{layout.kind_dir(kind)}/{placement}"):
                if entry.is_dir:
                    continue
                try:
                    marker = Marker.parse(kind, placement, entry.name)
                except MarkerNameError:
                    continue
                if keys.get(str(marker.key)) == marker.job_id:
                    found.append(marker)
    return newest_per_job(found)


def current_kinds(fs: Filesystem, layout: Layout, jobs: Sequence[ChildRef]) -> dict[str, StateKind]:
    """The kind of each job's current marker, by job id; a job with no marker at all is absent.

    The one lookup of join children that have no terminal note (``context.json``, ``job show``,
    ``job why``): the non-terminal trees first, the terminal ones only for the jobs not found there.
    The kinds are listed one after another, so a job that moved from a kind not yet listed into
    one already listed is met in none: the jobs still not found are looked for once more in every
    kind before they count as having no marker.
    """
    if not jobs:
        return {}
    markers = locate_many(fs, layout, jobs, NOT_TERMINAL_KINDS)
    lost = [job for job in jobs if job.job_id not in markers]
    if lost:
        markers.update(locate_many(fs, layout, lost, tuple(sorted(TERMINAL_KINDS))))
        lost = [job for job in lost if job.job_id not in markers]
    if lost:
        markers.update(locate_many(fs, layout, lost, tuple(StateKind)))
    return {job_id: marker.kind for job_id, marker in markers.items()}
