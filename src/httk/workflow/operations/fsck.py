"""``workspace fsck``: every marker must resolve to its journal frame; repair what does not.

Reading waits out the visibility deadline (inside the journal reader), so a
slow network filesystem is never mistaken for damage. Repair re-points a
damaged marker at the newest readable frame of its job that is *older* than the
marker's generation, by appending one ``fsck_repair`` frame chained to it and
renaming the marker onto it at the next generation: history is added, never
rewritten. A marker owned by a manager that still heartbeats is never touched.
Each job's ``job.json`` is read too, as a manager reads it: an unreadable
definition is reported with the store's code (``missing_payload``,
``invalid_job``) and left for an operator, because it is immutable and fsck
has nothing to rebuild it from. :func:`job_damage` is the one per-job check,
shared with ``workspace status``. The marker file itself, duplicates, and jobs
that the journal or a payload holds but no marker names are checked by
:mod:`.fsck_census`, which confirms every suspicion by reading again, so fsck is
safe to run against a live workspace. Spec: 000 "Checking and repairing a workspace".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs

from .. import codec
from ..domain.frames import StateFrame
from ..domain.lifecycle import OWNED_KINDS, Event, StateKind
from ..engine.manifest import read_beat
from ..protocol import JOB_FILE
from ..store.job_ids import (
    JobIdTaken,
    missing_reservations,
    read_reservation,
    reservation_of,
    reservation_temps,
    reserve_job_id,
)
from ..store.journal import FrameDamage, RecordRef
from ..store.markers import INIT_REF, Marker
from ..store.store import JobDamage, Store
from ..store.transfer_ledger import held_by_transfer
from ..store.workspaces import WorkspaceHandle
from .fsck_census import (
    Unmarked,
    confirm_duplicates,
    confirm_unmarked,
    iter_frames,
    journal_heads,
    marker_file_problem,
    noncanonical_marker,
    payloads,
    quarantined_jobs,
)

#: A marker name held by something a manager does not act on is moved aside only when asked.
SET_ASIDE_LEFT = "left: with --repair --quarantine-unrepairable it is moved into the quarantine and the marker restored"
#: What the message of a marker name that was moved aside adds.
SET_ASIDE = "moved into .httk-workflow/quarantine/ with an audit record"
#: A payload nothing names may be a submission that died before its marker: resubmitting is the operator's call.
ORPHAN_LEFT = "left: no frame tells its state; resubmit it with 'job submit --move', or remove it"
#: A reservation temp this old is left by a creation that died: a live one renames or removes its temps in moments.
RESERVATION_TEMP_SECONDS = 3600.0
#: What fsck does about a job.json it cannot read: nothing, there is no older copy to restore.
DEFINITION_LEFT = "unrepairable: job.json is the job's immutable definition; restore it from the original payload"


@attrs.frozen
class JobCheck:
    """What is wrong with one job read the way a manager reads it; ``None`` where nothing is."""

    frame: JobDamage | None
    definition: JobDamage | None


def job_damage(store: Store, marker: Marker) -> JobCheck:
    """Read the marker's frame, then its job.json; report each one's damage instead of raising."""
    try:
        store.read_frame(marker)
        frame = None
    except JobDamage as damage:
        frame = damage
    try:
        store.read_spec(marker)
        definition = None
    except JobDamage as damage:
        definition = damage
    return JobCheck(frame, definition)


def definition_path(store: Store, marker: Marker) -> str:
    return f"{store.payload_dir(marker)}/{JOB_FILE}"


@attrs.frozen
class Problem:
    code: str
    path: str
    job: str | None
    message: str
    action: str = "reported"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def done(problem: Problem, action: str, detail: str) -> Problem:
    """``problem`` with a final action (``repaired``, ``quarantined``) and what exactly was done."""
    return attrs.evolve(problem, action=action, message=f"{problem.message}; {detail}")


class Fsck:
    """One check (and optional repair) of one workspace."""

    def __init__(
        self, handle: WorkspaceHandle, *, repair: bool = False, quarantine: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.handle = handle
        #: Told of each marker checked (the CLI's progress line).
        self.progress = progress
        self.store = handle.store
        self.fs = handle.fs
        self.repair = repair
        self.quarantine = quarantine
        self._index: dict[str, list[tuple[int, str, dict[str, Any]]]] | None = None
        self._misnamed: set[str] = set()  # jobs met under a misspelt marker name: not missing

    def run(self) -> dict[str, Any]:
        problems: list[Problem] = []
        seen: dict[str, list[Marker]] = defaultdict(list)
        checked = 0

        def damaged_name(code: str, path: str, message: str) -> None:
            problems.append(self._name_problem(code, path, message))

        for kind in StateKind:
            for marker in self.store.iter_markers(kind, on_damage=damaged_name):
                info = self.fs.lstat(self.store.marker_path(marker))
                if info is None:
                    continue  # renamed since it was listed: met under its new name, or confirmed missing below
                checked += 1
                if self.progress is not None:
                    self.progress(1)
                seen[marker.job_id].append(marker)
                bad = marker_file_problem(info)
                if bad is not None:
                    problems.append(self._bad_marker(marker, *bad))
                    continue
                check = job_damage(self.store, marker)
                if check.frame is not None:
                    problems.append(self._handle_damage(marker, check.frame))
                if check.definition is not None:
                    problems.append(self._definition_problem(marker, check.definition))
        problems.extend(self._duplicates(seen))
        problems.extend(self._unmarked(seen))
        problems.extend(self._id_reservations(seen))
        problems.extend(self._reservation_temps())
        left = [problem for problem in problems if problem.action not in ("repaired", "quarantined")]
        return {
            "workspace": self.handle.root,
            "markers_checked": checked,
            "problems": [problem.to_json() for problem in problems],
            "clean": not problems,
            "left_for_operator": len(left),
        }

    # -- repair ------------------------------------------------------------------------------
    def _definition_problem(self, marker: Marker, damage: JobDamage) -> Problem:
        path = definition_path(self.store, marker)
        action = DEFINITION_LEFT if self.repair else "reported"
        return Problem(damage.code, path, str(marker.key), f"job.json is unreadable: {damage.message}", action)

    def _handle_damage(self, marker: Marker, damage: JobDamage) -> Problem:
        path = self.store.marker_path(marker)
        problem = Problem(damage.code, path, str(marker.key), damage.message)
        if not self.repair:
            return problem
        if marker.kind in OWNED_KINDS and self._owner_live(marker):
            return attrs.evolve(problem, action="left: its manager is still heartbeating within its lease")
        recovered = self._newest_older_frame(marker)
        if recovered is None:
            if self.quarantine:
                self._quarantine(marker, damage)
                return attrs.evolve(problem, action="quarantined")
            return attrs.evolve(problem, action="unrepairable: no readable older frame")
        ref, document = recovered
        frame = codec.frame_from_json(document)
        new_frame = frame.evolve(
            generation=marker.generation + 1,
            kind=marker.kind,
            event=Event.FSCK_REPAIR.value,
            previous_record_ref=ref,
            created_at=self.handle.ports.clock.now(),
            priority=marker.priority,
            reason=f"fsck repaired {damage.code}; recovered generation {frame.generation}",
        )
        new_ref = self.store.writer.append(codec.frame_to_json(new_frame))
        new_marker = attrs.evolve(marker, generation=new_frame.generation, ref=str(new_ref))
        try:
            self.fs.rename(path, self.store.marker_path(new_marker), durable=self.handle.durable)
        except FileNotFoundError:
            return attrs.evolve(problem, action="left: the marker changed while being repaired")
        return attrs.evolve(problem, action="repaired")

    def _owner_live(self, marker: Marker) -> bool:
        """Whether any manager heartbeat younger than its lease could own this job."""
        now = self.handle.ports.clock.now()
        for entry in self.fs.scandir(self.handle.layout.managers):
            beat = read_beat(self.fs, self.handle.layout, entry.name)
            if beat is None or beat.stopped:
                continue
            lease = beat.lease_seconds or float(self.handle.policy["lease_seconds"])
            if now - beat.time <= lease:
                return True
        return False

    def _journal_index(self) -> dict[str, list[tuple[int, str, dict[str, Any]]]]:
        if self._index is None:
            index: dict[str, list[tuple[int, str, dict[str, Any]]]] = defaultdict(list)
            journal = self.handle.layout.journal
            for writer in self.fs.scandir(journal):
                for segment in self.fs.scandir(writer.path):
                    for ref, document in self.store.reader.iter_segment(segment.path):
                        if isinstance(ref, RecordRef) and isinstance(document, dict):
                            job_id = document.get("job_id")
                            if isinstance(job_id, str) and isinstance(document.get("generation"), int):
                                index[job_id].append((document["generation"], str(ref), document))
            self._index = index
        return self._index

    def _newest_older_frame(self, marker: Marker) -> tuple[str, dict[str, Any]] | None:
        candidates = [
            (generation, ref, document)
            for generation, ref, document in self._journal_index().get(marker.job_id, [])
            if generation < marker.generation and document.get("workspace_id") == self.handle.workspace_id
        ]
        if not candidates:
            return None
        generation, ref, document = max(candidates, key=lambda item: item[0])
        return ref, document

    def _quarantine(self, marker: Marker, damage: JobDamage) -> None:
        layout = self.handle.layout
        target = f"{layout.quarantine}/{marker.kind.value}/{marker.placement}/{marker.name}"
        audit = {
            "format": "httk-workflow-quarantine",
            "format_version": 1,
            "marker": self.store.marker_path(marker),
            "job_key": str(marker.key),
            "code": damage.code,
            "message": damage.message,
            "at": self.handle.ports.clock.now(),
        }
        self.fs.write_atomic(f"{target}.audit.json", codec.encode(audit), durable=self.handle.durable)
        self.fs.rename(self.store.marker_path(marker), target, durable=self.handle.durable)

    # -- job-id reservations (see job_ids) ----------------------------------------------------
    def _id_reservations(self, seen: dict[str, list[Marker]]) -> list[Problem]:
        """``missing_id_reservation`` for jobs without one (made by ``--repair``); ``id_reservation_conflict``
        for a job whose id another job's reservation holds (left: two jobs share an id)."""
        fs, layout = self.fs, self.handle.layout
        missing = missing_reservations(fs, layout, seen, self.store.config.deadline_seconds)
        problems = []
        for job_id in sorted(seen):
            jobs = sorted({(marker.placement, str(marker.key)) for marker in seen[job_id]})
            path = layout.id_reservation(job_id)
            if job_id in missing:
                placement, key = jobs[0]
                problem = Problem("missing_id_reservation", path, key,
                                  "the job's id is not reserved (a workspace from before reservations): a "
                                  "submission or spawn elsewhere could give another job the same id")
                if not self.repair:
                    problems.append(problem)
                    continue
                try:
                    reserve_job_id(fs, layout, reservation_of(fs, layout, job_id, key, placement),
                                   durable=self.handle.durable)
                    problems.append(done(problem, "repaired", f"reserved for job {key} at {placement}"))
                except JobIdTaken as taken:
                    problems.append(attrs.evolve(problem, action=f"left: reserved meanwhile: {taken}"))
            try:
                held = read_reservation(fs, layout, job_id)
                why = f"it is reserved by {held.describe()}" if held is not None else ""
            except JobIdTaken as taken:
                held, why = None, str(taken)
            for placement, key in jobs:
                if not why or (held is not None and (held.job_key, held.placement) == (key, placement)):
                    continue
                left = "left: two jobs share one id; resubmit one of them under a new id"
                problems.append(Problem("id_reservation_conflict", path, key,
                                        f"job {key} at {placement} has an id reserved for another job: {why}",
                                        left if self.repair else "reported"))
        return problems

    def _reservation_temps(self) -> list[Problem]:
        """``stale_reservation_temp``: each temp an interrupted reservation left in ``ids/`` (``--repair`` removes it).

        Harmless to every reader (none takes a hidden name for a reservation), but it
        never goes away by itself.
        """
        older_than = self.handle.ports.clock.now() - RESERVATION_TEMP_SECONDS
        problems = []
        for path in reservation_temps(self.fs, self.handle.layout, older_than):
            problem = Problem("stale_reservation_temp", path, None,
                              "a temp of a job-id reservation whose creation was interrupted (no job holds it)")
            if not self.repair:
                problems.append(problem)
                continue
            try:
                self.fs.remove(path)
            except FileNotFoundError:
                continue  # removed meanwhile (by another fsck): nothing left to report
            except OSError as error:
                problems.append(attrs.evolve(problem, action=f"left: cannot remove it: {error.strerror or error}"))
                continue
            problems.append(done(problem, "repaired", "removed"))
        return problems

    # -- what the walk alone cannot tell (see fsck_census) -----------------------------------
    def _duplicates(self, seen: dict[str, list[Marker]]) -> list[Problem]:
        """``duplicate_marker`` for the jobs met more than once whose names are still there after re-reading."""
        groups = {
            job_id: [self.store.marker_path(marker) for marker in markers]
            for job_id, markers in seen.items()
            if len(markers) > 1
        }
        if not groups:
            return []
        confirmed = confirm_duplicates(self.fs, groups, self.store.config.deadline_seconds)
        return [
            Problem("duplicate_marker", ", ".join(paths), job_id, "one job has more than one marker")
            for job_id, paths in sorted(confirmed.items())
        ]

    def _name_problem(self, code: str, path: str, message: str) -> Problem:
        """A state-tree name the walk could not parse; ``noncanonical_name`` when only its numbers are misspelt."""
        kind, _, rest = path.removeprefix(f"{self.handle.layout.state}/").partition("/")
        placement, _, name = rest.rpartition("/")
        marker = noncanonical_marker(kind, placement, name) if code == "unparseable_name" else None
        if marker is None:
            return Problem(code, path, None, message)
        problem = Problem(
            "noncanonical_name", path, str(marker.key),
            f"no manager parses this marker name: its numbers are not written as the store writes them "
            f"({marker.name})",
        )
        try:
            self.store.read_frame(marker)
        except JobDamage as damage:
            # Not the job's marker in any spelling: the job may still be missing_marker, restored from the journal.
            left = f"left: spelt canonically it would not resolve either ({damage.code})"
            return attrs.evolve(problem, action=left) if self.repair else problem
        self._misnamed.add(marker.job_id)
        if not self.repair:
            return problem
        others = self.store.locate(marker.placement, str(marker.key))
        if others:
            left = f"left: the job has a marker already ({others[0].name}); remove this one"
            return attrs.evolve(problem, action=left)
        try:
            self.fs.rename(path, self.store.marker_path(marker), durable=self.handle.durable)
        except FileExistsError:
            return attrs.evolve(problem, action=f"left: {marker.name} exists too (a duplicate); remove one")
        except FileNotFoundError:
            return attrs.evolve(problem, action="left: the marker changed while being repaired")
        return done(problem, "repaired", f"renamed to {marker.name}")

    def _bad_marker(self, marker: Marker, code: str, message: str) -> Problem:
        """A marker name held by a symlink, FIFO, directory or non-empty file: set aside only when asked."""
        problem = Problem(code, self.store.marker_path(marker), str(marker.key), message)
        if not self.repair:
            return problem
        if not self.quarantine:
            return attrs.evolve(problem, action=SET_ASIDE_LEFT)
        if marker.kind in OWNED_KINDS and self._owner_live(marker):
            return attrs.evolve(problem, action="left: its manager is still heartbeating within its lease")
        try:
            base = self.store.read_frame(marker)
        except JobDamage as damage:
            base = damage
        action = self._set_aside(marker, problem)
        if action is not None:
            return attrs.evolve(problem, action=action)
        problem = attrs.evolve(problem, message=f"{problem.message}; {SET_ASIDE}")
        if isinstance(base, JobDamage):
            return done(problem, "quarantined", f"its frame is unreadable too ({base.code}): no marker restored")
        return self._restore(problem, marker, base, marker.ref)

    def _set_aside(self, marker: Marker, problem: Problem) -> str | None:
        """Move the entry at ``marker``'s name into the quarantine tree; why not, or ``None`` when done."""
        try:
            self._quarantine(marker, JobDamage(problem.code, problem.message, marker))
        except FileNotFoundError:
            return "left: the marker changed while being repaired"
        except FileExistsError:
            return "left: the quarantine already holds an entry of this name; move one of them by hand"
        return None

    def _frames(self) -> Any:
        """Every readable frame, from the index a repair already built, else in one pass over the journal."""
        if self._index is not None:
            return ((ref, document) for entries in self._index.values() for _, ref, document in entries)
        return iter_frames(self.fs, self.store.reader, self.handle.layout.journal)

    def _unmarked(self, seen: dict[str, list[Marker]]) -> list[Problem]:
        """Jobs the journal or a payload holds with no marker: ``missing_marker``, ``orphaned_payload``, squatters."""
        layout = self.handle.layout
        named = set(seen) | self._misnamed | quarantined_jobs(self.fs, layout.quarantine)
        heads = journal_heads(self._frames(), self.handle.workspace_id, named)
        # A job that left by a transfer, or that an unfinished import will place, is not missing here.
        heads = {job: head for job, head in heads.items() if not held_by_transfer(self.fs, layout, head.frame)}
        orphans = list(payloads(self.fs, layout, lambda job_id: job_id in named or job_id in heads))
        confirmed = confirm_unmarked(self.fs, layout, [*heads.values(), *orphans], self.store.config.deadline_seconds)
        return [self._unmarked_problem(job) for job in sorted(confirmed, key=lambda job: (job.placement, str(job.key)))]

    def _unmarked_problem(self, job: Unmarked) -> Problem:
        payload = self.handle.layout.payload(job.placement, str(job.key))
        if job.squatters:
            paths = ", ".join(self.store.marker_path(marker) for marker in job.squatters)
            problem = Problem(
                "marker_not_regular", paths, str(job.key), "a directory holds the job's marker name; no manager sees it"
            )
            if not self.repair:
                return problem
            if not self.quarantine:
                return attrs.evolve(problem, action=SET_ASIDE_LEFT)
            for marker in job.squatters:
                action = self._set_aside(marker, problem)
                if action is not None:
                    return attrs.evolve(problem, action=action)
            problem = attrs.evolve(problem, message=f"{problem.message}; {SET_ASIDE}")
            if job.generation is None:
                [first, *_] = job.squatters
                if first.generation != 0:
                    return done(problem, "quarantined", "no journal frame to restore the marker from")
                return self._restore(problem, first, None, INIT_REF)
            return self._restore_from_journal(problem, job)
        if job.generation is None:
            return Problem(
                "orphaned_payload", payload, str(job.key),
                "a payload with a job.json that no marker and no journal frame names",
                ORPHAN_LEFT if self.repair else "reported",
            )
        problem = Problem(
            "missing_marker", payload, str(job.key),
            f"the journal holds generation {job.generation} of this job, but no state kind holds its marker",
        )
        return self._restore_from_journal(problem, job) if self.repair else problem

    def _restore_from_journal(self, problem: Problem, job: Unmarked) -> Problem:
        """Publish the marker of the job's newest frame, through one ``fsck_repair`` frame."""
        if len(job.refs) > 1:
            left = f"left: {len(job.refs)} frames hold generation {job.generation}; it is unknown which one committed"
            return attrs.evolve(problem, action=left)
        [ref] = job.refs
        try:
            frame = codec.frame_from_json(self.store.reader.read(ref))
        except (FrameDamage, codec.DocumentError) as error:
            return attrs.evolve(problem, action=f"unrepairable: its newest frame does not read back ({error})")
        marker = Marker(frame.kind, job.placement, job.key, frame.priority, frame.generation, ref)
        if frame.kind in OWNED_KINDS and self._owner_live(marker):
            left = "left: a manager is still heartbeating within its lease; run the repair again once it stops"
            return attrs.evolve(problem, action=left)
        return self._restore(problem, marker, frame, ref)

    def _restore(self, problem: Problem, marker: Marker, base: StateFrame | None, ref: str) -> Problem:
        """Publish a marker for ``marker``'s state: generation 0 anew, else after one ``fsck_repair`` frame."""
        if base is None:
            restored = marker
        else:
            frame = base.evolve(
                generation=marker.generation + 1,
                event=Event.FSCK_REPAIR.value,
                previous_record_ref=ref,
                created_at=self.handle.ports.clock.now(),
                reason=f"fsck restored the marker of generation {marker.generation}",
            )
            new_ref = self.store.writer.append(codec.frame_to_json(frame))
            restored = Marker(frame.kind, frame.placement, marker.key, frame.priority, frame.generation, str(new_ref))
        try:
            self.fs.create_empty(self.store.marker_path(restored), durable=self.handle.durable)
        except FileExistsError:
            return attrs.evolve(problem, action=f"left: {restored.relative_path()} exists already")
        return done(problem, "repaired", f"marker restored as {restored.relative_path()}")
