"""fsck beyond one marker's frame: the marker file, duplicates, jobs no marker names, job-id reservations.

A walk of the state tree lists the kinds one after another, so it is no snapshot:
a job moving between two kinds while they are listed is met twice, or not at all.
Every such suspicion is therefore confirmed by reading again through the
filesystem port, waiting out the visibility deadline, before it is reported: a
duplicate only when two of its names are still there, a missing marker only when
no kind holds one at the job's placement. A live workspace then reports no
damage a transition made up.

What a complete check costs, on top of the marker walk (one ``lstat``, one frame
read and one ``job.json`` read per marker): one pass over every frame of the
journal, keeping only the jobs no marker named; one listing of every directory
of the placement tree outside ``.httk-workflow``, never entering a payload; one
walk of the quarantine tree. Confirming costs a few listings of the placements
concerned, and a wait of at most the visibility deadline when something is
really wrong: fsck probes every kind of suspicion in one shared wait
(:func:`wait_once`). A job met under several markers is judged as a whole
(:func:`choose_truth`). Spec: 000 "Checking and repairing a workspace".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

import attrs

from ..domain.frames import StateFrame
from ..domain.lifecycle import OWNED_KINDS, StateKind
from ..domain.model import CONTROL_DIR, RESERVED_PLACEMENT_NAMES, JobKey, ValidationError, check_placement
from ..ports import FileStat, Filesystem
from ..protocol import JOB_FILE
from ..store.job_ids import JobIdTaken, read_reservation, reservation_of, reservation_temps, reserve_job_id
from ..store.journal import JournalReader, RecordRef
from ..store.layout import Layout
from ..store.markers import Marker, MarkerNameError, shown
from ..store.store import JobDamage

#: A number written another way than the store writes it: a sign, or leading zeros.
_LOOSE_PRIORITY = re.compile(r"p[+-]?[0-9]{1,22}")
_LOOSE_GENERATION = re.compile(r"g[0-9a-z]{1,22}")
_AUDIT_SUFFIX = ".audit.json"
_KINDS = frozenset(kind.value for kind in StateKind)
#: A reservation temp this old is left by a creation that died: a live one renames or removes its temps in moments.
RESERVATION_TEMP_SECONDS = 3600.0
#: Damage a lagging view shows for a while (a segment, or a frame's tail, not visible yet): waited out.
UNSEEN = frozenset({"missing_segment", "short_read"})
#: Below the quarantine: the stale copies of a job's marker a repair set aside (the job keeps its marker).
DUPLICATES = "duplicates"


@attrs.frozen
class Problem:
    code: str
    path: str
    job: str | None
    message: str
    action: str = "reported"

    def to_json(self) -> dict[str, Any]:
        # A name that is not UTF-8 is reported as \xNN: the report itself must print and encode.
        return {name: shown(value) if isinstance(value, str) else value for name, value in attrs.asdict(self).items()}


def done(problem: Problem, action: str, detail: str) -> Problem:
    """``problem`` with a final action (``repaired``, ``quarantined``) and what exactly was done."""
    return attrs.evolve(problem, action=action, message=f"{problem.message}; {detail}")


@attrs.define
class Met:
    """One marker the walk met and what reading it found, before anything is repaired."""

    marker: Marker
    path: str
    #: ``(code, message)`` when the entry at the marker's name is no empty regular file.
    bad: tuple[str, str] | None
    frame: StateFrame | None = None
    damage: JobDamage | None = None
    definition: JobDamage | None = None

    @property
    def valid(self) -> bool:
        """An empty file whose frame verifies: a marker a manager acts on."""
        return self.bad is None and self.damage is None

    @property
    def unseen(self) -> bool:
        """Damaged in a way a lagging view shows too: read again until the visibility deadline."""
        return self.damage is not None and self.damage.code in UNSEEN


def noncanonical_marker(kind: str, placement: str, name: str) -> Marker | None:
    """The marker ``name`` means when only its numbers are misspelt (``p+0``, ``p007``, ``g01``), else ``None``."""
    parts = name.rsplit(".", 3)
    if len(parts) != 4 or kind not in _KINDS or not placement:
        return None
    key_text, priority_text, generation_text, ref = parts
    if not ref or not _LOOSE_PRIORITY.fullmatch(priority_text) or not _LOOSE_GENERATION.fullmatch(generation_text):
        return None
    generation = generation_text[1:].lstrip("0") or "0"
    try:
        marker = Marker.parse(kind, placement, f"{key_text}.p{int(priority_text[1:])}.g{generation}.{ref}")
    except MarkerNameError:
        return None  # misspelt in some other way too, or out of range: only unparseable
    return marker if marker.name != name else None


def marker_file_problem(info: FileStat) -> tuple[str, str] | None:
    """``(code, message)`` when the file at a marker's name is not what a manager acts on."""
    if info.is_symlink or info.is_dir or not info.is_file:
        what = "a symbolic link" if info.is_symlink else "a directory" if info.is_dir else "a FIFO, socket or device"
        return "marker_not_regular", f"the marker is {what}, not a regular file; no manager acts on it"
    if info.size:
        return "marker_not_empty", f"the marker holds {info.size} bytes; a marker is an empty file"
    return None


