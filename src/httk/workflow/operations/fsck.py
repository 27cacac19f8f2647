"""``workspace fsck``: every marker must resolve to its journal frame; repair what does not.

A run observes everything first without waiting (each frame read once), then
waits out the visibility deadline once for every suspicion together, so a slow
network filesystem is never mistaken for damage and N damaged markers cost one
deadline, not N. Only then does it decide and repair. Repair re-points a
damaged marker at the newest readable frame of its job that is *older* than the
marker's generation, by appending one ``fsck_repair`` frame chained to it and
renaming the marker onto it at a generation above every frame the journal holds
for the job: history is added, never rewritten, and generations stay unique. A
job met under several markers is judged as a whole (:func:`.fsck_census.choose_truth`):
the stale names are set aside, never repaired into a second state. A marker owned
by a manager that still heartbeats is never touched.
Each job's ``job.json`` is read too, as a manager reads it: an unreadable
definition is reported with the store's code (``missing_payload``,
``invalid_job``) and left for an operator, because it is immutable and fsck
has nothing to rebuild it from. :func:`job_damage` is the one per-job check,
shared with ``workspace status``. The marker file itself, duplicates, and jobs
that the journal or a payload holds but no marker names are checked by
:mod:`.fsck_census`, which confirms every suspicion by reading again, so fsck is
safe to run against a live workspace. An unfinished transfer is returned as a
warning (``unfinished_transfers``: its jobs are safe at one end and its own command
settles it); a transfer ledger nothing can finish is a problem (:mod:`.fsck_transfers`). Spec: 000
"Checking and repairing a workspace", "Running on a remote".
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
from ..store.job_ids import missing_reservations
from ..store.journal import FrameDamage, RecordRef
from ..store.markers import INIT_REF, Marker
from ..store.store import JobDamage, Store
from ..store.transfer_ledger import held_by_transfer
from ..store.workspaces import WorkspaceHandle
from .fsck_census import (
    DUPLICATES,
    RESERVATION_TEMP_SECONDS,
    Duplicates,
    Met,
    Problem,
    Unmarked,
    UnmarkedCheck,
    choose_truth,
    done,
    id_reservation_problems,
    iter_frames,
    journal_heads,
    marker_file_problem,
    noncanonical_marker,
    payloads,
    quarantined_jobs,
    reservation_temp_problems,
    wait_once,
)

#: A marker name held by something a manager does not act on is moved aside only when asked.
SET_ASIDE_LEFT = "left: with --repair --quarantine-unrepairable it is moved into the quarantine and the marker restored"
#: What the message of a marker name that was moved aside adds.
SET_ASIDE = "moved into .httk-workflow/quarantine/ with an audit record"
#: A payload nothing names may be a submission that died before its marker: resubmitting is the operator's call.
ORPHAN_LEFT = "left: no frame tells its state; resubmit it with 'job submit --move', or remove it"
#: Where a repair moves the stale names of a duplicated job, as the messages name it.
DUPLICATES_SHOWN = f".httk-workflow/quarantine/{DUPLICATES}/"
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
        self._transferring: dict[str, list[Marker]] = defaultdict(list)  # transfer id -> its transferring jobs

    def run(self) -> dict[str, Any]:
        """Observe everything, wait out the visibility deadline once for every suspicion, then decide (and repair)."""
        mets: dict[str, list[Met]] = defaultdict(list)
        names: list[tuple[str, str, str, Met | None]] = []
        checked = 0

        def damaged_name(code: str, path: str, message: str) -> None:
            names.append(self._observe_name(code, path, message))

        for kind in StateKind:
            for marker in self.store.iter_markers(kind, on_damage=damaged_name):
                path = self.store.marker_path(marker)
                info = self.fs.lstat(path)
                if info is None:
                    continue  # renamed since it was listed: met under its new name, or confirmed missing below
                checked += 1
                if self.progress is not None:
                    self.progress(1)
                mets[marker.job_id].append(self._observe(marker, path, marker_file_problem(info)))
        seen = {job_id: [met.marker for met in group] for job_id, group in mets.items()}
        if self.repair:
            self._journal_index()  # one pass over the journal serves the repairs and the census below
        # Every suspicion is observed before anything waits, and all of them share one deadline.
        unseen = [met for group in mets.values() for met in group if met.unseen]
        unseen += [met for *_, met in names if met is not None and met.unseen]

        def frames() -> bool:
            unseen[:] = [met for met in unseen if not self._read(met)]
            return not unseen

        duplicates = Duplicates(self.fs, {job_id: [met.path for met in group]
                                          for job_id, group in mets.items() if len(group) > 1})
        misnamed = {met.marker.job_id for *_, met in names if met is not None and met.valid}
        unmarked = UnmarkedCheck(self.fs, self.handle.layout, self._unmarked_suspects(set(mets) | misnamed))
        missing = missing_reservations(self.fs, self.handle.layout, seen, 0.0)

        def reservations() -> bool:
            missing.intersection_update(missing_reservations(self.fs, self.handle.layout, missing, 0.0))
            return not missing

        wait_once(self.fs, [frames, duplicates.probe, unmarked.probe, reservations], self.store.config.deadline_seconds)
        problems = [self._name_problem(code, path, message, met) for code, path, message, met in names]
        problems += self._marker_problems(mets, duplicates)
        suspects = [job for job in unmarked.pending.values() if job.job_id not in self._misnamed]
        suspects.sort(key=lambda job: (job.placement, str(job.key)))
        problems.extend(self._unmarked_problem(job) for job in suspects)
        problems.extend(id_reservation_problems(self.fs, self.handle.layout, seen, missing,
                                                repair=self.repair, durable=self.handle.durable))
        older_than = self.handle.ports.clock.now() - RESERVATION_TEMP_SECONDS
        problems.extend(reservation_temp_problems(self.fs, self.handle.layout, older_than, repair=self.repair))
        from .fsck_transfers import transfer_problems  # here: `workspace status` imports this module for job_damage

        unfinished = transfer_problems(self.handle, self._transferring, repair=self.repair, problems=problems)
        # Only a repair settles a problem: a quarantined job is out of the workspace, for an operator to decide.
        left = [problem for problem in problems if problem.action != "repaired"]
        return {
            "workspace": self.handle.root,
            "markers_checked": checked,
            "problems": [problem.to_json() for problem in problems],
            "clean": not problems,
            "left_for_operator": len(left),
            # Warnings, not problems: the jobs are safe at one end, and the transfer command finishes them.
            "unfinished_transfers": unfinished,
        }

    def _observe(self, marker: Marker, path: str, bad: tuple[str, str] | None) -> Met:
        """One marker as the walk meets it: its file, its frame (read once) and, for a marker file, its job.json."""
        met = Met(marker, path, bad)
        self._read(met)
        if bad is None:
            try:
                self.store.read_spec(marker)
            except JobDamage as damage:
                met.definition = damage
        return met

    def _marker_problems(self, mets: dict[str, list[Met]], duplicates: Duplicates) -> list[Problem]:
        """Each marker's problems, a duplicated job's judged as a whole; the ``duplicate_marker`` ones last."""
        confirmed = duplicates.confirmed()
        found: list[Problem] = []
        doubles: list[Problem] = []
        for job_id, group in mets.items():
            if job_id in confirmed:
                *members, double = self._duplicate(job_id, [met for met in group if met.path in confirmed[job_id]])
                found.extend(members)
                doubles.append(double)
                continue
            for met in group:  # met twice but no duplicate: a job that moved, judged under the name still there
                if len(group) == 1 or met.path in duplicates.present[job_id]:
                    found.extend(self._single(met))
        return found + doubles

    def _read(self, met: Met) -> bool:
        """Read ``met``'s frame once, without waiting; ``True`` unless a lagging view may still show it."""
        try:
            met.frame, met.damage = self.store.read_frame(met.marker, deadline_seconds=0.0), None
        except JobDamage as damage:
            met.frame, met.damage = None, damage
        return not met.unseen

    def _single(self, met: Met) -> list[Problem]:
        """The problems of the one marker of a job (or of one that is no confirmed duplicate)."""
        if met.bad is not None:
            return [self._bad_marker(met, *met.bad)]
        problems = []
        if met.damage is not None:
            problems.append(self._handle_damage(met.marker, met.damage))
        elif met.marker.kind is StateKind.TRANSFERRING:
            self._note_transferring(met.marker, met.frame)
        if met.definition is not None:
            problems.append(self._definition_problem(met.marker, met.definition))
        return problems

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
            generation=self._next_generation(marker.job_id, marker.generation),
            kind=marker.kind,
            event=Event.FSCK_REPAIR.value,
            previous_record_ref=ref,
            created_at=self.handle.ports.clock.now(),
            priority=marker.priority,
            reason=f"fsck repaired {damage.code}; recovered generation {frame.generation}",
        )
        new_ref = self._append(new_frame)
        new_marker = attrs.evolve(marker, generation=new_frame.generation, ref=str(new_ref))
        try:
            self.fs.rename(path, self.store.marker_path(new_marker), durable=self.handle.durable)
        except FileNotFoundError:
            return attrs.evolve(problem, action="left: the marker changed while being repaired")
        return attrs.evolve(problem, action="repaired")

    def _owner_live(self, marker: Marker, owner_id: str | None = None) -> bool:
        """Whether a manager heartbeat younger than its lease could own this job.

        Only ``owner_id``'s when the job's frame names its owner; any manager's when it is unknown.
        """
        now = self.handle.ports.clock.now()
        for entry in self.fs.scandir(self.handle.layout.managers):
            if owner_id is not None and entry.name != owner_id:
                continue
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

    def _next_generation(self, job_id: str, floor: int) -> int:
        """Above ``floor`` and above every frame of the job the journal holds: a job's generations stay unique."""
        return max([floor, *(generation for generation, _, _ in self._journal_index().get(job_id, []))]) + 1

    def _append(self, frame: StateFrame) -> RecordRef:
        """Append a repair frame, and index it: a later repair of the same job in this run goes above it."""
        document = codec.frame_to_json(frame)
        ref = self.store.writer.append(document)
        self._journal_index()[frame.job_id].append((frame.generation, str(ref), document))
        return ref

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

    def _quarantine(self, marker: Marker, damage: JobDamage, under: str = "") -> None:
        """Move the entry at ``marker``'s name below the quarantine (``under`` it), after its audit record."""
        layout = self.handle.layout
        root = f"{layout.quarantine}/{under}" if under else layout.quarantine
        target = f"{root}/{marker.kind.value}/{marker.placement}/{marker.name}"
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

    # -- transfers (see transfer_ledger) -------------------------------------------------------
    def _note_transferring(self, marker: Marker, frame: StateFrame | None) -> None:
        """Remember which transfer a ``transferring`` job names (``""``: none), to match it with the ledgers."""
        note = (frame.notes if frame is not None else {}).get("transfer")
        transfer_id = note.get("id") if isinstance(note, dict) else None
        self._transferring[transfer_id if isinstance(transfer_id, str) else ""].append(marker)

    # -- what the walk alone cannot tell (see fsck_census) -----------------------------------
    def _duplicate(self, job_id: str, group: list[Met]) -> list[Problem]:
        """The problems of each of a job's confirmed markers, then its ``duplicate_marker``.

        A repair keeps the job's truth — the newest marker whose frame verifies, when the
        others' frames are in its history — and moves each other name into
        ``quarantine/duplicates/``: it is never repaired into a second state of the job.
        A name held by a symlink, FIFO, directory or non-empty file is moved only with
        ``--quarantine-unrepairable``, as a lone one is (:meth:`_bad_marker`).
        """
        double = Problem("duplicate_marker", ", ".join(met.path for met in group), job_id,
                         "one job has more than one marker")
        members = [(met, self._member_problem(met)) for met in group]
        payloads = {(met.marker.placement, str(met.marker.key)): met for met in reversed(group)}  # one per payload
        definitions = [self._definition_problem(met.marker, met.definition)
                       for met in payloads.values() if met.definition is not None]
        for met in group:  # a stale one that is set aside is gone by the time the transfers are matched
            if met.valid and met.marker.kind is StateKind.TRANSFERRING:
                self._note_transferring(met.marker, met.frame)
        if not self.repair:
            return [problem for _, problem in members if problem is not None] + definitions + [double]
        frames = {ref: document for _, ref, document in self._journal_index().get(job_id, [])}
        truth, why = choose_truth(group, frames, self._owner_live)
        if truth is None:
            left = f"left: {why}"
            return [attrs.evolve(problem, action=left) for _, problem in members if problem is not None] + \
                definitions + [attrs.evolve(double, action=left)]
        kept, problems, moved = truth.marker.relative_path(), [], 0
        for met, problem in members:
            if met is truth:
                continue
            bad = met.bad is not None and not self.quarantine  # not a marker file: set aside only when asked
            action = SET_ASIDE_LEFT if bad else self._set_aside_duplicate(met, kept)
            moved += action is None
            if problem is not None:
                problems.append(attrs.evolve(problem, action=action) if action is not None else done(
                    problem, "repaired", f"a stale copy of the job's marker {kept}: moved into {DUPLICATES_SHOWN}"))
        if moved < len(group) - 1:
            return [*problems, *definitions, attrs.evolve(double, action="left: not every stale copy could be moved")]
        detail = (f"kept {kept} (its frame verifies, and is the newest of the job's history); "
                  f"moved {moved} other(s) into {DUPLICATES_SHOWN} with an audit record")
        return [*problems, *definitions, done(double, "repaired", detail)]

    def _member_problem(self, met: Met) -> Problem | None:
        """What is wrong with one marker of a duplicate (``None`` when it verifies), as reported."""
        if met.bad is not None:
            return Problem(met.bad[0], met.path, str(met.marker.key), met.bad[1])
        if met.damage is not None:
            return Problem(met.damage.code, met.path, str(met.marker.key), met.damage.message)
        return None

    def _set_aside_duplicate(self, met: Met, kept: str) -> str | None:
        """Move a stale copy into ``quarantine/duplicates/``; why not (an action), or ``None`` when done."""
        damage = JobDamage("duplicate_marker", f"a stale copy of the job's marker {kept}", met.marker)
        try:
            self._quarantine(met.marker, damage, under=DUPLICATES)
        except FileNotFoundError:
            return "left: the marker changed while being repaired"
        except FileExistsError:
            return "left: the quarantine already holds an entry of this name; move one of them by hand"
        except OSError as error:
            return f"left: cannot move it into the quarantine: {error.strerror or error}"
        return None

    def _observe_name(self, code: str, path: str, message: str) -> tuple[str, str, str, Met | None]:
        """A state-tree name the walk could not parse, with the marker it means when only its numbers are misspelt."""
        kind, _, rest = path.removeprefix(f"{self.handle.layout.state}/").partition("/")
        placement, _, name = rest.rpartition("/")
        marker = noncanonical_marker(kind, placement, name) if code == "unparseable_name" else None
        if marker is None:
            return code, path, message, None
        met = Met(marker, path, None)
        self._read(met)
        return code, path, message, met

    def _name_problem(self, code: str, path: str, message: str, met: Met | None) -> Problem:
        """A state-tree name the walk could not parse; ``noncanonical_name`` when only its numbers are misspelt."""
        if met is None:
            return Problem(code, path, None, message)
        marker = met.marker
        problem = Problem(
            "noncanonical_name", path, str(marker.key),
            f"no manager parses this marker name: its numbers are not written as the store writes them "
            f"({marker.name})",
        )
        if met.damage is not None:
            # Not the job's marker in any spelling: the job may still be missing_marker, restored from the journal.
            left = f"left: spelt canonically it would not resolve either ({met.damage.code})"
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

    def _bad_marker(self, met: Met, code: str, message: str) -> Problem:
        """A marker name held by a symlink, FIFO, directory or non-empty file: set aside only when asked."""
        marker = met.marker
        problem = Problem(code, met.path, str(marker.key), message)
        if not self.repair:
            return problem
        if not self.quarantine:
            return attrs.evolve(problem, action=SET_ASIDE_LEFT)
        if marker.kind in OWNED_KINDS and self._owner_live(marker):
            return attrs.evolve(problem, action="left: its manager is still heartbeating within its lease")
        action = self._set_aside(marker, problem)
        if action is not None:
            return attrs.evolve(problem, action=action)
        problem = attrs.evolve(problem, message=f"{problem.message}; {SET_ASIDE}")
        if met.damage is not None:
            return done(problem, "quarantined", f"its frame is unreadable too ({met.damage.code}): no marker restored")
        return self._restore(problem, marker, met.frame, marker.ref)

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

    def _unmarked_suspects(self, met: set[str]) -> list[Unmarked]:
        """Jobs the journal or a payload holds whose marker the walk did not meet (confirmed by waiting)."""
        layout = self.handle.layout
        named = met | quarantined_jobs(self.fs, layout.quarantine)
        heads = journal_heads(self._frames(), self.handle.workspace_id, named)
        # A job that left by a transfer, or that an unfinished import will place, is not missing here.
        heads = {job: head for job, head in heads.items() if not held_by_transfer(self.fs, layout, head.frame)}
        orphans = list(payloads(self.fs, layout, lambda job_id: job_id in named or job_id in heads))
        return [*heads.values(), *orphans]

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
                generation=self._next_generation(marker.job_id, marker.generation),
                event=Event.FSCK_REPAIR.value,
                previous_record_ref=ref,
                created_at=self.handle.ports.clock.now(),
                reason=f"fsck restored the marker of generation {marker.generation}",
            )
            new_ref = self._append(frame)
            restored = Marker(frame.kind, frame.placement, marker.key, frame.priority, frame.generation, str(new_ref))
        try:
            self.fs.create_empty(self.store.marker_path(restored), durable=self.handle.durable)
        except FileExistsError:
            return attrs.evolve(problem, action=f"left: {restored.relative_path()} exists already")
        return done(problem, "repaired", f"marker restored as {restored.relative_path()}")
