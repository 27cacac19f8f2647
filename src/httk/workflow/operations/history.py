"""The campaign as the journal remembers it: point-in-time counts, what changed since, and its horizon.

Every transition of every job is a state frame in some writer's journal, so one
pass over every segment yields each job's chain of frames (kind, event, time,
failure). A job exists as ``submitted`` from its id reservation (published before
its payload and never collected) until its first frame. ``workspace gc`` removes
whole aged segments, so history can have been collected: a job whose oldest kept
frame still names a previous one, a chain with a hole, or a writer whose kept
segments do not start at its first one says so. Everything after the
*horizon* — the newest instant such a loss is known to precede — is complete
for the jobs in this workspace; a question about an earlier instant is refused
(:class:`HistoryCollected`) rather than answered wrongly. Only that moves the
horizon: a job that arrived by ``transfer`` starts its stay here at its
``transfer_import`` frame, and the copies of its history elsewhere (frames whose
notes say ``imported``) are not this workspace's, so they are neither counted nor
a hole; such a job is reported as arrived at that instant. Read-only.
Spec: 000 "Freeing disk on a quota'd filesystem"; docs/workflow_filesystem_api.md "Journal".
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..domain.lifecycle import LEAVING_EVENTS, Event, StateKind
from ..store.job_ids import iter_reservations
from ..store.journal import RecordRef
from ..store.markers import INIT_REF
from ..store.workspaces import WorkspaceHandle

_SEGMENT = re.compile(r"^([0-9]+)\.journal$")
_LEAVING = frozenset(event.value for event in LEAVING_EVENTS)
#: How many example jobs a transition or a failure code of ``diff`` lists.
EXAMPLES = 5


class HistoryCollected(ValueError):
    """A question about an instant before the history ``workspace gc`` kept; ``horizon`` is where it starts."""

    def __init__(self, option: str, horizon: float) -> None:
        super().__init__(
            f"{option}: the journal before {horizon:.0f} (epoch seconds) was collected by 'workspace gc' "
            "(policy retention.journal_days); give an instant at or after it")
        self.option = option
        self.horizon = horizon


@attrs.frozen
class Frame:
    """One transition of one job, as its state frame records it."""

    job_id: str
    job_key: str
    placement: str
    generation: int
    kind: str
    event: str
    created_at: float
    ref: str
    previous: str | None
    failure_code: str | None
    failure_message: str | None
    total_attempts: int
    #: A copy of a frame written in another workspace, appended here by a transfer's import.
    imported: bool = False

    @property
    def arrival(self) -> bool:
        """The job arrived here by transfer: its stay in this workspace starts at this frame."""
        return self.event == Event.TRANSFER_IMPORT.value


@attrs.frozen
class History:
    """Every job's kept frames (oldest first), its submission time, and how far back that is complete."""

    jobs: dict[str, list[Frame]]
    submitted_at: dict[str, float]
    #: History before this instant was collected (``None``: nothing is known to be missing).
    horizon: float | None
    truncated_jobs: int
    damaged_segments: int

    @property
    def frames(self) -> list[Frame]:
        """Every kept frame of every job, oldest first."""
        return sorted((frame for chain in self.jobs.values() for frame in chain), key=lambda f: f.created_at)

    def describe(self) -> dict[str, Any]:
        """The ``history`` member of a report: extent, and whether (and from when) any was collected."""
        times = [chain[0].created_at for chain in self.jobs.values() if chain]
        ends = [chain[-1].created_at for chain in self.jobs.values() if chain]
        arrivals = sorted(frame.created_at for frame in self.frames if frame.arrival)
        return {
            "frames": sum(len(chain) for chain in self.jobs.values()),
            "jobs": len(set(self.jobs) | set(self.submitted_at)),
            "earliest": min(times) if times else None,
            "latest": max(ends) if ends else None,
            "collected": self.horizon is not None,
            "complete_since": self.horizon,
            "truncated_jobs": self.truncated_jobs,
            "damaged_segments": self.damaged_segments,
            # Arrivals by transfer: before each, that job's history is in the workspace it came from.
            "arrived_by_transfer": {"arrivals": len(arrivals), "first": arrivals[0] if arrivals else None,
                                    "last": arrivals[-1] if arrivals else None},
        }

    def arrivals_after(self, instant: float) -> list[Frame]:
        """The ``transfer_import`` frames after ``instant``, oldest first."""
        return [frame for frame in self.frames if frame.arrival and frame.created_at > instant]

    def check(self, instant: float, option: str) -> None:
        """Refuse ``instant`` when history before the horizon was collected (``option`` names the flag)."""
        if self.horizon is not None and instant < self.horizon:
            raise HistoryCollected(option, self.horizon)


