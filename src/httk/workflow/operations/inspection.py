"""Read-only inspection: resolve a job selector, status counts, list, show and log one job.

Everything here reads the way a manager reads — marker, then the journal frame it
names, then ``job.json`` — through the store, and nothing here writes protocol
state. Damage is data, not a crash: an unreadable frame is reported with its
stable code, and whatever history remains readable is still shown. Scans are
exhaustive (every kind, no budget), which is right for an operator's question
and wrong for a scheduling pass. Spec: 000 "Inspecting jobs", "Inspect and control".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from .. import codec
from ..domain.frames import ChildRef, JoinRecord, StateFrame
from ..domain.lifecycle import TERMINAL_KINDS, TERMINAL_NAMES, StateKind
from ..domain.model import check_placement
from ..protocol import JOB_FILE, JobSpec, RunLog
from ..store.discovery import walk_names
from ..store.job_ids import submitted_at
from ..store.journal import FrameDamage
from ..store.markers import INIT_REF, Marker, newest_per_job, shown
from ..store.store import UNRESOLVABLE_CHILD, JobDamage, Store, current_kinds
from ..store.transfer_ledger import departed, resume_command, unfinished_sources
from ..store.workspaces import WorkspaceHandle

#: A resolution that finds nothing scans once more, because an exhaustive
#: walk of the kinds in order can miss a job that moved backwards (committing → ready) under it.
_RESOLVE_SCANS = 2
_MAX_LISTED_MATCHES = 20
_ATTEMPT_DIR = re.compile(r"^[0-9]{4,}-")
RUNLOG_FORMAT = RunLog.FORMAT


class SelectorError(ValueError):
    """A job selector that matches no job or more than one; the message names the selector."""

    def __init__(self, message: str, matches: Sequence[Marker] = ()) -> None:
        super().__init__(message)
        self.matches = tuple(matches)


# -- selection ---------------------------------------------------------------------------------
def _candidates(store: Store, wanted: str, damaged: list[str] | None = None) -> list[Marker]:
    """Every marker whose name contains ``wanted``: all the markers of every job a selector can name.

    A job id and a key are parts of the marker name, so a name without ``wanted`` in it
    cannot match; only the names that hold it are parsed. The state-tree names holding
    ``wanted`` that are no marker are appended to ``damaged`` (as the walk reports them).
    """

    def note(_code: str, path: str, message: str) -> None:
        if damaged is not None and wanted in path.rsplit("/", 1)[-1]:
            damaged.append(f"{shown(path)} ({message})")

    return [
        Marker.parse(kind, placement, name)
        for kind in StateKind
        for placement, name in walk_names(store.fs, store.layout, kind, on_damage=note)
        if wanted in name
    ]


def _describe_match(marker: Marker) -> str:
    return f"{marker.key} ({marker.kind.value} at {marker.placement})"


def resolve_job(handle: WorkspaceHandle, selector: str) -> Marker:
    """The current marker of the one job ``selector`` names.

    ``selector`` is a job uuid, a ``tag--uuid`` key, or a unique prefix of either;
    :class:`SelectorError` when it matches no job or more than one.
    """
    wanted = selector.strip().lower()  # keys and uuids are lowercase by construction
    if not wanted:
        raise SelectorError("empty job selector: give a job uuid, a tag--uuid key, or a unique prefix")
    store = handle.store
    damaged: list[str] = []
    for _ in range(_RESOLVE_SCANS):
        damaged.clear()
        jobs = newest_per_job(_candidates(store, wanted, damaged))
        exact = [m for m in jobs.values() if wanted in (m.job_id, str(m.key))]
        if exact:
            # A job id is unique and a key names exactly one id, so an exact match is one job.
            return exact[0]
        prefixed = sorted(
            (m for m in jobs.values() if m.job_id.startswith(wanted) or str(m.key).startswith(wanted)),
            key=lambda m: str(m.key),
        )
        if len(prefixed) == 1:
            return prefixed[0]
        if prefixed:
            shown = ", ".join(_describe_match(m) for m in prefixed[:_MAX_LISTED_MATCHES])
            more = len(prefixed) - _MAX_LISTED_MATCHES
            suffix = f", and {more} more" if more > 0 else ""
            raise SelectorError(
                f"job selector {wanted!r} is ambiguous: it matches {len(prefixed)} jobs: {shown}{suffix}; "
                "give more of the uuid or the key",
                prefixed,
            )
    if damaged:
        # The job may exist under a damaged marker name: say so rather than that it does not exist.
        raise SelectorError(
            f"no job matches selector {wanted!r} in workspace {handle.root}, but a damaged marker name holds it: "
            f"{damaged[0]} (unparseable_name); run 'httk workflow workspace fsck {handle.root}'"
        )
    raise SelectorError(f"no job matches selector {wanted!r} in workspace {handle.root}{_gone(handle, wanted)}")


def _gone(handle: WorkspaceHandle, wanted: str) -> str:
    """Where a transfer took the job ``wanted`` names, as a clause for the refusal ('' when none did)."""
    moved = departed(handle.fs, handle.layout, handle.ports.clock, wanted)
    if moved is None:
        return ""
    where = moved["destination"]
    if where is None:
        return (f": transfer {moved['transfer_id']} took job {moved['job_key']} away (its ledger names no "
                f"destination); see 'httk workflow workspace fsck {handle.reference}'")
    return (f": transfer {moved['transfer_id']} took job {moved['job_key']} to {where}; see it there with "
            f"'httk workflow job show {where} {moved['job_key']}', or bring it back with 'httk workflow transfer "
            f"{where} {handle.reference} --job {moved['job_key']}'")


def placement_note(handle: WorkspaceHandle, placement: str | None) -> str | None:
    """When no job of any kind is at or below ``placement``: one line saying so, with the nearest
    placement there is (a typo?); ``None`` when one is, or no placement was given. Reads only."""
    if not placement:
        return None
    from ..domain.placement import nearest_placement, placement_matches

    placements = {marker.placement for marker in handle.store.current_markers().values()}
    if any(placement_matches(found, (placement,)) for found in placements):
        return None
    nearest = nearest_placement(placement, placements)
    return f"no job is at or below placement {placement!r}" + (f" (did you mean {nearest!r}?)" if nearest else "")


# -- status and list ---------------------------------------------------------------------------
#: Active jobs whose frame and job.json ``workspace status`` reads, at most (one manager pass's
#: ``maximum_pass_markers``): the check costs about 0.3 ms a job, so a campaign's queue of 100,000
#: ready jobs would make status take half a minute. Past the limit the jobs are counted and the
#: report says how many were not read; ``workspace fsck`` checks every job.
STATUS_CHECK_LIMIT = 256


def status(handle: WorkspaceHandle, *, check_limit: int = STATUS_CHECK_LIMIT) -> dict[str, Any]:
    """Counts of jobs per state kind, with the workspace's identity, durability, policy and damage.

    The counts come from one streaming walk of the marker names (no frame is read for
    them). The first ``check_limit`` *active* jobs are also read as a manager reads them
    (frame, then job.json), with the same check as ``workspace fsck``, so damage a
    manager would meet is listed with fsck's code; past the limit the report carries
    ``damage_unchecked``, the active jobs not read. Terminal jobs are only counted:
    reading every finished job would make status cost grow with history; ``workspace
    fsck`` checks those.
    """
    store = handle.store
    damage: list[dict[str, Any]] = []

    def note(code: str, path: str, message: str, job: str | None = None) -> None:
        damage.append({"code": code, "path": shown(path), "message": shown(message), "job": job})

    counts = {kind.value: 0 for kind in StateKind}
    checked = unchecked = 0
    for kind in StateKind:
        count = 0
        for placement, name in walk_names(store.fs, store.layout, kind, on_damage=note):
            count += 1
            if kind in TERMINAL_KINDS:
                continue
            if checked >= check_limit:
                unchecked += 1
                continue
            checked += 1
            # fsck's own check, imported when there is a job to check (an empty workspace never pays).
            from .fsck import definition_path, job_damage

            marker = Marker.parse(kind, placement, name)
            check = job_damage(store, marker)
            if check.frame is not None:
                note(check.frame.code, store.marker_path(marker), check.frame.message, str(marker.key))
            if check.definition is not None:
                message = f"job.json is unreadable: {check.definition.message}"
                note(check.definition.code, definition_path(store, marker), message, str(marker.key))
        counts[kind.value] = count
    report = {
        "name": handle.name,
        "path": handle.root,
        # How fix hints name it: REMOTE:PATH when the command was forwarded here.
        "reference": handle.reference,
        "workspace_id": handle.workspace_id,
        "durable": handle.durable,
        "policy": handle.policy,
        "counts": counts,
        "total": sum(counts.values()),
        "damage": damage,
    }
    if unchecked:
        report["damage_unchecked"] = unchecked
    # Jobs a killed transfer left transferring: nothing but finishing that transfer moves them again.
    report["unfinished_transfers"] = [
        entry if entry.get("problem") else
        {**entry, "resume": resume_command(handle.reference, entry["destination"] or "DESTINATION")}
        for entry in unfinished_sources(store.fs, store.layout, handle.ports.clock)
    ]
    return report


def _marker_summary(marker: Marker) -> dict[str, Any]:
    return {
        "job_key": str(marker.key),
        "job_id": marker.job_id,
        "tag": marker.key.tag,
        "kind": marker.kind.value,
        "placement": marker.placement,
        "priority": marker.priority,
        "generation": marker.generation,
        "record_ref": marker.ref,
    }


def list_jobs(
    handle: WorkspaceHandle, kinds: Sequence[StateKind | str] | None = None, placement: str | None = None
) -> list[dict[str, Any]]:
    """One summary per job (from marker names alone), filtered by kinds and a placement prefix.

    The placement filter matches whole path components: ``project-a`` selects
    ``project-a/00`` but not ``project-ab``. Raises ``ValidationError`` for a bad prefix.
    """
    chosen = tuple(StateKind(kind) for kind in kinds) if kinds else tuple(StateKind)
    # The prefix becomes a directory below each kind tree, so it must be a valid placement.
    prefixes = (check_placement(placement),) if placement else ()
    store = handle.store
    markers = [marker for kind in chosen for marker in store.iter_markers(kind, prefixes)]
    return [_marker_summary(marker) for marker in markers]


# -- show --------------------------------------------------------------------------------------
def _job_bytes(store: Store, marker: Marker) -> bytes | None:
    try:
        return store.fs.read_document(f"{store.payload_dir(marker)}/{JOB_FILE}")
    except OSError:  # absent, or not a small regular file (the spec error says which)
        return None


def _budgets(spec: JobSpec, frame: StateFrame) -> dict[str, Any]:
    # Imported here: only ``job show`` reports budgets, and status and list need none of their records.
    from ..domain.budgets import Counters, describe

    # The counters' activation ordinal is 1-based; a job never claimed has consumed no activation.
    counters = Counters(
        activation_ordinal=max(frame.activation_ordinal, 1),
        attempts_in_activation=frame.attempt_ordinal,
        total_attempts=frame.total_attempts,
    )
    budgets = describe(spec.retry_policy, counters)
    if frame.activation_ordinal == 0:
        limit = spec.maximum_activations
        budgets["maximum_activations"] = {"limit": limit, "used": 0, "remaining": limit, "exhausted": False}
    return budgets


def _join_children(store: Store, parent_id: str, join: JoinRecord) -> list[dict[str, Any]]:
    """Each join child's ``{label, job_key, job_id, placement, kind, failure}``.

    The kind is the child's terminal note's, else the kind of its current marker
    (:func:`~..store.store.current_kinds`, the lookup context.json uses) or ``unresolvable``.
    One listing of the notes and one per placement and kind, whatever the number of children.
    """
    directory = f"{store.layout.control}/joins/{parent_id}"
    noted = {entry.name for entry in store.fs.scandir(directory)}
    entries = [_child_state(store, directory, noted, child) for child in join.children]
    unnoted = [child for child, entry in zip(join.children, entries, strict=True) if entry["kind"] is None]
    kinds = current_kinds(store.fs, store.layout, unnoted)
    for entry in entries:
        if entry["kind"] is None:
            kind = kinds.get(entry["job_id"])
            entry["kind"] = kind.value if kind is not None else UNRESOLVABLE_CHILD
    return entries


def _child_state(store: Store, directory: str, noted: set[str], child: ChildRef) -> dict[str, Any]:
    """One child as its terminal note says; ``kind`` is ``None`` when it has no usable note."""
    entry: dict[str, Any] = {"label": child.label, "job_key": child.job_key, "job_id": child.job_id,
                             "placement": child.placement, "kind": None, "failure": None}
    name = f"{child.job_id}.json"
    if name not in noted:
        return entry
    path = f"{directory}/{name}"
    try:
        note = codec.decode_object(store.fs.read_document(path), path)
    except FileNotFoundError:
        return entry  # removed since the listing
    except (OSError, codec.DocumentError) as error:
        entry["note_error"] = str(error)
        return entry
    if note.get("kind") not in TERMINAL_NAMES:
        # Read as no note, as the waiting pass reads it (engine.commit.read_note).
        entry["note_error"] = f"{path}: the note names no terminal kind ({note.get('kind')!r})"
        return entry
    entry.update(
        kind=note["kind"],
        failure=note.get("failure"),
        placement=note.get("placement", child.placement),
        job_key=note.get("job_key", child.job_key),
    )
    return entry


def _latest_control(store: Store, job_id: str) -> str | None:
    names = sorted(
        entry.name
        for entry in store.fs.scandir(store.layout.job_attempts(job_id))
        if entry.is_dir and _ATTEMPT_DIR.match(entry.name)
    )
    return f"{store.layout.job_attempts(job_id)}/{names[-1]}" if names else None


def _paths(store: Store, marker: Marker, spec: JobSpec | None) -> dict[str, Any]:
    control = _latest_control(store, marker.job_id)
    workdir: str | None = None
    data: str | None = None
    if spec is not None:
        if spec.workdir_mode == "isolated":
            workdir = f"{control}/workdir" if control else None
        else:
            workdir = store.layout.persistent_workdir(marker.job_id)
        if spec.data_mode == "transactional":
            data = f"{store.layout.data_dir(marker.job_id)}/current"
    return {
        "marker": store.marker_path(marker),
        "payload": store.payload_dir(marker),
        "control": control,
        "workdir": workdir,
        "workdir_exists": workdir is not None and store.fs.exists(workdir),
        "data": data,
    }


#: How many of the latest attempt's headline events ``job show`` reports, newest last.
HEADLINES_SHOWN = 5
RUNLOG = ".httk-runner/runlog.jsonl"
#: Only the end of a run log is read for its headlines: a step may log a great deal.
_RUNLOG_TAIL_BYTES = 256 * 1024


def latest_headlines(store: Store, paths: dict[str, Any], limit: int = HEADLINES_SHOWN) -> list[dict[str, Any]]:
    """The newest ``limit`` headline events of the latest attempt (oldest first), from its workdir's run log.

    Spec 002: a headline is "meant to be read first when the job is inspected". Read from the end
    of ``<workdir>/.httk-runner/runlog.jsonl``; a torn or foreign line is skipped, and a run log
    reached through a symbolic link (the runner owns its workdir) is not read at all.
    """
    control, workdir = paths.get("control"), paths.get("workdir")
    if not control or not workdir:
        return []
    attempt_id = control.rsplit("/", 1)[-1].partition("-")[2]
    path = f"{workdir}/{RUNLOG}"
    fs = store.fs
    stat = fs.lstat(path)
    if stat is None or not stat.is_file or fs.find_symlink(workdir, path) is not None:
        return []
    offset = max(0, stat.size - _RUNLOG_TAIL_BYTES)
    try:
        lines = fs.read_range(path, offset, stat.size - offset).split(b"\n")
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for line in lines[1:] if offset else lines:  # a tail starts inside a line
        try:
            event = codec.decode_object(line, path)
        except codec.DocumentError:
            continue
        if event.get("format") == RUNLOG_FORMAT and event.get("kind") == "headline" \
                and event.get("attempt_id") == attempt_id:
            found.append({name: event.get(name) for name in ("time", "step", "label", "message")})
    return found[-limit:] if limit > 0 else []


def job_headlines(
    store: Store, marker: Marker, spec: JobSpec | None, limit: int = HEADLINES_SHOWN
) -> list[dict[str, Any]]:
    """:func:`latest_headlines` of one job, its latest attempt's workdir found as ``job show`` finds it."""
    return latest_headlines(store, _paths(store, marker, spec), limit)


