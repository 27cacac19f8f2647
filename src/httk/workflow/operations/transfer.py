"""Transfer, source side: select quiescent jobs, detach them, bundle them, then retire or roll back.

A job leaves the scheduling trees through its own kind, ``transferring``
(``transfer_detach``, fenced by the marker rename like every transition), so no
manager can claim it while it travels. The source's ledger
(:mod:`.transfer_ledger`) records each step durably; every operation here is
idempotent, so a crashed transfer is finished by running the step again. The
source copy is retired only after the destination acknowledged its import, and
rolled back (``transfer_rollback``, to the kind the detach frame recorded) only
when the transfer was never sent or the destination decided against it: the
job is in exactly one workspace afterwards. Each method takes and returns
JSON-able values, because the same calls reach a remote workspace's own httk
(``httk workflow transfer-remote``). Spec: 000 "Running on a remote",
"Readiness and transfer environment advisories".
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from .. import codec
from ..domain.lifecycle import OWNED_KINDS, TERMINAL_KINDS, TRANSFERABLE_KINDS, Event, StateKind
from ..domain.model import ValidationError, check_placement
from ..domain.placement import nearest_placement
from ..domain.scheduling import placement_matches
from ..protocol import PRIVATE_DIR, JobSpec
from ..store import transfer_bundle as bundles
from ..store.markers import Marker
from ..store.runners import object_path
from ..store.store import JobDamage, LostRace
from ..store.transfer_ledger import ROLLED_BACK, SOURCE, Ledger, LedgerError, TransferSide, departed, iter_ledgers
from .inspection import SelectorError, job_log, resolve_job
from .workflows import declared_settings

#: What ``transfer SRC DST`` selects without --job or --kind: the jobs that will not run on their own.
STOPPED_KINDS = (StateKind.PAUSED, StateKind.SUCCEEDED, StateKind.FAILED, StateKind.CANCELLED)


class TransferError(ValueError):
    """A transfer step that is refused; the message is one line naming the thing and the fix."""


def transfer_note(notes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``transfer`` member a detach or import frame records in its notes."""
    note = (notes or {}).get("transfer")
    return note if isinstance(note, dict) else None


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class SourceSide(TransferSide):
    """The source workspace of a transfer."""

    role = SOURCE

    # -- reading -------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {"workspace_id": self.handle.workspace_id, "root": self.handle.root, "name": self.handle.name}

    def select(
        self, jobs: Sequence[str] = (), placement: str | None = None, kinds: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The jobs a transfer would move, checked but untouched.

        With ``jobs``, exactly those (a job that cannot travel is refused, naming it);
        otherwise every job of ``kinds`` (default: the stopped kinds) below ``placement``
        that can travel, the rest listed under ``skipped`` with the reason; ``unselected``
        counts by kind the quiescent jobs the default kinds left out, ``owned`` those a
        manager owns below ``placement`` (they cannot travel until they stop).
        """
        try:
            prefixes = (check_placement(placement),) if placement else ()
            chosen_kinds = tuple(StateKind(kind) for kind in kinds) or STOPPED_KINDS
        except (ValidationError, ValueError) as error:
            raise TransferError(str(error)) from None
        current = self.store.current_markers()
        # The retired transfers that took named jobs away already, with the keys of the jobs named.
        finished: dict[str, set[str]] = {}
        if jobs:
            wanted: dict[str, Marker] = {}
            for selector in jobs:
                try:
                    marker = resolve_job(self.handle, selector)
                except SelectorError as error:
                    # Repeating a command whose transfer finished as it was killed: that transfer moved the job.
                    moved = departed(self.fs, self.layout, self.handle.ports.clock, selector)
                    if moved is None:
                        raise TransferError(str(error)) from None
                    finished.setdefault(moved["transfer_id"], set()).add(moved["job_key"])
                    continue
                if prefixes and not placement_matches(marker.placement, prefixes):
                    raise TransferError(f"job {marker.key} is at placement {marker.placement}, not below {placement}; "
                                        "drop --placement or the job")
                if kinds and marker.kind not in chosen_kinds:
                    # Narrowing by kind, as by placement: a named job outside it is a contradiction, not a filter.
                    raise TransferError(f"job {marker.key} is {marker.kind.value}, not of --kind "
                                        f"{', '.join(kind.value for kind in chosen_kinds)}; drop --kind or the job")
                wanted[marker.job_id] = marker
        else:
            wanted = {
                job_id: marker for job_id, marker in current.items()
                if marker.kind in chosen_kinds and (not prefixes or placement_matches(marker.placement, prefixes))
            }
        selected, skipped = self._check(wanted, current, strict=bool(jobs))
        runners = {(job["runner"]["path"], job["runner"]["sha256"]) for job in selected
                   if job["runner"]["source"] == "workspace"}
        # Jobs that could travel but the default kinds left out: the user is told how to include them.
        unselected: dict[str, int] = {}
        # Jobs a manager owns stay behind whatever the kinds: the user is told they are still busy.
        owned: dict[str, int] = {}
        if not jobs:
            for marker in current.values():
                if prefixes and not placement_matches(marker.placement, prefixes):
                    continue
                if marker.kind in OWNED_KINDS:
                    owned[marker.kind.value] = owned.get(marker.kind.value, 0) + 1
                elif not kinds and marker.kind in TRANSFERABLE_KINDS and marker.kind not in chosen_kinds:
                    unselected[marker.kind.value] = unselected.get(marker.kind.value, 0) + 1
        empty = bool(prefixes) and not jobs and not any(placement_matches(marker.placement, prefixes)
                                                        for marker in current.values())
        return {
            "source": self.identity(),
            "jobs": selected,
            "finished": sorted(finished),
            # Per finished transfer, the jobs asked for (it may have carried more): what "already" counts.
            "finished_jobs": {transfer_id: sorted(keys) for transfer_id, keys in sorted(finished.items())},
            # A --placement no job is at or below (a typo?): said so, with the nearest placement there is.
            "placement_empty": empty,
            "nearest_placement": nearest_placement(prefixes[0], (marker.placement for marker in current.values()))
            if empty else None,
            "skipped": skipped,
            "unselected": dict(sorted(unselected.items())),
            "owned": dict(sorted(owned.items())),
            "runners": [{"name": name, "sha256": sha256} for name, sha256 in sorted(runners)],
        }

    def _check(
        self, wanted: dict[str, Marker], current: dict[str, Marker], *, strict: bool
    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """The travelling jobs and the skipped ones; with ``strict`` the first problem is a refusal."""
        info: dict[str, dict[str, Any]] = {}
        problems: dict[str, str] = {}
        for job_id, marker in wanted.items():
            try:
                info[job_id] = self._describe(marker)
            except TransferError as error:
                problems[job_id] = str(error)
        changed = True
        while changed:  # a skipped parent keeps its children home, and a skipped child its waiting parent
            changed = False
            for job_id, job in info.items():
                if job_id in problems:
                    continue
                problem = self._relations(job, info, problems, current)
                if problem is not None:
                    problems[job_id] = problem
                    changed = True
        if strict and problems:
            first = next(iter(problems.values()))
            more = f" (and {_plural(len(problems) - 1, 'more job')} that cannot travel)" if len(problems) > 1 else ""
            raise TransferError(first + more)
        selected = [job for job_id, job in info.items() if job_id not in problems]
        skipped = [{"job": str(wanted[job_id].key), "reason": reason} for job_id, reason in problems.items()]
        return sorted(selected, key=lambda job: job["job_key"]), skipped

    def _describe(self, marker: Marker) -> dict[str, Any]:
        """What the client needs to know of one job; a job that cannot travel raises :class:`TransferError`."""
        key = str(marker.key)
        if marker.kind == StateKind.TRANSFERRING:
            frame = self._frame(marker)
            note = transfer_note(frame.notes) or {}
            raise TransferError(
                f"job {key} is already being transferred (transfer {note.get('id', '?')} to {note.get('to', '?')}); "
                f"finish that with 'httk workflow transfer {self.label} DESTINATION --resume'"
            )
        if marker.kind in OWNED_KINDS or marker.kind not in TRANSFERABLE_KINDS:
            frame = self._frame(marker)
            owner = frame.owner
            who = f"manager {owner.manager_id} on {owner.host}" if owner is not None else "manager ? on ?"
            raise TransferError(
                f"job {key} is {marker.kind.value} under {who}: a job a manager owns cannot be transferred; wait "
                f"until it stops, or pause it first ('httk workflow job request {self.label} {key} pause --operator "
                f"\"$USER\"')"
            )
        frame = self._frame(marker)
        try:
            spec = self.store.read_spec(marker)
        except JobDamage as damage:
            raise TransferError(f"job {key} cannot be read ({damage}); see 'httk workflow workspace fsck "
                                f"{self.label}'") from None
        return {
            "job_id": marker.job_id,
            "job_key": key,
            "placement": marker.placement,
            "kind": marker.kind.value,
            "priority": marker.priority,
            "generation": marker.generation,
            "marker": marker.name,
            "workflow": spec.workflow,
            "runner": spec.runner,
            "inputs": sorted(spec.inputs),
            "settings": self._declared_settings(marker, spec),
            # A join still open (waiting, or paused while waiting) needs its children where the job goes.
            "children": [child.job_id for child in frame.join.children]
            if marker.kind in (StateKind.WAITING, StateKind.PAUSED) and frame.join and not frame.join.resolved else [],
            "parent": (parent := self._parent(marker)) and parent.get("job_id"),
            "parent_record": parent,
        }

    def _frame(self, marker: Marker) -> Any:
        try:
            return self.store.read_job(marker).frame
        except JobDamage as damage:
            raise TransferError(f"job {marker.key} cannot be read ({damage.code}: {damage.message}); see "
                                f"'httk workflow workspace fsck {self.label}'") from None

    def _relations(
        self, job: dict[str, Any], info: dict[str, dict[str, Any]], problems: dict[str, str],
        current: dict[str, Marker],
    ) -> str | None:
        """Why a job cannot travel without a relative that stays behind, or ``None``."""
        missing = [child for child in job["children"] if child not in info or child in problems]
        if missing:
            names = ", ".join(str(current[child].key) if child in current else child for child in missing)
            return (f"job {job['job_key']} is waiting on its children {names}, which are not travelling with it; a "
                    f"waiting job travels with its children: add --job for each")
        parent = job["parent"]
        if parent is not None and parent in current and (parent not in info or parent in problems):
            parent_marker = current[parent]
            if parent_marker.kind not in TERMINAL_KINDS:
                return (f"job {job['job_key']} is a child of job {parent_marker.key} ({parent_marker.kind.value}), "
                        f"which stays in {self.label} and could not gather it; add --job {parent_marker.key}, or "
                        "wait until the parent finishes")
        return None

    def _parent(self, marker: Marker) -> dict[str, Any] | None:
        """A spawned child's ``.httk-job/parent.json`` (who spawned it), else ``None``."""
        path = f"{self.store.payload_dir(marker)}/{PRIVATE_DIR}/parent.json"
        try:
            parent = codec.decode_object(self.fs.read_document(path), path)
        except (OSError, codec.DocumentError):
            return None
        return parent if isinstance(parent.get("job_id"), str) else None

    def _declared_settings(self, marker: Marker, spec: JobSpec) -> dict[str, dict[str, Any]]:
        """The settings the job's workflow declares (``workflow.json`` beside its runner), else none."""
        return dict(declared_settings(self.fs, self.layout, self.store.payload_dir(marker), spec))

    def pending(self) -> list[dict[str, Any]]:
        """Every unfinished transfer of this workspace as a source, with its header."""
        out = []
        for transfer_id, role in iter_ledgers(self.fs, self.layout):
            if role != SOURCE:
                continue
            ledger = self.ledger(transfer_id)
            state = ledger.state()
            # A ledger that never reached its plan touched no job: nothing to finish (gc collects it).
            if not state["final"] and state["step"] is not None:
                out.append({**state, "header": ledger.header()})
        return out

    def state(self, transfer_id: str) -> dict[str, Any]:
        """The ledger's state, its header, and the bundle's manifest digest once it is built."""
        ledger = self.ledger(transfer_id)
        bundled = ledger.read_slot(3) or {}
        decided = [ledger.read_slot(number) or {} for number in (4, 5)]
        reason = next((document.get("reason") for document in decided if document.get("step") == ROLLED_BACK), None)
        planned = ledger.read_slot(1) or {}
        return {**ledger.state(), "header": ledger.header(), "manifest_sha256": bundled.get("manifest_sha256"),
                "bytes": bundled.get("bytes"), "reason": reason,
                "jobs": [job["job_key"] for job in planned.get("jobs", [])]}

    # -- the steps -----------------------------------------------------------------------------
    def plan(
        self, transfer_id: str, jobs: Sequence[Mapping[str, Any]], destination: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Slot 1: the exact markers that will travel, and where to."""
        ledger = self.ledger(transfer_id)
        ledger.create({"source": self.identity(), "destination": dict(destination)})
        planned = [{key: job[key] for key in ("job_id", "job_key", "placement", "kind", "priority", "generation",
                                                 "marker", "runner")} for job in jobs]
        return ledger.record("planned", {"jobs": planned, "destination": dict(destination)})

    def _slot(self, ledger: Ledger, number: int, step: str) -> dict[str, Any]:
        document = ledger.read_slot(number)
        if document is None or document.get("step") != step:
            raise LedgerError(f"transfer {ledger.transfer_id}: the source ledger has no {step} step")
        return document

    def _transferring(self, job: Mapping[str, Any], transfer_id: str) -> tuple[Marker, Any] | None:
        """This transfer's transferring marker of ``job`` with its frame, if there is one."""
        for marker in self.store.locate(str(job["placement"]), str(job["job_key"]), (StateKind.TRANSFERRING,)):
            frame = self._frame(marker)
            if (transfer_note(frame.notes) or {}).get("id") == transfer_id:
                return marker, frame
        return None

    def detach(self, transfer_id: str) -> dict[str, Any]:
        """Slot 2: each planned job goes to ``transferring``; a job that changed meanwhile refuses the transfer."""
        ledger = self.ledger(transfer_id)
        plan = self._slot(ledger, 1, "planned")
        destination = plan["destination"].get("label")
        detached = []
        for job in plan["jobs"]:
            found = self._transferring(job, transfer_id)
            if found is None:
                found = self._detach_one(job, transfer_id, destination)
            marker, _frame = found
            detached.append({"job_id": job["job_id"], "marker": marker.name, "origin": job["kind"]})
        return ledger.record("detached", {"jobs": detached})

    def _detach_one(self, job: Mapping[str, Any], transfer_id: str, destination: Any) -> tuple[Marker, Any]:
        key = str(job["job_key"])
        try:
            marker = Marker.parse(str(job["kind"]), str(job["placement"]), str(job["marker"]))
            view = self.store.read_job(marker)
            note = {"id": transfer_id, "origin": job["kind"], "to": destination, "from": self.label}
            return self.store.transition(marker, view.frame, Event.TRANSFER_DETACH,
                                         notes={**view.frame.notes, "transfer": note},
                                         reason=f"transfer {transfer_id} to {destination}")
        except (LostRace, JobDamage):
            now = self.store.locate(str(job["placement"]), key)
            what = f"it is {now[0].kind.value} now" if now else "it is gone"
            raise TransferError(f"job {key} changed while it was being detached ({what}); transfer {transfer_id} "
                                "is rolled back: nothing moved") from None

    def bundle(self, transfer_id: str) -> dict[str, Any]:
        """Slot 3: the bundle of every detached job, built and checksummed."""
        ledger = self.ledger(transfer_id)
        plan = self._slot(ledger, 1, "planned")
        self._slot(ledger, 2, "detached")
        trees: dict[str, dict[str, str]] = {}
        frames: dict[str, list[dict[str, Any]]] = {}
        jobs: list[dict[str, Any]] = []
        runners: dict[tuple[str, str], dict[str, Any]] = {}
        for job in plan["jobs"]:
            found = self._transferring(job, transfer_id)
            if found is None:
                raise LedgerError(f"transfer {transfer_id}: job {job['job_key']} is not transferring at the source")
            marker, _frame = found
            job_id = marker.job_id
            trees[job_id] = bundles.job_trees(self.layout, marker.placement, str(marker.key), job_id)
            frames[job_id] = self._history(marker)
            present = [name for name in bundles.TREES if self.fs.lstat(trees[job_id][name]) is not None]
            jobs.append({"job_id": job_id, "job_key": str(marker.key), "placement": marker.placement,
                         "priority": marker.priority, "origin": job["kind"], "generation": marker.generation,
                         "marker": marker.name, "trees": present, "runner": job["runner"]})
            runner = job["runner"]
            if runner.get("source") == "workspace":
                runners[(runner["path"], runner["sha256"])] = self._runner(runner["path"], runner["sha256"])
        header = {"transfer_id": transfer_id, "source": {**self.identity(), "label": self.label},
                  "created_at": self.handle.ports.clock.now()}
        manifest, sha256 = bundles.build(
            self.fs, ledger.bundle_dir, jobs, trees, frames, list(runners.values()), header,
            durable=self.handle.durable,
        )
        return ledger.record("bundled", {"manifest_sha256": sha256, "bytes": manifest["bytes"],
                                         "files": len(manifest["files"])})

    def _history(self, marker: Marker) -> list[dict[str, Any]]:
        """The job's frames oldest first; a damaged chain refuses the transfer (its history would be lost)."""
        frames = []
        for entry in job_log(self.handle, marker):
            if "damage" in entry:
                damage = entry["damage"]
                raise TransferError(f"job {marker.key} has a damaged journal ({damage['code']}: {damage['message']}); "
                                    f"repair it with 'httk workflow workspace fsck {self.label} --repair' first")
            ref = entry.get("record_ref")
            if ref == "init":
                continue  # generation 0 is the job.json itself, not a frame
            document = {key: value for key, value in entry.items() if key not in ("record_ref", "recovered_by_scan")}
            frames.append({"record_ref": ref, "frame": document})
        return frames

    def _runner(self, name: str, sha256: str) -> dict[str, Any]:
        path = object_path(self.layout, sha256, name)
        info = self.fs.lstat(path)
        if info is None or not (info.is_file or info.is_dir):
            raise TransferError(f"workspace runner {name!r} (sha256 {sha256}) is not in {self.label}'s store; publish "
                                f"it with 'httk workflow runner publish FILE --workspace {self.label} --name {name}'")
        return {"name": name, "sha256": sha256, "kind": "tree" if info.is_dir else "file", "object": path}

    def bundle_files(self, transfer_id: str) -> dict[str, Any]:
        """Where the bundle is and its manifest text, for the copy to the destination."""
        ledger = self.ledger(transfer_id)
        bundled = self._slot(ledger, 3, "bundled")
        data = self.fs.read_document(f"{ledger.bundle_dir}/{bundles.MANIFEST}", limit=None)
        return {"path": ledger.bundle_dir, "manifest": data.decode("utf-8"),
                "manifest_sha256": bundled["manifest_sha256"]}

    def mark_sent(self, transfer_id: str) -> dict[str, Any]:
        """Slot 4 = sent: the destination holds the verified bundle; from now on only it may decide."""
        return self.ledger(transfer_id).record("sent", slot=4)

    def decide_rollback(self, transfer_id: str, reason: str) -> dict[str, Any]:
        """Slot 4 = rolled_back, unless the transfer was sent already (then slot 4 says so)."""
        return self.ledger(transfer_id).record(ROLLED_BACK, {"reason": reason}, slot=4)

    def acknowledge(self, transfer_id: str, ack: Mapping[str, Any]) -> dict[str, Any]:
        """Slot 5 = acknowledged: the destination imported every job."""
        if ack.get("step") != "acknowledged" or ack.get("transfer_id") != transfer_id:
            raise LedgerError(f"transfer {transfer_id}: not an acknowledgement of this transfer")
        members = ("job_id", "job_key", "kind", "placement")
        jobs = [{key: job.get(key) for key in members} for job in ack.get("jobs", [])]
        return self.ledger(transfer_id).record("acknowledged", {"jobs": jobs}, slot=5)

    def destination_rolled_back(self, transfer_id: str, reason: str) -> dict[str, Any]:
        """Slot 5 = rolled_back: the destination decided against the import, so the source takes the jobs back."""
        return self.ledger(transfer_id).record(ROLLED_BACK, {"reason": reason}, slot=5)

    def retire(self, transfer_id: str) -> dict[str, Any]:
        """Slot 6 = retired: each source copy leaves (``transfer_retire``), its trees are removed."""
        ledger = self.ledger(transfer_id)
        plan = self._slot(ledger, 1, "planned")
        self._slot(ledger, 5, "acknowledged")
        for job in plan["jobs"]:
            found = self._transferring(job, transfer_id)
            if found is not None:
                marker, frame = found
                try:
                    self.store.transition(marker, frame, Event.TRANSFER_RETIRE, leave_to=f"{ledger.directory}/retired",
                                          notes=frame.notes, reason=frame.reason)
                except LostRace:
                    pass  # another run of this retire moved it first
            for path in bundles.job_trees(self.layout, str(job["placement"]), str(job["job_key"]),
                                          str(job["job_id"])).values():
                self._remove_tree(path)
        return ledger.record("retired", slot=6)

    def _remove_tree(self, path: str) -> None:
        if self.fs.lstat(path) is None:
            return
        self.fs.rmtree(path)
        parent = posixpath.dirname(path)
        if self.handle.durable:
            self.fs.fsync_dir(parent)
        # An emptied placement directory goes too, up to the workspace root.
        while parent != self.layout.root and parent.startswith(f"{self.layout.root}/") and \
                not parent.startswith(self.layout.control):
            try:
                self.fs.rmdir(parent)
            except OSError:
                break
            parent = posixpath.dirname(parent)

    def rollback(self, transfer_id: str) -> dict[str, Any]:
        """Slot 6 = rolled_back: each detached job goes back to the kind it was detached from."""
        ledger = self.ledger(transfer_id)
        plan = self._slot(ledger, 1, "planned")
        decided = [ledger.read_slot(number) or {} for number in (4, 5)]
        if not any(document.get("step") == ROLLED_BACK for document in decided):
            raise LedgerError(f"transfer {transfer_id}: no rollback was decided")
        for job in plan["jobs"]:
            found = self._transferring(job, transfer_id)
            if found is None:
                continue  # never detached, or already back
            marker, frame = found
            note = transfer_note(frame.notes) or {}
            notes = {key: value for key, value in frame.notes.items() if key != "transfer"}
            try:
                self.store.transition(marker, frame, Event.TRANSFER_ROLLBACK, origin=StateKind(note["origin"]),
                                      notes=notes, reason=f"transfer {transfer_id} rolled back")
            except LostRace:
                pass
        self.fs.rmtree(ledger.bundle_dir)
        self.fs.rmtree(f"{ledger.bundle_dir}.tmp")
        reason = next((document.get("reason") for document in decided if document.get("step") == ROLLED_BACK), None)
        return ledger.record(ROLLED_BACK, {"reason": reason}, slot=6)