#: A probe of one kind of suspicion: ``True`` once every suspicion it holds is settled (seen, or gone).
Probe = Callable[[], bool]


def wait_once(fs: Filesystem, probes: Iterable[Probe], deadline: float) -> None:
    """One visibility wait shared by every suspicion of a run: each probe is called until it settles.

    Started once every suspicion has been observed, so each one still gets the whole
    deadline after it was seen, but N suspicions cost one deadline, not N. A settled
    probe is not called again.
    """
    unsettled = list(probes)

    def probe() -> bool | None:
        unsettled[:] = [each for each in unsettled if not each()]
        return True if not unsettled else None

    fs.retry_until(probe, deadline)


class Duplicates:
    """Jobs met more than once: which of their marker paths are still there (``probe`` until settled).

    A job that moved from a listed kind into one not yet listed is met twice, but its
    old name is gone (a lagging view keeps showing it for less than the deadline).
    """

    def __init__(self, fs: Filesystem, groups: dict[str, list[str]]) -> None:
        self._fs = fs
        #: Job id -> the paths still present; a job with fewer than two is settled (no duplicate).
        self.present = {job: list(paths) for job, paths in groups.items()}

    def probe(self) -> bool:
        unsettled = False
        for job, paths in self.present.items():
            if len(paths) >= 2:
                self.present[job] = [path for path in paths if self._fs.lstat(path) is not None]
                unsettled = unsettled or len(self.present[job]) >= 2
        return not unsettled

    def confirmed(self) -> dict[str, list[str]]:
        """The groups of which two or more paths are still there."""
        return {job: paths for job, paths in self.present.items() if len(paths) >= 2}


def descends(frames: dict[str, dict[str, Any]], newer: Met, older: Met) -> bool:
    """Whether ``older``'s frame is in the history of ``newer``'s, following ``previous_record_ref`` through
    ``frames`` (the job's readable frames by reference); generation 0 when the history reaches its submission."""
    ref = newer.frame.previous_record_ref if newer.frame is not None else None
    visited: set[str] = set()
    while isinstance(ref, str) and ref not in visited:
        if ref == older.marker.ref:
            return True
        visited.add(ref)
        document = frames.get(ref)
        if document is None:
            return False  # a frame the journal does not hold readably: no history to tell
        ref = document.get("previous_record_ref")
    return ref is None and older.marker.generation == 0