def _frame(ref: str, document: dict[str, Any]) -> Frame | None:
    job_id, generation, created = document.get("job_id"), document.get("generation"), document.get("created_at")
    if not isinstance(job_id, str) or not isinstance(generation, int) or not isinstance(created, int | float):
        return None
    failure = document.get("failure") if isinstance(document.get("failure"), dict) else {}
    previous = document.get("previous_record_ref")
    notes = document.get("notes") if isinstance(document.get("notes"), dict) else {}
    return Frame(
        job_id=job_id, job_key=str(document.get("job_key") or job_id), placement=str(document.get("placement") or ""),
        generation=generation, kind=str(document.get("kind")), event=str(document.get("event")),
        created_at=float(created), ref=ref, previous=previous if isinstance(previous, str) else None,
        failure_code=failure.get("code"), failure_message=failure.get("message"),
        total_attempts=int(document.get("total_attempts") or 0), imported="imported" in notes,
    )


def read_history(handle: WorkspaceHandle, progress: Callable[[int], None] | None = None) -> History:
    """One pass over every journal segment and id reservation; ``progress(n)`` is told of each segment read."""
    fs, layout, reader = handle.fs, handle.layout, handle.store.reader
    jobs: dict[str, list[Frame]] = defaultdict(list)
    horizon: float | None = None
    damaged = 0
    for writer in sorted(fs.scandir(layout.journal), key=lambda entry: entry.name):
        numbered = sorted((int(m.group(1)), entry.path) for entry in fs.scandir(writer.path)
                          if (m := _SEGMENT.match(entry.name)))
        expected = 1
        for number, path in numbered:
            first: float | None = None
            for ref, document in reader.iter_segment(path):
                if not isinstance(ref, RecordRef) or not isinstance(document, dict):
                    damaged += 1
                    continue
                if document.get("workspace_id") != handle.workspace_id:
                    continue
                frame = _frame(str(ref), document)
                # A copy of history elsewhere is not this workspace's (and carries an older created_at).
                if frame is not None and not frame.imported:
                    jobs[frame.job_id].append(frame)
                    first = frame.created_at if first is None else first
            if number != expected and first is not None:
                # Segments before this one were collected: all of their frames came earlier.
                horizon = first if horizon is None else max(horizon, first)
            expected = number + 1
            if progress is not None:
                progress(1)
    truncated = 0
    for chain in jobs.values():
        chain.sort(key=lambda frame: (frame.generation, frame.created_at))
        known = INIT_REF
        for frame in chain:
            # An arrival chains to the copies of the job's history elsewhere: a start here, never a hole.
            if not frame.arrival and frame.previous not in (None, INIT_REF, known):
                truncated += 1
                horizon = frame.created_at if horizon is None else max(horizon, frame.created_at)
                break
            known = frame.ref
    # Reservations only: a temp a crashed creation left in a bucket is no job (fsck removes it).
    submitted = dict(iter_reservations(fs, layout))
    return History(dict(jobs), submitted, horizon, truncated, damaged)


def _kind_at(history: History, job_id: str, instant: float) -> str | None:
    """The kind ``job_id`` was in at ``instant`` (``None``: not in this workspace then)."""
    kind = None
    if history.submitted_at.get(job_id, float("inf")) <= instant:
        kind = StateKind.SUBMITTED.value
    for frame in history.jobs.get(job_id, ()):
        if frame.created_at > instant:
            break
        kind = None if frame.event in _LEAVING else frame.kind
    return kind


def status_at(history: History, instant: float) -> dict[str, Any]:
    """Jobs per state kind at ``instant``, from the journal; raises :class:`HistoryCollected` before the horizon."""
    history.check(instant, "--at")
    counts = {kind.value: 0 for kind in StateKind}
    for job_id in set(history.jobs) | set(history.submitted_at):
        kind = _kind_at(history, job_id, instant)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    later = history.arrivals_after(instant)
    arrived = {"jobs": len({frame.job_id for frame in later}), "first": later[0].created_at if later else None,
               "examples": sorted({frame.job_key for frame in later})[:EXAMPLES]}
    return {"at": instant, "counts": counts, "total": sum(counts.values()), "arrived_later": arrived,
            "history": history.describe()}


