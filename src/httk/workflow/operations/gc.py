"""``workspace gc``: explicit collection under ``policy.retention``; a limit left unset means keep.

Safe against a live workspace: no marker or payload is touched; attempt
control directories are collected only for terminal jobs; journal segments only
when no marker references them and their writer's manager is not heartbeating;
transfer ledgers (with the acknowledged bundle a source keeps) only once settled;
and pruning an empty placement directory that a transition is recreating is an
ordinary outcome, not an error. Spec: 000 "Freeing disk on a quota'd filesystem".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.lifecycle import TERMINAL_KINDS, StateKind
from ..store.journal import RecordRef
from ..store.markers import INIT_REF
from ..store.transfer_ledger import DESTINATION, Ledger, iter_ledgers
from ..store.workspaces import WorkspaceHandle
from .diagnosis import managers

DAY = 86400.0


class GarbageCollector:
    """One collection pass over one workspace."""

    def __init__(
        self, handle: WorkspaceHandle, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
    ) -> None:
        self.handle = handle
        #: Told of each marker walked and each journal segment judged (the CLI's progress line).
        self.progress = progress
        self.fs = handle.fs
        self.layout = handle.layout
        self.dry_run = dry_run
        self.now = handle.ports.clock.now()
        self.retention = dict(handle.policy.get("retention") or {})
        self.removed: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        referenced, terminal_jobs = self._walk_markers()
        if "attempt_control_days" in self.retention:
            self._attempts(terminal_jobs, float(self.retention["attempt_control_days"]) * DAY)
        if "trash_days" in self.retention:
            self._trash(float(self.retention["trash_days"]) * DAY)
        if "journal_days" in self.retention:
            self._journal(referenced, float(self.retention["journal_days"]) * DAY)
        if "transfer_days" in self.retention:
            self._transfers(float(self.retention["transfer_days"]) * DAY)
        self._empty_placements()
        return {
            "workspace": self.layout.root,
            "dry_run": self.dry_run,
            "retention": self.retention,
            "removed": self.removed,
            "count": len(self.removed),
        }

    def _remove(self, category: str, path: str) -> None:
        self.removed.append({"category": category, "path": path})
        if not self.dry_run:
            self.fs.rmtree(path)

    def _older(self, path: str, age: float) -> bool:
        info = self.fs.lstat(path)
        return info is not None and self.now - info.mtime >= age

    def _walk_markers(self) -> tuple[set[tuple[str, int]], set[str]]:
        referenced: set[tuple[str, int]] = set()
        terminal: set[str] = set()
        for kind in StateKind:
            for marker in self.handle.store.iter_markers(kind):
                if self.progress is not None:
                    self.progress(1)
                if kind in TERMINAL_KINDS:
                    terminal.add(marker.job_id)
                if marker.ref != INIT_REF:
                    try:
                        ref = RecordRef.parse(marker.ref)
                    except ValueError:
                        continue
                    referenced.add((ref.writer, ref.segment))
        return referenced, terminal

    def _attempts(self, terminal_jobs: set[str], age: float) -> None:
        for job in self.fs.scandir(self.layout.attempts):
            if job.name not in terminal_jobs:
                continue
            for attempt in self.fs.scandir(job.path):
                if self._older(attempt.path, age):
                    self._remove("attempt_control", attempt.path)

    def _trash(self, age: float) -> None:
        for job in self.fs.scandir(f"{self.layout.control}/data"):
            for item in self.fs.scandir(f"{job.path}/trash"):
                if self._older(item.path, age):
                    self._remove("trash", item.path)

    def _journal(self, referenced: set[tuple[str, int]], age: float) -> None:
        live_writers: set[str] = set()
        for manager in managers(self.handle):
            if manager["live"]:
                live_writers.update(manager.get("journal_writers") or [])
        for writer in self.fs.scandir(self.layout.journal):
            if writer.name in live_writers:
                continue
            segments = list(self.fs.scandir(writer.path))
            kept = 0
            for segment in segments:
                if self.progress is not None:
                    self.progress(1)
                try:
                    number = int(segment.name.split(".")[0])
                except ValueError:
                    continue
                if (writer.name, number) in referenced or not self._older(segment.path, age):
                    kept += 1
                    continue
                self._remove("journal", segment.path)
            if kept == 0 and segments and not self.dry_run:
                try:
                    self.fs.rmdir(writer.path)
                except OSError:
                    pass

    def _transfers(self, age: float) -> None:
        """Transfer ledgers whose fate is settled: finished ones, and destination copies never decided.

        A source ledger is kept until it is final (retired or rolled back): it is how an
        interrupted transfer is finished. A destination ledger goes once final, or when
        nothing was decided there (a bundle that arrived, or half did): an import needs
        its bundle, so a later attempt is refused and rolled back rather than misled.
        """
        for transfer_id, role in iter_ledgers(self.fs, self.layout):
            ledger = Ledger(self.fs, self.layout, transfer_id, role, durable=self.handle.durable,
                            clock=self.handle.ports.clock)
            state = ledger.state()
            settled = state["final"] or state["step"] is None
            if role == DESTINATION and ledger.read_slot(2) is None:
                settled = True
            if settled and self._ledger_older(ledger, age):
                self._remove("transfer", ledger.directory)

    def _ledger_older(self, ledger: Ledger, age: float) -> bool:
        """Whether the ledger's newest record (its header or a step) is older than ``age``."""
        paths = [ledger.header_file, *(entry.path for entry in self.fs.scandir(f"{ledger.directory}/steps"))]
        times = [info.mtime for info in map(self.fs.lstat, paths) if info is not None]
        return bool(times) and self.now - max(times) >= age

    def _empty_placements(self) -> None:
        """Remove empty placement mirrors below the state kinds (a concurrent re-creation is fine)."""
        for kind in StateKind:
            self._prune(self.layout.kind_dir(kind), top=True)

    def _prune(self, directory: str, *, top: bool) -> bool:
        empty = True
        for entry in self.fs.scandir(directory):
            if entry.is_dir and self._prune(entry.path, top=False):
                continue
            empty = False
        if empty and not top:
            if self.dry_run:
                return True
            try:
                self.fs.rmdir(directory)
            except OSError:
                return False  # something was renamed in underneath: an ordinary outcome
            return True
        return False