def choose_truth(
    group: list[Met], frames: dict[str, dict[str, Any]], owner_live: Callable[[Marker, str | None], bool]
) -> tuple[Met | None, str]:
    """The one marker of a job met under several names that is its state, else ``None`` and why none is.

    The protocol's answer: the newest marker whose frame verifies, provided every other
    verifying one is in its history (a stale name a rename left behind). Anything else —
    two jobs sharing an id, nothing that verifies, a newer marker that does not, two
    histories, or a stale name a live manager may own — is for an operator. ``owner_live`` is
    asked about the owner the stale name's frame names (``None`` when it does not read: any live
    manager may own it then).
    """
    if len({(met.marker.placement, str(met.marker.key)) for met in group}) > 1:
        return None, "the markers are at different placements or under different keys: two jobs share one id"
    valid = [met for met in group if met.valid]
    if not valid:
        return None, "none of its markers resolves to its frame: which one is the job's state is unknown"
    top = max(met.marker.generation for met in valid)
    newest = [met for met in valid if met.marker.generation == top]
    if len(newest) > 1:
        return None, f"{len(newest)} markers verify at generation {top}: which one committed is unknown"
    [truth] = newest
    for met in group:
        if met is truth:
            continue
        if met.marker.generation > top:
            return None, f"a newer marker (generation {met.marker.generation}) does not resolve to its frame"
        if met.valid and not descends(frames, truth, met):
            return None, (f"generation {met.marker.generation} is not in the history of generation {top}: "
                          "which one committed is unknown")
        owner = met.frame.owner if met.frame is not None else None
        if met.marker.kind in OWNED_KINDS and owner_live(met.marker, owner.manager_id if owner else None):
            return None, "a manager is still heartbeating within its lease; run the repair again once it stops"
    return truth, ""


@attrs.define
class Unmarked:
    """A job the journal or a payload holds whose marker the walk did not meet."""

    job_id: str
    placement: str
    key: JobKey
    #: The newest generation the journal holds for it, and every frame at that generation.
    generation: int | None = None
    refs: list[str] = attrs.field(factory=list)
    #: The document of a newest frame (the journal's word on where the job went: a transfer may hold it).
    frame: dict[str, Any] | None = None
    #: Entries carrying the job's marker name that are directories (set while confirming).
    squatters: list[Marker] = attrs.field(factory=list)