def diff_since(history: History, instant: float) -> dict[str, Any]:
    """What changed after ``instant``: jobs per transition, new jobs, and new failures by code."""
    history.check(instant, "--since")
    transitions: dict[tuple[str, str], list[str]] = defaultdict(list)
    failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job_id, chain in history.jobs.items():
        before = _kind_at(history, job_id, instant)
        moved = [frame for frame in chain if frame.created_at > instant]
        if not moved:
            continue
        after = None if moved[-1].event in _LEAVING else moved[-1].kind
        arrived = before is None and any(frame.arrival for frame in moved)
        transitions[(before or ("arrived" if arrived else "new"), after or "left")].append(moved[-1].job_key)
        for frame in moved:
            if frame.kind == StateKind.FAILED.value:
                failures[frame.failure_code or "unrecorded"].append(
                    {"job": frame.job_key, "at": frame.created_at, "message": frame.failure_message})
    submitted = sorted(job for job, at in history.submitted_at.items() if at > instant)
    rows = [{"from": source, "to": target, "jobs": len(keys), "examples": sorted(keys)[:EXAMPLES]}
            for (source, target), keys in sorted(transitions.items(), key=lambda item: (-len(item[1]), item[0]))]
    new_failures = [{"code": code, "jobs": len(items), "examples": items[:EXAMPLES]}
                    for code, items in sorted(failures.items(), key=lambda item: (-len(item[1]), item[0]))]
    return {
        "since": instant,
        "transitions": rows,
        "frames": sum(1 for frame in history.frames if frame.created_at > instant),
        "new_jobs": len(submitted),
        "new_failures": new_failures,
        "history": history.describe(),
    }


# -- what a report plots ---------------------------------------------------------------------------
#: The interval widths a throughput chart picks from (seconds): about 40 bars over the campaign.
INTERVALS = (10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400)


def throughput(frames: Iterable[Frame], *, until: float, bars: int = 40) -> dict[str, Any]:
    """Transitions per interval, split by the kind each entered: ``{interval, start, bins: [...]}``."""
    chosen = list(frames)
    if not chosen:
        return {"interval_seconds": INTERVALS[0], "start": until, "bins": []}
    start = min(frame.created_at for frame in chosen)
    span = max(until - start, 1.0)
    interval = next((width for width in INTERVALS if span / width <= bars), INTERVALS[-1])
    start = start - start % interval
    count = int((until - start) // interval) + 1
    bins: list[Counter[str]] = [Counter() for _ in range(count)]
    for frame in chosen:
        bins[min(int((frame.created_at - start) // interval), count - 1)][frame.kind] += 1
    return {
        "interval_seconds": interval,
        "start": start,
        "bins": [{"start": start + index * interval, "transitions": sum(counter.values()), "by_kind": dict(counter)}
                 for index, counter in enumerate(bins)],
    }


def time_in_state(history: History) -> dict[str, Any]:
    """Seconds jobs spent in each kind they left (``submitted`` from the reservation): statistics and a histogram.

    The histogram's bucket edges are shared by every kind and step 1-2-5 per decade
    (the first bucket is under one second), so a chart can put them on a log axis.
    """
    spans: dict[str, list[float]] = defaultdict(list)
    for job_id, chain in history.jobs.items():
        submitted = history.submitted_at.get(job_id)
        if chain and submitted is not None and chain[0].previous in (None, INIT_REF):
            spans[StateKind.SUBMITTED.value].append(max(0.0, chain[0].created_at - submitted))
        for earlier, later in zip(chain, chain[1:], strict=False):
            if earlier.event not in _LEAVING:  # after leaving, the job was in another workspace until it came back
                spans[earlier.kind].append(max(0.0, later.created_at - earlier.created_at))
    longest = max((max(values) for values in spans.values()), default=0.0)
    edges = [0.0, 1.0]
    while edges[-1] <= longest:
        edges.append(edges[-1] * (2.5 if str(int(edges[-1]))[0] == "2" else 2.0))
    kinds = {}
    for kind, values in sorted(spans.items()):
        values.sort()
        counts = [0] * (len(edges) - 1)
        for value in values:
            counts[max(0, min(len(counts) - 1, bisect.bisect_right(edges, value) - 1))] += 1
        kinds[kind] = {"count": len(values), **_stats(values), "histogram": counts}
    return {"edges_seconds": edges, "kinds": kinds}


def _stats(values: list[float]) -> dict[str, float]:
    def quantile(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {"min": values[0], "median": quantile(0.5), "p90": quantile(0.9), "max": values[-1]}
