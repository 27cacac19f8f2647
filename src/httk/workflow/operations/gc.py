"""``workspace gc``: explicit collection under ``policy.retention``; a limit left unset means keep.

Safe against a live workspace: no marker or payload is touched; attempt
control directories are collected only for terminal jobs; journal segments only
when no marker references them and their writer's manager is not heartbeating;
transfer ledgers (with the acknowledged bundle a source keeps) only once settled;
a manager's directory only once it is provably not live (:meth:`GarbageCollector._gone`);
what an interrupted command left in ``.httk-workflow/tmp/`` only once nothing at or below
it was written for ``scratch_days``; and pruning an empty placement directory that a
transition is recreating is an ordinary outcome, not an error. Empty placement mirrors are pruned on every run,
limits or none, and reported apart (``pruned``) from what a limit collected
(``removed``). Spec: 000 "Freeing disk on a quota'd filesystem".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..domain.lifecycle import TERMINAL_KINDS, StateKind
from ..engine.manifest import read_beat, read_manifest
from ..ports import Entry, ProcessControl, ProcessIdentity
from ..store.journal import RecordRef
from ..store.markers import INIT_REF
from ..store.transfer_ledger import DESTINATION, Ledger, iter_ledgers
from ..store.workspaces import WorkspaceHandle
from .diagnosis import managers

DAY = 86400.0
#: Scratch younger than this is never collected, whatever ``scratch_days`` says: a command may be writing it.
_SCRATCH_FLOOR = 3600.0
#: The prefix of the names gc renames scratch to before removing it (one a crash left is removed the next time).
_GC_CLAIM = ".gc-"


class GarbageCollector:
    """One collection pass over one workspace."""

    def __init__(
        self, handle: WorkspaceHandle, *, dry_run: bool = False, progress: Callable[[int], None] | None = None,
        process: ProcessControl | None = None,
    ) -> None:
        self.handle = handle
        #: Proves a manager recorded on this host gone; without it no manager that did not stop cleanly is judged gone.
        self.process = process
        #: Told of each marker walked and each journal segment judged (the CLI's progress line).
        self.progress = progress
        self.fs = handle.fs
        self.layout = handle.layout
        self.dry_run = dry_run
        self.now = handle.ports.clock.now()
        self.retention = dict(handle.policy.get("retention") or {})
        self.removed: list[dict[str, Any]] = []
        #: Empty placement mirrors pruned (or, dry, that would be): collected on every run, apart from ``removed``.
        self.pruned: list[dict[str, Any]] = []
        #: What was judged collectable but could not be removed, with the reason (never an error).
        self.left: list[dict[str, Any]] = []
        #: Each manager directory's last sign of life, as :meth:`_gone` found it.
        self._last_signs: dict[str, float] = {}

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
        if "manager_days" in self.retention:
            self._managers(float(self.retention["manager_days"]) * DAY)
        if "scratch_days" in self.retention:
            self._scratch(float(self.retention["scratch_days"]) * DAY)
        self._empty_placements()
        return {
            "workspace": self.layout.root,
            "dry_run": self.dry_run,
            "retention": self.retention,
            "removed": self.removed,
            "count": len(self.removed),
            "pruned": self.pruned,
            "pruned_count": len(self.pruned),
            "left": self.left,
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

    def _managers(self, age: float) -> None:
        """Directories of managers provably not live, silent for ``age``, and the empty request claims they left."""
        gone: set[str] = set()
        for entry in self.fs.scandir(self.layout.managers):
            if entry.is_dir and self._gone(entry, age) and self._remove_manager(entry, age):
                gone.add(entry.name)
        claims = f"{self.handle.layout.requests}/claimed"
        for holder in self.fs.scandir(claims):
            if not holder.is_dir or any(True for _ in self.fs.scandir(holder.path)):
                continue  # a claim still held is returned to ready by a live manager, never collected
            if holder.name in gone or (self.fs.lstat(f"{self.layout.managers}/{holder.name}") is None
                                       and self._older(holder.path, age)):
                self._remove_empty("manager", holder.path)

    def _remove_manager(self, entry: Entry, age: float) -> bool:
        """Remove a gone manager's directory; whether it went.

        A manager judged gone that resumes (a stopped process continued) writes its
        heartbeat while the tree is removed, and the last ``rmdir`` meets a new name
        (ENOTEMPTY). A file written since its last sign of life means it is live again:
        the directory is left. Otherwise the removal is tried once more. What stays is
        listed in ``left`` with the reason; gc never fails on it.
        """
        self.removed.append({"category": "manager", "path": entry.path})
        if self.dry_run:
            return True
        since = self._last_signs.get(entry.path, self.now)
        try:
            self.fs.rmtree(entry.path)
            return True
        except OSError as error:
            if self.fs.lstat(entry.path) is None:
                return True  # removed meanwhile (another gc): the goal holds
            if self._written_since(entry.path, since):
                reason = "its manager wrote to it while it was removed: it is live again"
            else:
                try:
                    self.fs.rmtree(entry.path)
                    return True
                except OSError as again:
                    reason = f"{again.strerror or again} (tried twice; first: {error.strerror or error})"
        self.removed.pop()
        self.left.append({"category": "manager", "path": entry.path, "reason": reason})
        return False

    def _scratch(self, age: float) -> None:
        """What a command cut short left in ``.httk-workflow/tmp/``, untouched for ``age`` (an hour at least).

        Every entry there (a submission's staged copy, a workdir being seeded, a conversion's
        or a workflow description's scratch) is renamed away or removed by the command that
        made it once it finishes; one where nothing changed for ``age`` is a dead command's.
        Its age is that of the newest change at or below it, by ``ctime`` too: a copy keeps
        its source's modification times, so a staged copy made a moment ago from old files
        looks old by ``mtime`` alone. It is first renamed to a name of gc's own, so that a
        command that renames it away meanwhile keeps it whole (one of the two renames
        fails), and only then removed. Nothing below ``tmp/`` is a job, a payload or a marker.
        """
        cutoff = self.now - max(age, _SCRATCH_FLOOR)
        for entry in self.fs.scandir(self.layout.tmp):
            if self._changed_since(entry.path, cutoff):
                continue  # a command may still be writing it (or another gc claimed it just now)
            if not self.dry_run:
                claimed = entry.path  # a claim a crashed gc left is removed as it is
                if not entry.name.startswith(_GC_CLAIM):
                    claimed = f"{self.layout.tmp}/{_GC_CLAIM}{self.handle.ports.ids.new_hex(12)}"
                    try:
                        self.fs.rename(entry.path, claimed, durable=False)
                    except FileNotFoundError:  # its command renamed it away (or removed it) first
                        continue
                self.fs.rmtree(claimed)
            self.removed.append({"category": "scratch", "path": entry.path})

    def _changed_since(self, path: str, since: float) -> bool:
        """Whether ``path`` or anything below it changed (``mtime`` or ``ctime``) after ``since``."""
        info = self.fs.lstat(path)
        if info is None:
            return False
        if max(info.mtime, info.changed) > since:
            return True
        return info.is_dir and any(self._changed_since(entry.path, since) for entry in self.fs.scandir(path))

    def _written_since(self, directory: str, since: float) -> bool:
        """Whether a file below ``directory`` was modified after ``since`` (directories' own times
        are left out: removing their entries is what changed them)."""
        for entry in self.fs.scandir(directory):
            if entry.is_dir:
                if self._written_since(entry.path, since):
                    return True
                continue
            info = self.fs.lstat(entry.path)
            if info is not None and info.mtime > since:
                return True
        return False

    def _gone(self, entry: Entry, age: float) -> bool:
        """Whether the manager of ``entry`` is provably not live and its last sign of life is ``age`` old.

        Its last sign of life is the newest of its heartbeat's time and the modification
        times of its directory, manifest and heartbeat. Beyond that silence (and the
        lease), a manager that stopped cleanly is gone; one on another host has only its
        heartbeat to go by; one recorded on this host is gone only when its pid is (a live
        pid keeps it, reused or not: the manifest records no process start time). A
        directory without a (readable) manifest names no process: its silence alone
        decides, heartbeat or not. A live manager that finds its manifest gone publishes
        it again with its next heartbeat, so only a silent one stays without.
        """
        beat = read_beat(self.fs, self.layout, entry.name)
        manifest = read_manifest(self.fs, self.layout, entry.name)
        paths = (entry.path, f"{entry.path}/heartbeat.json", f"{entry.path}/manager.json")
        times = [info.mtime for info in map(self.fs.lstat, paths) if info is not None]
        times += [beat.time] if beat is not None else []
        lease = ((beat.lease_seconds if beat is not None else None)
                 or (manifest.lease_seconds if manifest is not None else None)
                 or float(self.handle.policy["lease_seconds"]))
        if times:
            self._last_signs[entry.path] = max(times)
        silent = self.now - max(times) if times else 0.0
        if silent < age or silent <= lease:
            return False
        if beat is not None and beat.stopped:
            return True
        if manifest is None:
            return True
        if self.process is None:
            return False  # this host cannot be told from another: keep
        if manifest.host != self.process.hostname():
            return True
        identity = ProcessIdentity(host=manifest.host, pid=manifest.pid, start_ticks=None, pgid=manifest.pid)
        return self.process.is_alive(identity) is False

    def _remove_empty(self, category: str, path: str) -> None:
        """Remove an empty directory; one that was filled meanwhile stays, and is not reported."""
        if not self.dry_run:
            try:
                self.fs.rmdir(path)
            except OSError:
                return
        self.removed.append({"category": category, "path": path})

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
            if not self.dry_run:
                try:
                    self.fs.rmdir(directory)
                except OSError:
                    return False  # something was renamed in underneath: an ordinary outcome
            self.pruned.append({"category": "placement_mirror", "path": directory})
            return True
        return False