def show_job(handle: WorkspaceHandle, marker: Marker) -> dict[str, Any]:
    """Everything ``job show`` reports about one job; frame damage is reported, never raised."""
    from ..languages.realization import realization_of  # here: status and list start without the languages

    store = handle.store
    report: dict[str, Any] = _marker_summary(marker)
    damage: dict[str, str] | None = None
    try:
        frame = store.read_frame(marker)
    except JobDamage as error:
        frame, damage = None, {"code": error.code, "message": error.message}
    spec: JobSpec | None
    try:
        spec, spec_error = store.read_spec(marker), None
    except JobDamage as error:
        spec, spec_error = None, {"code": error.code, "message": error.message}
    if frame is None and damage is None and spec is not None:
        frame = store.initial_frame(marker, spec)
    data = _job_bytes(store, marker)
    report.update(
        damage=damage,
        job_error=spec_error,
        job_digest=hashlib.sha256(data).hexdigest() if data is not None else None,
        name=spec.name if spec else None,
        workflow=spec.workflow if spec else None,
        workflow_realization=realization_of(spec.runner_source, spec.runner_path).kind if spec else None,
        language=realization_of(spec.runner_source, spec.runner_path).language if spec else None,
        runner=spec.runner if spec else None,
        executor=spec.executor if spec else None,
        claim={"pool": spec.pool, "capabilities": list(spec.capabilities)} if spec else None,
        workdir_mode=spec.workdir_mode if spec else None,
        data_mode=spec.data_mode if spec else None,
        initial_step=spec.initial_step if spec else None,
        paths=_paths(store, marker, spec),
    )
    report.update(_frame_part(store, marker, frame, spec))
    report["headlines"] = latest_headlines(store, report["paths"])
    return report


