"""``workspace report``: the campaign dashboard's data, and publishing it as one directory.

:func:`build_report` reads what the other inspection commands read — every
marker (counts per kind and per top-level placement subtree), the journal
(:mod:`.history`: throughput and time in each state), failed jobs' frames with
``job why``'s line for a few examples, flapping jobs, and the managers'
manifests and heartbeats — into one JSON document (``httk-workflow-report`` v1).
The document holds everything the page draws, so a report built on a remote
comes back as this one document and is drawn here. :func:`publish` writes the
page's files into a new directory beside the target and renames it into place,
so a reader sees either the previous report or this one, never a half-written
one. Read-only towards the workspace. Spec: docs/report.md.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from .. import codec
from ..domain.lifecycle import StateKind
from ..ports import BatchSystem, Filesystem
from ..store.markers import Marker
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle
from . import diagnosis, history

FORMAT = "httk-workflow-report"
FORMAT_VERSION = 1
REPORT_FILE = "report.json"
#: Failure codes shown, and example jobs (with their ``job why`` line) per code.
TOP_FAILURES = 10
FAILURE_EXAMPLES = 3
#: Flapping jobs listed at most (the count is always complete).
FLAPPING_LISTED = 20
_BATCH_OUTPUT = re.compile(r"^slurm-([0-9]+(?:_[0-9]+)?)\.out$")
#: Kinds a job can flap in (the ones ``job why`` folds the attempt history for).
_FLAP_KINDS = {StateKind.READY, StateKind.CLAIMED, StateKind.RUNNING, StateKind.FAILED}


class ReportError(ValueError):
    """A report that cannot be published where it was asked to be; the message names the fix."""


def _current(handle: WorkspaceHandle) -> dict[str, Marker]:
    # A job renamed between two kinds during the walk can be seen twice: the higher generation is current.
    newest: dict[str, Marker] = {}
    for kind in StateKind:
        for marker in handle.store.iter_markers(kind):
            seen = newest.get(marker.job_id)
            if seen is None or marker.generation > seen.generation:
                newest[marker.job_id] = marker
    return newest


def _subtree(placement: str) -> str:
    return placement.split("/", 1)[0] if placement else "."


def build_report(handle: WorkspaceHandle, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The report document of ``handle``'s workspace now; ``progress(n)`` hears of each journal segment read."""
    now = handle.ports.clock.now()
    markers = _current(handle)
    counts = {kind.value: 0 for kind in StateKind}
    subtrees: dict[str, Counter[str]] = defaultdict(Counter)
    for marker in markers.values():
        counts[marker.kind.value] += 1
        subtrees[_subtree(marker.placement)][marker.kind.value] += 1
    past = history.read_history(handle, progress)
    managers = diagnosis.managers(handle)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated_at": now,
        "workspace": {"name": handle.name, "path": handle.root, "workspace_id": handle.workspace_id},
        "counts": counts,
        "total": sum(counts.values()),
        "placements": [{"subtree": name, "total": sum(kinds.values()), "counts": dict(sorted(kinds.items()))}
                       for name, kinds in sorted(subtrees.items())],
        "history": past.describe(),
        "throughput": history.throughput(past.frames, until=now),
        "time_in_state": history.time_in_state(past),
        "failures": _failures(handle, markers),
        "flapping": _flapping(handle, markers, past),
        "managers": [_manager(manager) for manager in managers],
        "batch": {"remote": None, "batch_system": None, "note": None,
                  "jobs": [{"job_id": job_id, "state": None, "finished": None} for job_id in batch_job_ids(handle)]},
    }


def _failures(handle: WorkspaceHandle, markers: Mapping[str, Marker]) -> dict[str, Any]:
    by_code: dict[str, list[tuple[Marker, str]]] = defaultdict(list)
    failed = [marker for marker in markers.values() if marker.kind == StateKind.FAILED]
    for marker in failed:
        try:
            failure = handle.store.read_job(marker).frame.failure
        except JobDamage as damage:
            by_code[f"unreadable:{damage.code}"].append((marker, damage.message))
            continue
        by_code[failure.code if failure else "unrecorded"].append((marker, failure.message if failure else ""))
    ranked = sorted(by_code.items(), key=lambda item: (-len(item[1]), item[0]))
    codes = []
    for code, jobs in ranked[:TOP_FAILURES]:
        examples = []
        for marker, message in sorted(jobs, key=lambda item: str(item[0].key))[:FAILURE_EXAMPLES]:
            examples.append({"job": str(marker.key), "placement": marker.placement, "message": message,
                             "why": diagnosis.why(handle, marker)["summary"]})
        codes.append({"code": code, "jobs": len(jobs), "examples": examples})
    return {"failed": len(failed), "codes": codes, "other_codes": max(0, len(ranked) - TOP_FAILURES)}


def _flapping(handle: WorkspaceHandle, markers: Mapping[str, Marker], past: history.History) -> dict[str, Any]:
    """Jobs ``job why`` calls flapping; the journal's attempt counts pick the candidates so few jobs are read."""
    found = []
    for job_id, marker in sorted(markers.items()):
        chain = past.jobs.get(job_id)
        if marker.kind not in _FLAP_KINDS or not chain or chain[-1].total_attempts < diagnosis.FLAPPING_ATTEMPTS:
            continue
        diagnosis_report = diagnosis.why(handle, marker)
        line = next((line for line in diagnosis_report["lines"] if line.startswith("flapping:")), None)
        if line is not None:
            found.append({"job": str(marker.key), "kind": marker.kind.value, "placement": marker.placement,
                          "attempts": chain[-1].total_attempts, "why": line})
    return {"jobs": len(found), "listed": found[:FLAPPING_LISTED]}


