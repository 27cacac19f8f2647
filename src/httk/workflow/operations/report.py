"""``workspace report``: the campaign dashboard's data, and publishing it as one directory.

:func:`build_report` reads what the other inspection commands read — every
marker (counts per kind and per top-level placement subtree), a bounded sample of
job.json files (counts per realization: native, language, httk-v1), the journal
(:mod:`.history`: throughput and time in each state), failed jobs' frames with
``job why``'s line for a few examples, flapping jobs, and the managers'
manifests and heartbeats — into one JSON document (``httk-workflow-report`` v1).
The document holds everything the page draws, so a report built on a remote
comes back as this one document and is drawn here. :func:`publish` writes the
page's files into a new directory beside the target and exchanges it with the
previous report in one step, so a reader (and a crash) finds either the previous
report or this one, never none and never a half-written one. Read-only towards the workspace. Spec: docs/report.md.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from .. import codec
from ..domain.lifecycle import StateKind
from ..languages.realization import realization_of
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
#: Jobs whose job.json is read for the counts by realization at most; beyond it the counts are of a sample.
REALIZATION_SAMPLE = 1000
_BATCH_OUTPUT = re.compile(r"^slurm-([0-9]+(?:_[0-9]+)?)\.out$")
#: Kinds a job can flap in (the ones ``job why`` folds the attempt history for).
_FLAP_KINDS = {StateKind.READY, StateKind.CLAIMED, StateKind.RUNNING, StateKind.FAILED}


class ReportError(ValueError):
    """A report that cannot be published where it was asked to be; the message names the fix."""


def _subtree(placement: str) -> str:
    return placement.split("/", 1)[0] if placement else "."


def build_report(handle: WorkspaceHandle, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The report document of ``handle``'s workspace now; ``progress(n)`` hears of each journal segment read."""
    now = handle.ports.clock.now()
    markers = handle.store.current_markers()
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
        "realizations": _realizations(handle, markers),
        "history": past.describe(),
        "throughput": history.throughput(past.frames, until=now),
        "time_in_state": history.time_in_state(past),
        "failures": _failures(handle, markers),
        "flapping": _flapping(handle, markers, past),
        "managers": [_manager(manager) for manager in managers],
        "batch": {"remote": None, "batch_system": None, "note": None,
                  "jobs": [{"job_id": job_id, "state": None, "finished": None} for job_id in batch_job_ids(handle)]},
    }


def _realizations(handle: WorkspaceHandle, markers: Mapping[str, Marker]) -> dict[str, Any]:
    """Jobs per realization (native, language, httk-v1) and state, from the job.json of at most
    :data:`REALIZATION_SAMPLE` jobs.

    The markers say no realization, so each counted job's definition is read. The sample is
    the jobs with the lowest job ids: the ids are random, so a sample of a larger workspace
    is an unbiased one, and the same from one report to the next. An unreadable job.json is
    counted as ``unreadable``.
    """
    sample = [markers[job_id] for job_id in sorted(markers)[:REALIZATION_SAMPLE]]
    rows: dict[tuple[str, str | None], Counter[str]] = defaultdict(Counter)
    for marker in sample:
        try:
            spec = handle.store.read_spec(marker)
        except JobDamage:
            rows[("unreadable", None)][marker.kind.value] += 1
            continue
        realization = realization_of(spec.runner_source, spec.runner_path)
        rows[(realization.kind, realization.language)][marker.kind.value] += 1
    return {
        "jobs_read": len(sample),
        "complete": len(sample) == len(markers),
        "rows": [{"realization": kind, "language": language, "total": sum(kinds.values()),
                  "counts": dict(sorted(kinds.items()))}
                 for (kind, language), kinds in sorted(rows.items(), key=lambda item: (item[0][0], item[0][1] or ""))],
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


#: A staging sibling untouched this long is a crashed publisher's; a younger one may be a live publisher's.
STALE_SECONDS = 600.0
#: How often :func:`publish` retries when another publisher moves the output directory under it.
_PLACE_ATTEMPTS = 5


def publish(
    fs: Filesystem, out_dir: str, files: Mapping[str, bytes], *, token: str, durable: bool
) -> str:
    """Write ``files`` into a new directory beside ``out_dir`` and swap it into place; returns ``out_dir``.

    The new directory is written and synced, then exchanged with the earlier report
    in one atomic step (a no-replace rename when there is none), the parent synced,
    and the earlier report, now under the staging name, removed. So ``out_dir`` is
    always one whole report, the old or the new one, even across a crash; staging
    siblings a crashed publisher left (``.NAME.new-*``, ``.NAME.old-*``) are removed
    by the next publication once :data:`STALE_SECONDS` old.
    """
    check_target(fs, out_dir)
    parent, name = posixpath.split(out_dir.rstrip("/"))
    out_dir = posixpath.join(parent, name)
    fresh = posixpath.join(parent, f".{name}.new-{token}")
    fs.makedirs(fresh, durable=durable)
    try:
        sweep_leftovers(fs, out_dir, keep=fresh)
        for relative, data in files.items():
            fs.write_atomic(posixpath.join(fresh, relative), data, durable=durable)
        if durable:
            fs.sync_tree(fresh)
        _put_in_place(fs, fresh, out_dir, durable=durable)
    except BaseException:
        fs.rmtree(fresh)
        raise
    fs.rmtree(fresh)  # the earlier report, if there was one, is under this name now
    return out_dir


def _put_in_place(fs: Filesystem, fresh: str, out_dir: str, *, durable: bool) -> None:
    """Move ``fresh`` to ``out_dir``: exchange with what is there, else a no-replace rename."""
    for _ in range(_PLACE_ATTEMPTS):
        if fs.lstat(out_dir) is None:
            try:
                fs.rename(fresh, out_dir, durable=durable)
                return
            except FileExistsError:
                continue  # another publisher placed its report first: exchange with that one
        try:
            fs.exchange(fresh, out_dir, durable=durable)
            return
        except FileNotFoundError:
            if fs.lstat(fresh) is None:
                raise
    raise ReportError(f"--out {out_dir}: kept changing while this report was put in place; publish again")


def sweep_leftovers(fs: Filesystem, out_dir: str, *, keep: str) -> list[str]:
    """Remove ``out_dir``'s staging siblings older than :data:`STALE_SECONDS` (by ``keep``'s mtime); returns them."""
    parent, name = posixpath.split(out_dir)
    own = fs.lstat(keep)
    if own is None:
        return []
    prefixes = (f".{name}.new-", f".{name}.old-")
    removed = []
    for entry in list(fs.scandir(parent)):
        if not entry.name.startswith(prefixes) or entry.path == keep:
            continue
        info = fs.lstat(entry.path)
        if info is not None and own.mtime - info.mtime >= STALE_SECONDS:
            fs.rmtree(entry.path)
            removed.append(entry.path)
    return removed