def _frame_part(store: Store, marker: Marker, frame: StateFrame | None, spec: JobSpec | None) -> dict[str, Any]:
    if frame is None:
        return {"step": None, "budgets": None, "join": None, "children": None, "failure": None}
    join = frame.join
    children = None
    if join is not None:
        children = _join_children(store, marker.job_id, join)
    return {
        "step": frame.step,
        "event": frame.event,
        "created_at": frame.created_at if frame.generation else submitted_at(store.fs, store.layout, marker.job_id),
        "runner_steps": list(frame.runner_steps) if frame.runner_steps is not None else None,
        "activation_ordinal": frame.activation_ordinal,
        "attempt_ordinal": frame.attempt_ordinal,
        "total_attempts": frame.total_attempts,
        "unclean_exits": frame.unclean_exits,
        "data_generation": frame.data_generation,
        "pause_requested": frame.pause_requested,
        "budgets": _budgets(spec, frame) if spec is not None else None,
        "failure": codec.unstructure(frame.failure),
        "join": codec.unstructure(join),
        "children": children,
        "owner": codec.unstructure(frame.owner),
        "process": codec.unstructure(frame.process),
        "operator": frame.operator,
        "reason": frame.reason,
        # Set while the job is transferring (where to) and after an import (where from).
        "transfer": (frame.notes or {}).get("transfer"),
    }


