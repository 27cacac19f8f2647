"""``job debug``: drive one job to a stop in the foreground with a private manager.

Every transition is made by an ordinary :class:`Manager` whose passes are
restricted to the debugged job (and, with ``follow_children``, the children it
waits on), so the job runs through exactly the production code paths. The
attempt's ``stdout.log`` and ``stderr.log`` are streamed as they grow, prefixed
with the step; ``[debug]`` marks each transition observed. Spec: 000 "The
foreground debug runner".
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..domain.lifecycle import Event, StateKind
from ..engine.manager import Manager
from ..store.markers import Marker
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle

EXIT_SUCCEEDED = 0
EXIT_FAILED = 3
EXIT_STOPPED = 4
CHUNK = 1 << 16


class DebugError(ValueError):
    """A debug session refused before it started."""


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
        self._stream()
        manager = self.manager
        assert self.target is not None and manager.only_jobs is not None
        for job_id in sorted(manager.only_jobs):
            marker = self._current_by_id(job_id)
            if marker is None:
                continue
            seen = (marker.kind, marker.generation)
            if self.last.get(job_id) != seen:
                self.last[job_id] = seen
                label = "" if job_id == self.target.job_id else f" {marker.key}"
                self.out(f"[debug]{label} {marker.kind.value} (generation {marker.generation})")
                if marker.kind == StateKind.WAITING and self.follow_children:
                    self._follow(marker)
        target = self._current(self.target)
        if target is None:
            manager.stop_now = True
            return
        stop = {StateKind.SUCCEEDED, StateKind.FAILED, StateKind.CANCELLED, StateKind.PAUSED}
        if not self.follow_children:
            stop.add(StateKind.WAITING)
        if target.kind in stop and target.job_id not in manager.running:
            manager.stop_now = True

    def _follow(self, marker: Marker) -> None:
        try:
            frame = self.handle.store.read_frame(marker)
        except JobDamage:
            return
        if frame is None or frame.join is None:
            return
        for child in frame.join.children:
            assert self.manager.only_jobs is not None
            self.manager.only_jobs.add(child.job_id)
            self._placements[child.job_id] = (child.placement, child.job_key)

    # -- finding the job without scanning the workspace ---------------------------------------
    def _current(self, marker: Marker) -> Marker | None:
        return self._current_by_id(marker.job_id)

    def _current_by_id(self, job_id: str) -> Marker | None:
        located = self._placements.get(job_id)
        if located is None:
            return None
        placement, key = located
        found = self.handle.store.locate(placement, key)
        return found[0] if found else None

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
