"""fsck beyond one marker's frame: the marker file itself, and jobs that no marker names.

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
really wrong. Spec: 000 "Checking and repairing a workspace".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

import attrs

from ..domain.lifecycle import StateKind
from ..domain.model import CONTROL_DIR, RESERVED_PLACEMENT_NAMES, JobKey, ValidationError, check_placement
from ..ports import FileStat, Filesystem
from ..protocol import JOB_FILE
from ..store.journal import JournalReader, RecordRef
from ..store.layout import Layout
from ..store.markers import Marker, MarkerNameError

#: A number written another way than the store writes it: a sign, or leading zeros.
_LOOSE_PRIORITY = re.compile(r"p[+-]?[0-9]{1,22}")
_LOOSE_GENERATION = re.compile(r"g[0-9a-z]{1,22}")
_AUDIT_SUFFIX = ".audit.json"
_KINDS = frozenset(kind.value for kind in StateKind)


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


def confirm_duplicates(fs: Filesystem, groups: dict[str, list[str]], deadline: float) -> dict[str, list[str]]:
    """The groups of marker paths of which two or more are still there once the visibility deadline has passed.

    A job that moved from a listed kind into one not yet listed is met twice, but its
    old name is gone (a lagging view keeps showing it for less than the deadline).
    """
    pending = dict(groups)

    def probe() -> bool | None:
        for job in list(pending):
            present = [path for path in pending[job] if fs.lstat(path) is not None]
            if len(present) < 2:
                del pending[job]
            else:
                pending[job] = present
        return True if not pending else None

    fs.retry_until(probe, deadline)
    return pending


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
    """The jobs with a marker (or a squatter, or an audit record) in the quarantine tree: set aside on purpose."""
    found: set[str] = set()
    pending = [quarantine]
    while pending:
        for entry in fs.scandir(pending.pop()):
            job_id = _job_id_of(entry.name)
            if job_id is not None:
                found.add(job_id)
            elif entry.is_dir and not entry.is_symlink:
                pending.append(entry.path)
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


def confirm_unmarked(fs: Filesystem, layout: Layout, jobs: list[Unmarked], deadline: float) -> list[Unmarked]:
    """The jobs of which no kind holds a marker at their placement once the visibility deadline has passed.

    One listing per kind of each placement concerned, per probe. A directory that
    carries the job's marker name is no marker: it is kept in ``squatters``.
    """
    pending = {job.job_id: job for job in jobs}

    def probe() -> bool | None:
        by_placement: dict[str, list[Unmarked]] = {}
        for job in pending.values():
            job.squatters = []
            by_placement.setdefault(job.placement, []).append(job)
        for placement, group in by_placement.items():
            prefixes = {f"{job.key}.": job for job in group}
            for kind in StateKind:
                for entry in fs.scandir(f"{layout.kind_dir(kind)}/{placement}"):
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
        return True if not pending else None

    fs.retry_until(probe, deadline)
    return list(pending.values())
