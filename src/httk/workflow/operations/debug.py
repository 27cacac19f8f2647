"""``job debug``: drive one job to a stop in the foreground with a private manager.

Every transition is made by an ordinary :class:`Manager` whose passes are
restricted to the debugged job (and, with ``follow_children``, the path to the
deepest unfinished child it waits on: depth first, in spawn order), so the job
runs through exactly the production code paths. A job another live manager
holds is refused before anything is written. The
attempt's ``stdout.log`` and ``stderr.log`` are streamed as they grow, prefixed
with the step; ``[debug]`` marks each transition observed. Spec: 000 "The
foreground debug runner".
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..domain.joins import JoinVerdict, classify
from ..domain.lifecycle import TERMINAL_KINDS, Event, StateKind
from ..engine.manager import Manager
from ..ports import ProcessControl, ProcessIdentity
from ..store.markers import Marker
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle
from .diagnosis import managers

EXIT_SUCCEEDED = 0
EXIT_FAILED = 3
EXIT_STOPPED = 4
CHUNK = 1 << 16
#: A followed child the depth-first walk has finished with.
_WALKED = TERMINAL_KINDS | {StateKind.PAUSED}


class DebugError(ValueError):
    """A debug session refused before it started."""


def check_holder(handle: WorkspaceHandle, marker: Marker, process: ProcessControl | None = None) -> str | None:
    """Refuse to debug a job another live manager holds; a note when its holder is a dead manager.

    A claimed, running, committing or cancelling job names its owner. While that
    manager heartbeats within its lease the next transition is its own, so a
    private manager may neither drive nor take over the job: refused here,
    before anything is written. An owner whose heartbeat is stale is not held:
    the private manager recovers the job by the ordinary takeover rules. One
    whose heartbeat is fresh but whose process this host's kernel says is gone
    is not held either, but the takeover rules wait for its lease to run out;
    the returned note says so, since the private manager waits quietly.
    """
    try:
        frame = handle.store.read_job(marker).frame
    except JobDamage:
        return None  # the private manager reports damage the way any manager does
    owner = frame.owner_id
    if owner is None:
        return None
    holder = next((entry for entry in managers(handle) if entry.get("manager_id") == owner), None)
    if holder is None or not holder["live"]:
        return None
    host, pid = holder.get("host"), holder.get("pid")
    named = f"manager {owner} (host {host}, pid {pid})"
    if process is not None and isinstance(host, str) and isinstance(pid, int):
        if process.is_alive(ProcessIdentity(host=host, pid=pid, start_ticks=None, pgid=pid)) is False:
            lease = holder.get("lease_seconds") or float(handle.policy["lease_seconds"])
            left = max(0.0, float(lease) - float(holder["heartbeat_age"] or 0.0))
            return (f"job {marker.key} is {marker.kind.value} under {named}, whose process is gone: its lease "
                    f"runs out in {left:.0f} s, and the takeover rules decide what happens then")
    raise DebugError(
        f"job {marker.key} is {marker.kind.value} under live {named}: a private manager cannot drive it; wait "
        f"for that manager to finish it, or cancel it with 'httk workflow job request {handle.reference} "
        f"{marker.key} cancel --operator WHO --reason WHY'"
    )


@attrs.define
class _Tail:
    step: str
    offsets: dict[str, int] = attrs.field(factory=lambda: {"stdout.log": 0, "stderr.log": 0})
    partial: dict[str, bytes] = attrs.field(factory=lambda: {"stdout.log": b"", "stderr.log": b""})


class Debugger:
    """Streams one job's attempts while a private manager drives it."""

    def __init__(
        self,
        handle: WorkspaceHandle,
        manager: Manager,
        *,
        follow_children: bool = False,
        out: Callable[[str], None] = print,
        err: Callable[[str], None] = print,
    ) -> None:
        self.handle = handle
        self.manager = manager
        self.follow_children = follow_children
        self.out = out
        self.err = err
        self.tails: dict[str, _Tail] = {}
        self.last: dict[str, tuple[StateKind, int]] = {}
        self.target: Marker | None = None
        #: Where each followed job lives (placement, key): found without scanning the workspace.
        self._placements: dict[str, tuple[str, str]] = {}
        #: Each followed waiting job's children in spawn order, by the generation they were read at.
        self._joins: dict[str, tuple[int, list[str]]] = {}
        #: The markers found during one :meth:`_iteration` (the manager does not act inside it), so
        #: the target and each child are located once an iteration, not once per question asked.
        self._found: dict[str, Marker | None] | None = None

    def override_step(self, marker: Marker, step: str) -> Marker:
        """Register a fresh job at ``step`` instead of its initial step; refused once it has history."""
        if marker.generation != 0 or marker.kind != StateKind.SUBMITTED:
            raise DebugError(
                f"job {marker.key} already has a history (generation {marker.generation}); overriding its step "
                "is what a recorded 'job request ... override_step' is for"
            )
        view = self.handle.store.read_job(marker)
        new_marker, _frame = self.handle.store.transition(
            marker, view.frame, Event.REGISTER, step=step, activation_id=self.handle.ports.ids.new_id(),
            activation_ordinal=1,
        )
        return new_marker

    def run(self, marker: Marker) -> int:
        """Drive ``marker``'s job; returns 0 succeeded, 3 failed, 4 stopped without finishing."""
        self.target = marker
        self._placements[marker.job_id] = (marker.placement, str(marker.key))
        manager = self.manager
        manager.only_jobs = {marker.job_id}
        manager.out = lambda line: None
        manager.on_iteration = self._iteration
        self._iteration()
        manager.run()
        self._stream()
        for tail in self.tails.values():
            for name, rest in tail.partial.items():
                if rest:
                    emit = self.out if name == "stdout.log" else self.err
                    emit(f"[{tail.step}] {rest.decode('utf-8', 'replace')}")
        final = self._current(marker)
        if final is None:
            return EXIT_STOPPED
        if final.kind == StateKind.SUCCEEDED:
            return EXIT_SUCCEEDED
        if final.kind == StateKind.FAILED:
            return EXIT_FAILED
        return EXIT_STOPPED

    # -- one loop iteration of the private manager -------------------------------------------
    def _iteration(self) -> None:
        self._found = {}
        try:
            self._observe()
        finally:
            self._found = None

    def _observe(self) -> None:
        self._stream()
        manager = self.manager
        assert self.target is not None
        for job_id in list(self._placements):  # discovery order: the target, then children as spawned
            marker = self._current_by_id(job_id)
            if marker is None:
                continue
            seen = (marker.kind, marker.generation)
            if self.last.get(job_id) != seen:
                self.last[job_id] = seen
                label = "" if job_id == self.target.job_id else f" {marker.key}"
                self.out(f"[debug]{label} {marker.kind.value} (generation {marker.generation})")
        # Only the path to the deepest unfinished child may progress: a sibling waits for the whole
        # subtree before it (depth first, in spawn order). An attempt already running stays watched.
        frontier = self._frontier(self.target.job_id)
        manager.only_jobs = {*frontier, *manager.running}
        target = self._current(self.target)
        if target is None:
            manager.stop_now = True
            return
        if self.follow_children and not manager.running:
            stalled = self._stalled_on_paused(frontier[-1])
            if stalled is not None:
                self.out(stalled)
                manager.stop_now = True
                return
        stop = {StateKind.SUCCEEDED, StateKind.FAILED, StateKind.CANCELLED, StateKind.PAUSED}
        if not self.follow_children:
            stop.add(StateKind.WAITING)
        if target.kind in stop and target.job_id not in manager.running:
            manager.stop_now = True

    def _frontier(self, job_id: str) -> list[str]:
        """``job_id`` and, while it waits, the frontier of its first child not yet done (with follow_children)."""
        path = [job_id]
        marker = self._current_by_id(job_id)
        while self.follow_children and marker is not None and marker.kind == StateKind.WAITING:
            child = next((child for child in self._children(marker) if not self._done(child)), None)
            if child is None:
                break  # every child is done: the waiting pass resumes the parent
            path.append(child)
            marker = self._current_by_id(child)
        return path

    def _stalled_on_paused(self, job_id: str) -> str | None:
        """The ``[debug]`` note when ``job_id`` waits on paused children alone and its join stays pending.

        The walk passes a paused child over, and nothing here continues it; once every other
        child is terminal and the join (:func:`~..domain.joins.classify`) is still pending, no
        followed job can progress. An unresolvable child is left to the join's grace clock.
        """
        marker = self._current_by_id(job_id)
        if marker is None or marker.kind != StateKind.WAITING:
            return None
        children = self._children(marker)
        found = [self._current_by_id(child) for child in children]
        if not found or any(child is None or child.kind not in _WALKED for child in found):
            return None
        paused = [child for child in found if child is not None and child.kind == StateKind.PAUSED]
        if not paused:
            return None
        try:
            join = self.handle.store.read_frame(marker).join
            kinds = [child.kind for child in found if child is not None]
            verdict = None if join is None else classify(join.when, kinds, join.count)
        except (JobDamage, ValueError):
            return None  # the waiting pass reports a damaged frame or a bad join by name
        if verdict != JoinVerdict.PENDING:
            return None
        more = f" (and {len(paused) - 1} more paused)" if len(paused) > 1 else ""
        first = paused[0].key
        return (f"[debug] stopped: {marker.key} waits on paused child {first}{more} and nothing followed can run; "
                f"continue it with 'httk workflow job request {self.handle.reference} {first} continue "
                "--operator WHO', then debug again")

    def _done(self, job_id: str) -> bool:
        """Whether the walk is past this child: terminal, paused (nothing here resumes it) or not found."""
        marker = self._current_by_id(job_id)
        return marker is None or marker.kind in _WALKED

    def _children(self, marker: Marker) -> list[str]:
        """The ids of the children ``marker``'s join waits on, in spawn order (read once per generation)."""
        cached = self._joins.get(marker.job_id)
        if cached is not None and cached[0] == marker.generation:
            return cached[1]
        try:
            frame = self.handle.store.read_frame(marker)
        except JobDamage:
            frame = None
        children = () if frame is None or frame.join is None else frame.join.children
        for child in children:
            self._placements.setdefault(child.job_id, (child.placement, child.job_key))
        ids = [child.job_id for child in children]
        self._joins[marker.job_id] = (marker.generation, ids)
        return ids

    # -- finding the job without scanning the workspace ---------------------------------------
    def _current(self, marker: Marker) -> Marker | None:
        return self._current_by_id(marker.job_id)

    def _current_by_id(self, job_id: str) -> Marker | None:
        if self._found is not None and job_id in self._found:
            return self._found[job_id]
        located = self._placements.get(job_id)
        if located is None:
            return None
        placement, key = located
        found = self.handle.store.locate(placement, key)
        marker = found[0] if found else None
        if self._found is not None:
            self._found[job_id] = marker
        return marker

    # -- log streaming ----------------------------------------------------------------------
    def _stream(self) -> None:
        for running in list(self.manager.running.values()):
            control = running.plan.control
            if control not in self.tails:
                self.tails[control] = _Tail(step=running.view.frame.step)
        for control, tail in self.tails.items():
            for name in ("stdout.log", "stderr.log"):
                self._drain(control, tail, name)

    def _drain(self, control: str, tail: _Tail, name: str) -> None:
        path = f"{control}/{name}"
        while True:
            try:
                data = self.handle.fs.read_range(path, tail.offsets[name], CHUNK)
            except OSError:  # not there yet, or replaced by something that is not a regular file
                return
            if not data:
                return
            tail.offsets[name] += len(data)
            buffered = tail.partial[name] + data
            *lines, rest = buffered.split(b"\n")
            tail.partial[name] = rest
            emit = self.out if name == "stdout.log" else self.err
            for line in lines:
                emit(f"[{tail.step}] {line.decode('utf-8', 'replace')}")
            if len(data) < CHUNK:
                return