def _manager(manager: Mapping[str, Any]) -> dict[str, Any]:
    state = "live" if manager["live"] else ("stopped" if manager["stopped"] else "stale")
    keep = ("manager_id", "host", "pid", "pools", "capabilities", "executors", "placement_prefixes", "workers",
            "lease_seconds", "started_at", "heartbeat_age")
    return {**{name: manager.get(name) for name in keep}, "state": state, "live": bool(manager["live"])}


def batch_job_ids(handle: WorkspaceHandle) -> list[str]:
    """Batch job ids of managers submitted here remotely, from the output files in ``.httk-workflow/batch``."""
    directory = posixpath.join(handle.layout.control, "batch")
    found = [match.group(1) for entry in handle.fs.scandir(directory) if (match := _BATCH_OUTPUT.match(entry.name))]
    return sorted(found, key=lambda job_id: [int(part) for part in job_id.split("_")])


#: The batch system whose manager jobs a report lists: its output file names carry the job id.
LISTED_BATCH_SYSTEM = "slurm"


def remote_batch(document: Mapping[str, Any], batch: BatchSystem, remote: str) -> dict[str, Any]:
    """The ``batch`` member of a remote's report: its manager jobs and what ``batch`` says of each.

    Slurm's job ids are read off the ``slurm-ID.out`` files the remote's
    ``.httk-workflow/batch`` holds; another batch system's jobs are not listed
    (``note`` says so), since its output names do not carry the id it answers to.
    """
    section: dict[str, Any] = {"remote": remote, "batch_system": batch.name, "jobs": [], "note": None}
    if batch.name != LISTED_BATCH_SYSTEM:
        section["note"] = (f"batch jobs are listed for a {LISTED_BATCH_SYSTEM} remote; ask {batch.name} with "
                           f"'httk workflow manager status {remote}:WORKSPACE --job ID'")
        return section
    ids = [str(job["job_id"]) for job in document["batch"]["jobs"]]
    states = batch.status(ids) if ids else {}
    section["jobs"] = [{"job_id": job_id, "state": states[job_id].state if job_id in states else None,
                        "finished": states[job_id].finished if job_id in states else None} for job_id in ids]
    return section


def check_document(document: Any) -> dict[str, Any]:
    """``document`` when it is a report this version reads (one from a remote), else :class:`ReportError`."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ReportError("the remote printed no workspace report; compare its httk version with this machine's "
                          "('httk workflow remote check REMOTE')")
    if document.get("format_version") != FORMAT_VERSION:
        raise ReportError(f"the remote's report is format version {document.get('format_version')}, this httk reads "
                          f"{FORMAT_VERSION}; install the same httk-workflow version on both machines")
    return document


# -- publishing ------------------------------------------------------------------------------------
def check_target(fs: Filesystem, out_dir: str) -> None:
    """Refuse an ``--out`` that is something other than an earlier report (it would be replaced whole)."""
    info = fs.lstat(out_dir)
    if info is None:
        return
    if not info.is_dir or info.is_symlink:
        raise ReportError(f"--out {out_dir}: exists and is not a directory; name a new directory or an earlier "
                          "report's")
    entries = list(fs.scandir(out_dir))
    if not entries:
        return
    try:
        document = codec.decode_object(fs.read_document(posixpath.join(out_dir, REPORT_FILE)), REPORT_FILE)
    except (OSError, codec.DocumentError):
        document = {}
    if document.get("format") != FORMAT:
        raise ReportError(f"--out {out_dir}: is a directory that holds no earlier report (no {REPORT_FILE}); a report "
                          "replaces its directory whole, so name a new or empty directory")


def publish(
    fs: Filesystem, out_dir: str, files: Mapping[str, bytes], *, token: str, durable: bool
) -> str:
    """Write ``files`` into a new directory beside ``out_dir`` and rename it into place; returns ``out_dir``.

    The earlier report, if any, is renamed aside first and removed after, so the
    directory a reader opens always holds one complete report (between the two
    renames there is, for an instant, none).
    """
    check_target(fs, out_dir)
    parent, name = posixpath.split(out_dir.rstrip("/"))
    fresh = posixpath.join(parent, f".{name}.new-{token}")
    old = posixpath.join(parent, f".{name}.old-{token}")
    fs.makedirs(fresh, durable=durable)
    try:
        for relative, data in files.items():
            fs.write_atomic(posixpath.join(fresh, relative), data, durable=durable)
        replaced = fs.lstat(out_dir) is not None
        if replaced:
            fs.rename(out_dir, old, durable=durable)
    except BaseException:
        fs.rmtree(fresh)
        raise
    try:
        fs.rename(fresh, out_dir, durable=durable)
    except BaseException:
        if replaced:  # put the earlier report back: a failed publication changes nothing
            fs.rename(old, out_dir, durable=durable)
        fs.rmtree(fresh)
        raise
    if replaced:
        fs.rmtree(old)
    return out_dir