# -- log ---------------------------------------------------------------------------------------
def _damage_entry(ref: str, generation: int | None, code: str, message: str) -> dict[str, Any]:
    return {"record_ref": ref, "generation": generation, "damage": {"code": code, "message": message}}


def _initial_entry(store: Store, marker: Marker) -> dict[str, Any]:
    try:
        step: str | None = store.read_spec(marker).initial_step
    except JobDamage:
        step = None
    return {
        "record_ref": INIT_REF,
        "generation": 0,
        "kind": StateKind.SUBMITTED.value,
        "event": "submit",
        # Generation 0 has no frame: the submission's time is its id reservation's.
        "created_at": submitted_at(store.fs, store.layout, marker.job_id),
        "step": step,
        "job_id": marker.job_id,
        "job_key": str(marker.key),
    }


def _readable_older(store: Store, job_id: str, below: int) -> tuple[str, dict[str, Any]] | None:
    """The newest readable frame of ``job_id`` older than generation ``below``, by scanning the journal.

    Only a damaged chain pays for this: the frame holding the backward link is the unreadable one.
    """
    best: tuple[int, str, dict[str, Any]] | None = None
    for writer in sorted(store.fs.scandir(store.layout.journal), key=lambda entry: entry.name):
        if not writer.is_dir:
            continue
        for segment in sorted(store.fs.scandir(writer.path), key=lambda entry: entry.name):
            for ref, document in store.reader.iter_segment(segment.path):
                if ref is None or not isinstance(document, dict) or document.get("job_id") != job_id:
                    continue
                generation = document.get("generation")
                if isinstance(generation, int) and generation < below and (best is None or generation >= best[0]):
                    best = (generation, str(ref), document)
    return None if best is None else (best[1], best[2])