def iter_frames(fs: Filesystem, reader: JournalReader, journal: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every readable frame of every segment of every writer, as ``(record reference, document)``."""
    for writer in fs.scandir(journal):
        for segment in fs.scandir(writer.path):
            for ref, document in reader.iter_segment(segment.path):
                if isinstance(ref, RecordRef) and isinstance(document, dict):
                    yield str(ref), document


def journal_heads(
    frames: Iterable[tuple[str, dict[str, Any]]], workspace_id: str, named: Container[str]
) -> dict[str, Unmarked]:
    """The newest frames of every job of this workspace that ``named`` lacks, in one pass over ``frames``."""
    heads: dict[str, Unmarked] = {}
    for ref, document in frames:
        job_id, generation = document.get("job_id"), document.get("generation")
        if not isinstance(job_id, str) or job_id in named or document.get("workspace_id") != workspace_id:
            continue
        if not isinstance(generation, int) or isinstance(generation, bool):
            continue
        head = heads.get(job_id)
        if head is None:
            try:
                key = JobKey.parse(str(document.get("job_key")))
                placement = check_placement(document.get("placement"))
            except ValidationError:
                continue  # a frame that does not say where its job lives cannot be looked for
            if key.job_id != job_id:
                continue
            heads[job_id] = Unmarked(job_id, placement, key, generation, [ref], document)
        elif generation > (head.generation or 0):
            head.generation, head.refs, head.frame = generation, [ref], document
        elif generation == head.generation:
            head.refs.append(ref)
    return heads


def _job_id_of(name: str) -> str | None:
    parts = name.removesuffix(_AUDIT_SUFFIX).rsplit(".", 3)
    if len(parts) != 4:
        return None
    try:
        return JobKey.parse(parts[0]).job_id
    except ValidationError:
        return None


def quarantined_jobs(fs: Filesystem, quarantine: str) -> set[str]:
    """The jobs with a marker (or a squatter, or an audit record) in the quarantine tree: set aside on purpose.

    A stale copy of a duplicate (below ``duplicates/``) sets no job aside: should the
    marker the repair kept go missing too, the job is ``missing_marker``.
    """
    found: set[str] = set()
    pending = [quarantine]
    while pending:
        for entry in fs.scandir(pending.pop()):
            job_id = _job_id_of(entry.name)
            if job_id is not None:
                found.add(job_id)
            elif entry.is_dir and not entry.is_symlink and entry.path != f"{quarantine}/{DUPLICATES}":
                pending.append(entry.path)  # not the stale copies of duplicates: their jobs kept a marker
    return found


def payloads(fs: Filesystem, layout: Layout, known: Callable[[str], bool]) -> Iterator[Unmarked]:
    """Every payload below the workspace root (not the control tree) whose job ``known`` does not know.

    A payload is a directory named by a job key holding a ``job.json``; the walk never
    enters one, nor follows a link.
    """
    pending = [("", layout.root)]
    while pending:
        placement, directory = pending.pop()
        for entry in fs.scandir(directory):
            if not entry.is_dir or entry.is_symlink or (not placement and entry.name == CONTROL_DIR):
                continue
            key = _job_key(entry.name) if placement else None
            if key is not None and known(key.job_id):
                continue
            if key is not None and fs.lstat(f"{entry.path}/{JOB_FILE}") is not None:
                yield Unmarked(key.job_id, placement, key)
            elif entry.name not in RESERVED_PLACEMENT_NAMES:
                pending.append((f"{placement}/{entry.name}" if placement else entry.name, entry.path))


def _job_key(name: str) -> JobKey | None:
    try:
        return JobKey.parse(name)
    except ValidationError:
        return None


class UnmarkedCheck:
    """Jobs no kind seemed to hold a marker of: ``probe`` lists their placements again until each is seen.

    One listing per kind of each placement concerned, per probe. A directory that
    carries the job's marker name is no marker: it is kept in ``squatters``.
    """

    def __init__(self, fs: Filesystem, layout: Layout, jobs: list[Unmarked]) -> None:
        self._fs = fs
        self._layout = layout
        self.pending = {job.job_id: job for job in jobs}

    def probe(self) -> bool:
        pending = self.pending
        by_placement: dict[str, list[Unmarked]] = {}
        for job in pending.values():
            job.squatters = []
            by_placement.setdefault(job.placement, []).append(job)
        for placement, group in by_placement.items():
            prefixes = {f"{job.key}.": job for job in group}
            for kind in StateKind:
                for entry in self._fs.scandir(f"{self._layout.kind_dir(kind)}/{placement}"):
                    job = prefixes.get(entry.name.rsplit(".", 3)[0] + ".")
                    if job is None or job.job_id not in pending:
                        continue
                    try:
                        marker = Marker.parse(kind, placement, entry.name)
                    except MarkerNameError:
                        continue
                    if entry.is_dir and not entry.is_symlink:
                        job.squatters.append(marker)
                    else:
                        del pending[job.job_id]
        return not pending


def id_reservation_problems(
    fs: Filesystem, layout: Layout, seen: dict[str, list[Marker]], missing: set[str], *, repair: bool, durable: bool
) -> list[Problem]:
    """``missing_id_reservation`` for ``missing`` (made by ``--repair``); ``id_reservation_conflict``
    for a job whose id another job's reservation holds (left: two jobs share an id)."""
    problems = []
    for job_id in sorted(seen):
        jobs = sorted({(marker.placement, str(marker.key)) for marker in seen[job_id]})
        path = layout.id_reservation(job_id)
        if job_id in missing:
            placement, key = jobs[0]
            problem = Problem("missing_id_reservation", path, key,
                              "the job's id is not reserved (a workspace from before reservations): a "
                              "submission or spawn elsewhere could give another job the same id")
            if not repair:
                problems.append(problem)
                continue
            try:
                reserve_job_id(fs, layout, reservation_of(fs, layout, job_id, key, placement), durable=durable)
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
                                    left if repair else "reported"))
    return problems


def reservation_temp_problems(fs: Filesystem, layout: Layout, older_than: float, *, repair: bool) -> list[Problem]:
    """``stale_reservation_temp``: each temp an interrupted reservation left in ``ids/`` (``--repair`` removes it).

    Harmless to every reader (none takes a hidden name for a reservation), but it
    never goes away by itself.
    """
    problems = []
    for path in reservation_temps(fs, layout, older_than):
        problem = Problem("stale_reservation_temp", path, None,
                          "a temp of a job-id reservation whose creation was interrupted (no job holds it)")
        if not repair:
            problems.append(problem)
            continue
        try:
            fs.remove(path)
        except FileNotFoundError:
            continue  # removed meanwhile (by another fsck): nothing left to report
        except OSError as error:
            problems.append(attrs.evolve(problem, action=f"left: cannot remove it: {error.strerror or error}"))
            continue
        problems.append(done(problem, "repaired", "removed"))
    return problems
