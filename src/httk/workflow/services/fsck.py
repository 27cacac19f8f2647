"""``workspace fsck``: every marker must resolve to its journal frame; repair what does not.

Reading waits out the visibility deadline (inside the journal reader), so a
slow network filesystem is never mistaken for damage. Repair re-points a
damaged marker at the newest readable frame of its job that is *older* than the
marker's generation, by appending one ``fsck_repair`` frame chained to it and
renaming the marker onto it at the next generation: history is added, never
rewritten. A marker owned by a manager that still heartbeats is never touched.
Spec: 000 "Checking and repairing a workspace".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import attrs

from .. import codec
from ..domain.lifecycle import OWNED_KINDS, Event, StateKind
from .journal import RecordRef
from .markers import Marker
from .store import JobDamage
from .workspaces import WorkspaceHandle


@attrs.frozen
class Problem:
    code: str
    path: str
    job: str | None
    message: str
    action: str = "reported"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Fsck:
    """One check (and optional repair) of one workspace."""

    def __init__(self, handle: WorkspaceHandle, *, repair: bool = False, quarantine: bool = False) -> None:
        self.handle = handle
        self.store = handle.store
        self.fs = handle.fs
        self.repair = repair
        self.quarantine = quarantine
        self._index: dict[str, list[tuple[int, str, dict[str, Any]]]] | None = None

    def run(self) -> dict[str, Any]:
        problems: list[Problem] = []
        seen: dict[str, list[Marker]] = defaultdict(list)
        checked = 0

        def damaged_name(code: str, path: str, message: str) -> None:
            problems.append(Problem(code, path, None, message))

        for kind in StateKind:
            for marker in self.store.iter_markers(kind, on_damage=damaged_name):
                checked += 1
                seen[marker.job_id].append(marker)
                try:
                    self.store.read_frame(marker)
                except JobDamage as damage:
                    problems.append(self._handle_damage(marker, damage))
        for job_id, markers in sorted(seen.items()):
            if len(markers) > 1:
                paths = ", ".join(self.store.marker_path(marker) for marker in markers)
                problems.append(Problem("duplicate_marker", paths, job_id, "one job has more than one marker"))
        left = [problem for problem in problems if problem.action not in ("repaired", "quarantined")]
        return {
            "workspace": self.handle.root,
            "markers_checked": checked,
            "problems": [problem.to_json() for problem in problems],
            "clean": not problems,
            "left_for_operator": len(left),
        }

    # -- repair ------------------------------------------------------------------------------
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
            try:
                beat = codec.decode_object(self.fs.read_bytes(f"{entry.path}/heartbeat.json"), "heartbeat.json")
            except (FileNotFoundError, codec.DocumentError):
                continue
            if beat.get("stopped"):
                continue
            lease = float(beat.get("lease_seconds") or self.handle.policy["lease_seconds"])
            if now - float(beat.get("time", 0)) <= lease:
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