def job_log(handle: WorkspaceHandle, marker: Marker, limit: int | None = None) -> list[dict[str, Any]]:
    """The job's state frames oldest first, walked back from its marker through ``previous_record_ref``.

    Each entry is the frame's JSON plus ``record_ref``; an unreadable frame is an
    entry with ``damage: {code, message}``, after which the walk resumes at the newest
    readable older frame of the job, if the journal holds one. ``limit`` keeps the newest entries.
    """
    store = handle.store
    newest_first: list[dict[str, Any]] = []
    ref: str | None = None if marker.ref == INIT_REF else marker.ref
    expected: int | None = marker.generation
    while ref is not None and (limit is None or len(newest_first) < limit):
        try:
            document = store.reader.read(ref)
        except FrameDamage as damage:
            newest_first.append(_damage_entry(ref, expected, damage.code, damage.message))
            recovered = _readable_older(store, marker.job_id, expected if expected is not None else 1 << 62)
            if recovered is None:
                return list(reversed(newest_first))
            ref, document = recovered
            document = {**document, "recovered_by_scan": True}
        generation = document.get("generation")
        if document.get("job_id") != marker.job_id or (
            expected is not None and not document.get("recovered_by_scan") and generation != expected
        ):
            newest_first.append(
                _damage_entry(
                    ref,
                    expected,
                    "identity_mismatch",
                    f"frame names job {document.get('job_id')} g{generation}, expected {marker.job_id} g{expected}",
                )
            )
            return list(reversed(newest_first))
        newest_first.append({**document, "record_ref": ref})
        previous = document.get("previous_record_ref")
        ref = previous if isinstance(previous, str) and previous else None
        # An fsck repair chains to the last good frame, skipping the damaged generation(s).
        repaired = document.get("event") == "fsck_repair"
        expected = generation - 1 if isinstance(generation, int) and not repaired else None
    # Generation 1 links to nothing: its predecessor is the implicit generation 0, the job.json itself.
    if ref is None and expected == 0 and (limit is None or len(newest_first) < limit):
        newest_first.append(_initial_entry(store, marker))
    return list(reversed(newest_first))
