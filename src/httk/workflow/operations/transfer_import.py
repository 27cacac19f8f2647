"""Transfer, destination side: receive a bundle, verify it, import its jobs, acknowledge.

Nothing of a transfer reaches the destination's state tree before its decision
(slot 2 of the destination ledger): the bundle arrives in the ledger's
``incoming/``, is verified against its manifest (``received``), and the import
checks every job (not held here already, no name it needs taken, every runner
it pins either absent or identical here), appends each job's history to this
workspace's journal as imported frames chained by ``previous_record_ref`` with a
final ``transfer_import`` frame, and stages each marker as an empty file in the
ledger. Only then is ``imported`` published; a refusal before it publishes
``rolled_back`` instead, in the same slot, so exactly one of the two happens.
After ``imported`` the import only goes forward, and every part of it is a rename
with one winner (runner objects, each tree into place, each staged marker into
the state tree), so a repeated or concurrent import finishes it exactly once.
Spec: 000 "Running on a remote", "Share one runner between many jobs".
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .. import codec
from ..domain.frames import StateFrame
from ..domain.lifecycle import Event, StateKind, next_kind
from ..domain.model import JobKey
from ..protocol import PRIVATE_DIR
from ..store import transfer_bundle as bundles
from ..store.digests import fs_digest
from ..store.job_ids import JobIdTaken, Reservation, check_job_id, reservation_of, reserve_job_id
from ..store.markers import Marker
from ..store.runners import object_path
from ..store.transfer_ledger import DESTINATION, ROLLED_BACK, Ledger, TransferSide
from .submission import SubmissionError, check_path_lengths, job_paths
from .transfer import TransferError, transfer_note

#: Runner names a package owns: ``job new`` republishes them per package version, so a destination
#: keeps its own name and gains the pinned object instead of refusing the transfer.
PACKAGE_RUNNER_PREFIX = "shipped/"


class DestinationSide(TransferSide):
    """The destination workspace of a transfer."""

    role = DESTINATION

    @property
    def incoming(self) -> str:
        return "incoming"

    # -- reading -------------------------------------------------------------------------------
    def probe(
        self, jobs: Sequence[Mapping[str, Any]] = (), runners: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        """This workspace's identity and settings, and the first reason it could not take ``jobs`` (read only)."""
        problems = self.job_problems(jobs) + self._runner_problems(runners, jobs)
        return {
            "workspace_id": self.handle.workspace_id,
            "root": self.handle.root,
            "name": self.handle.name,
            "settings": self.handle.settings(),
            "problems": problems,
        }

    def job_problems(self, jobs: Sequence[Mapping[str, Any]], bundle: str | None = None) -> list[str]:
        """Why this workspace cannot take ``jobs`` (held here already, a job id taken, a name clash); empty: it can.

        Asked by the probe and again by the import, from ``bundle``'s parent records.
        """
        if not jobs:
            return []
        held: dict[str, Marker] = {}
        for kind in StateKind:
            for marker in self.store.iter_markers(kind):
                held.setdefault(marker.job_id, marker)
        problems = []
        for job in jobs:
            job_id, key, placement = str(job["job_id"]), str(job["job_key"]), str(job["placement"])
            marker = held.get(job_id)
            if marker is not None:
                problems.append(
                    f"{self.label} already holds job {key} ({marker.kind.value} at {marker.placement}): a job lives "
                    "in one workspace; leave it out of the transfer, or transfer that copy away first")
                continue
            try:
                # A reservation of this very job (it lived here before) is its own; another job's is a clash.
                parent = job.get("parent_record") if bundle is None else self._parent_record(bundle, job_id)
                check_job_id(self.fs, self.layout, Reservation(job_id, key, placement, "import", parent=parent))
            except JobIdTaken as taken:
                problems.append(f"{self.label}: {taken}; a job id names one job only: transfer the job elsewhere, "
                                "or resubmit one of the two under a new id")
                continue
            for path in bundles.job_trees(self.layout, placement, key, job_id).values():
                if self.fs.lstat(path) is not None:
                    problems.append(
                        f"{self.label}: {path} already exists (a name clash with job {key}); move it away there (see "
                        f"'httk workflow workspace fsck {self.label}'), then transfer again")
                    break
        return problems

    def _parent_record(self, bundle: str, job_id: str) -> dict[str, Any] | None:
        path = f"{bundle}/jobs/{job_id}/payload/{PRIVATE_DIR}/parent.json"
        try:
            return codec.decode_object(self.fs.read_document(path), path)
        except (OSError, codec.DocumentError):
            return None

    def _runner_problems(self, runners: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]]) -> list[str]:
        problems = []
        for runner in runners:
            name, pinned = str(runner["name"]), str(runner["sha256"])
            stored = self._stored_digest(name)
            if stored is None or stored == pinned or name.startswith(PACKAGE_RUNNER_PREFIX):
                continue
            user = next((str(job["job_key"]) for job in jobs if (job.get("runner") or {}).get("sha256") == pinned), "")
            which = f"job {user} pins" if user else "the transfer pins"
            problems.append(
                f"{self.label}'s runner store maps {name!r} to sha256 {stored}, but {which} sha256 {pinned} (same "
                f"name, different bytes); make them agree first, e.g. publish the pinned bytes there with 'httk "
                f"workflow runner publish FILE --workspace {self.label} --name {name} --replace', then transfer again")
        return problems

    def _stored_digest(self, name: str) -> str | None:
        index = f"{self.layout.runners}/names/{name}.json"
        try:
            stored = codec.decode_object(self.fs.read_document(index), index).get("sha256")
        except (OSError, codec.DocumentError):
            return None
        return stored if isinstance(stored, str) else None

    def state(self, transfer_id: str) -> dict[str, Any]:
        """The destination ledger's state (``exists`` false before anything arrived) and its decision."""
        ledger = self.ledger(transfer_id)
        if not ledger.exists():
            return {"transfer_id": transfer_id, "exists": False, "step": None, "final": False, "decision": None}
        decision = ledger.read_slot(2)
        return {**ledger.state(), "exists": True, "decision": decision.get("step") if decision else None,
                "reason": decision.get("reason") if decision else None}

    # -- receiving -----------------------------------------------------------------------------
    def prepare(self, transfer_id: str, manifest: str, source: Mapping[str, Any]) -> dict[str, Any]:
        """Make ``incoming/`` ready for the bundle's files: its directories and links, and the manifest.

        Returns the directory and the files already there intact (a resumed copy skips them).
        """
        ledger = self.ledger(transfer_id)
        state = self.state(transfer_id)
        if state["decision"] == ROLLED_BACK:
            raise TransferError(f"transfer {transfer_id} was rolled back at {self.label}: {state['reason']}")
        data = manifest.encode("utf-8")
        parsed = bundles.parse_manifest(data, f"the manifest of transfer {transfer_id}")
        if ledger.read_slot(1) is not None:
            return {"path": ledger.bundle_dir, "complete": [entry["path"] for entry in parsed["files"]]}
        ledger.create({"source": dict(source)})
        incoming = f"{ledger.directory}/{self.incoming}"
        self.fs.makedirs(incoming)
        self.fs.write_atomic(f"{incoming}/{bundles.MANIFEST}", data, durable=False)
        complete = []
        for entry in parsed["files"]:
            path = f"{incoming}/{entry['path']}"
            if entry["type"] == "dir":
                self.fs.makedirs(path)
            elif entry["type"] == "link":
                if bundles.entry_problem(self.fs, incoming, entry) is not None:
                    if self.fs.lstat(path) is not None:
                        self.fs.remove(path)
                    self.fs.symlink(str(entry["target"]), path)
            elif bundles.entry_problem(self.fs, incoming, entry) is None:
                complete.append(entry["path"])
        return {"path": incoming, "complete": complete}

    def receive(self, transfer_id: str, manifest_sha256: str) -> dict[str, Any]:
        """Slot 1 = received: ``incoming/`` matches the manifest the source recorded, and becomes the bundle."""
        ledger = self.ledger(transfer_id)
        done = ledger.read_slot(1)
        if done is not None:
            return done
        incoming = f"{ledger.directory}/{self.incoming}"
        manifest = bundles.read_manifest(self.fs, incoming, manifest_sha256)
        problems = bundles.verify(self.fs, incoming, manifest)
        if problems:
            raise TransferError(f"the bundle of transfer {transfer_id} arrived at {self.label} damaged: "
                                f"{'; '.join(problems)}; run the transfer again")
        if self.handle.durable:
            self.fs.sync_tree(incoming)
        self.fs.rmtree(ledger.bundle_dir)
        self.fs.rename(incoming, ledger.bundle_dir, durable=self.handle.durable)
        return ledger.record("received", {"manifest_sha256": manifest_sha256, "bytes": manifest["bytes"]})

    # -- importing -----------------------------------------------------------------------------
    def import_(self, transfer_id: str, manifest_sha256: str) -> dict[str, Any]:
        """Decide, then finish the import; returns the acknowledgement (slot 3).

        A refusal before the decision publishes ``rolled_back`` and raises
        :class:`TransferError`; when another run decided first, its decision is followed.
        """
        ledger = self.ledger(transfer_id)
        decision = ledger.read_slot(2)
        if decision is None:
            try:
                decision = self._decide(ledger, manifest_sha256)
            except (TransferError, bundles.BundleError, OSError) as error:
                reason = self._reason(error)
                decision = self._refuse(ledger, reason)
        if decision["step"] == ROLLED_BACK:
            fallback = f"transfer {transfer_id} was rolled back at {self.label}"
            raise TransferError(str(decision.get("reason") or fallback))
        done = ledger.read_slot(3)
        if done is not None and done["step"] == "acknowledged":
            return done
        self._execute(ledger, decision)
        return ledger.record("acknowledged", {"jobs": decision["jobs"]}, slot=3)

    def _refuse(self, ledger: Ledger, reason: str) -> dict[str, Any]:
        decision = ledger.record(ROLLED_BACK, {"reason": reason}, slot=2)
        if decision["step"] == ROLLED_BACK:
            self._clean(ledger)
            ledger.record(ROLLED_BACK, {"reason": reason}, slot=3)
        return decision

    def _decide(self, ledger: Ledger, manifest_sha256: str) -> dict[str, Any]:
        """Every check, the journal history and the staged markers, then slot 2 = imported."""
        transfer_id = ledger.transfer_id
        received = ledger.read_slot(1)
        if received is None:
            raise TransferError(f"transfer {transfer_id}: {self.label} has not received its bundle; "
                                "run the transfer again")
        bundle = ledger.bundle_dir
        manifest = bundles.read_manifest(self.fs, bundle, manifest_sha256)
        jobs, runners = manifest["jobs"], manifest["runners"]
        problems = self.job_problems(jobs, bundle) + self._runner_problems(runners, jobs)
        if problems:
            raise TransferError(f"{problems[0]}; transfer {transfer_id} is rolled back: nothing moved")
        for runner in runners:
            stored = f"{bundle}/runners/objects/{runner['sha256']}/{str(runner['name']).rsplit('/', 1)[-1]}"
            if fs_digest(self.fs, stored) != runner["sha256"]:
                raise TransferError(f"runner {runner['name']!r} in the bundle of transfer {transfer_id} does not have "
                                    f"its pinned sha256 {runner['sha256']}; run the transfer again")
        for job in jobs:
            key = JobKey.parse(str(job["job_key"]))
            payload = f"{bundle}/jobs/{job['job_id']}/payload"
            try:
                check_path_lengths(job_paths(self.handle, payload, str(job["placement"]), key, staging=None),
                                   str(job["placement"]))
            except SubmissionError as error:
                raise TransferError(f"{self.label}: {error}") from None
        staged_dir = f"{ledger.directory}/staged-{self.handle.ports.ids.new_hex(8)}"
        self.fs.makedirs(staged_dir, durable=self.handle.durable)
        plan = [self._stage(ledger, bundle, job, staged_dir, manifest["source"]) for job in jobs]
        if self.handle.durable:
            self.fs.fsync_dir(staged_dir)
        return ledger.record("imported", {"jobs": plan, "runners": runners,
                                          "source_root": manifest["source"].get("root")}, slot=2)

    def _stage(
        self, ledger: Ledger, bundle: str, job: Mapping[str, Any], staged_dir: str, source: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Append one job's history and its ``transfer_import`` frame; stage its marker."""
        job_id = str(job["job_id"])
        previous: str | None = None
        frames = bundles.read_frames(self.fs, bundle, job_id)
        for item in frames:
            document = dict(item["frame"])
            imported = {"transfer_id": ledger.transfer_id, "workspace_id": document.get("workspace_id"),
                        "record_ref": item.get("record_ref")}
            document.update(workspace_id=self.handle.workspace_id, previous_record_ref=previous,
                            notes={**(document.get("notes") or {}), "imported": imported})
            previous = str(self.store.writer.append(document))
        last: StateFrame = codec.frame_from_json(dict(frames[-1]["frame"]))
        origin = StateKind(str(job["origin"]))
        kind = next_kind(last.kind, Event.TRANSFER_IMPORT, origin=origin)
        note = {**(transfer_note(last.notes) or {}), "id": ledger.transfer_id, "origin": origin.value,
                "source_workspace_id": source.get("workspace_id")}
        frame = last.evolve(
            workspace_id=self.handle.workspace_id,
            generation=last.generation + 1,
            kind=kind,
            event=Event.TRANSFER_IMPORT.value,
            previous_record_ref=previous,
            created_at=self.handle.ports.clock.now(),
            notes={**last.notes, "transfer": note},
            reason=f"transfer {ledger.transfer_id} from {source.get('label') or source.get('root')}",
        )
        ref = self.store.writer.append(codec.frame_to_json(frame))
        marker = Marker(kind, str(job["placement"]), JobKey.parse(str(job["job_key"])), int(job["priority"]),
                        frame.generation, str(ref))
        staged = f"{staged_dir}/{job_id}"
        self.fs.create_empty(staged, durable=self.handle.durable)
        return {"job_id": job_id, "job_key": str(job["job_key"]), "placement": marker.placement,
                "kind": kind.value, "marker": marker.name, "staged": staged, "trees": list(job["trees"])}

    def _execute(self, ledger: Ledger, decision: Mapping[str, Any]) -> None:
        """Runners, then every job's trees, then every marker; each part happens at most once."""
        bundle = ledger.bundle_dir
        for runner in decision["runners"]:
            self._install_runner(bundle, runner)
        for job in decision["jobs"]:
            targets = bundles.job_trees(self.layout, str(job["placement"]), str(job["job_key"]), str(job["job_id"]))
            for tree in job["trees"]:
                self._place(f"{bundle}/jobs/{job['job_id']}/{tree}", targets[tree], ledger.transfer_id)
        for job in decision["jobs"]:
            if "joins" in job["trees"] and decision.get("source_root"):
                self._rebase_notes(str(job["job_id"]), str(decision["source_root"]))
        for job in decision["jobs"]:
            marker = Marker.parse(str(job["kind"]), str(job["placement"]), str(job["marker"]))
            # The id is reserved here before the marker appears, as every creation of a job does.
            try:
                wanted = reservation_of(self.fs, self.layout, marker.job_id, str(marker.key), marker.placement)
                reserve_job_id(self.fs, self.layout, attrs.evolve(wanted, origin="import"),
                               durable=self.handle.durable)
            except JobIdTaken as taken:
                raise TransferError(f"{self.label}: {taken}; the import of transfer {ledger.transfer_id} waits: "
                                    "resolve the clash there, then run the transfer again") from None
            self.store.adopt(str(job["staged"]), marker)

    def _rebase_notes(self, job_id: str, source_root: str) -> None:
        """Point the children's join notes at their trees here: a note records absolute paths of its workspace.

        Idempotent (a rebased path no longer starts with the source's root), so a resumed import repeats it.
        """
        root = self.layout.root
        if source_root == root:
            return
        directory = f"{self.layout.control}/joins/{job_id}"
        for entry in self.fs.scandir(directory):
            if not entry.is_file or not entry.name.endswith(".json"):
                continue
            try:
                note = codec.decode_object(self.fs.read_document(entry.path), entry.path)
            except (OSError, codec.DocumentError):
                continue
            changed = False
            for member in ("workdir", "data", "payload"):
                value = note.get(member)
                if isinstance(value, str) and (value == source_root or value.startswith(f"{source_root}/")):
                    note[member] = root + value[len(source_root):]
                    changed = True
            if changed:
                self.fs.write_atomic(entry.path, codec.encode(note), durable=self.handle.durable)

    def _place(self, source: str, target: str, transfer_id: str) -> None:
        durable = self.handle.durable
        if self.fs.lstat(source) is None:
            if self.fs.lstat(target) is not None:
                return  # placed by an earlier run of this import
            raise TransferError(f"transfer {transfer_id}: {source} vanished from the bundle before it was placed")
        try:
            self.fs.rename(source, target, durable=durable)
        except FileNotFoundError:
            if self.fs.lstat(target) is None:
                raise
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            # A placement on another mount: copy (appearing all at once), then drop the bundle's copy.
            if self.fs.lstat(target) is None:
                self.fs.copy_tree(source, target, durable=durable)
            self.fs.rmtree(source)

    def _install_runner(self, bundle: str, runner: Mapping[str, Any]) -> None:
        name, sha256 = str(runner["name"]), str(runner["sha256"])
        target = object_path(self.layout, sha256, name)
        if self.fs.lstat(target) is None:
            try:
                self.fs.copy_tree(f"{bundle}/runners/objects/{sha256}/{name.rsplit('/', 1)[-1]}", target,
                                  durable=self.handle.durable)
            except FileExistsError:
                pass
        if self._stored_digest(name) is None:
            record = {"path": name, "sha256": sha256, "source": "workspace", "kind": runner.get("kind", "file")}
            self.fs.write_atomic(f"{self.layout.runners}/names/{name}.json", codec.encode(record),
                                 durable=self.handle.durable)

    def abort(self, transfer_id: str, reason: str) -> dict[str, Any]:
        """Decide ``rolled_back`` unless the import was decided already, and clear what arrived."""
        ledger = self.ledger(transfer_id)
        if not ledger.exists():
            return self.state(transfer_id)
        decision = ledger.read_slot(2)
        if decision is None:
            decision = self._refuse(ledger, reason)
        elif decision["step"] == ROLLED_BACK and ledger.read_slot(3) is None:
            self._clean(ledger)
            ledger.record(ROLLED_BACK, {"reason": decision.get("reason")}, slot=3)
        return self.state(transfer_id)

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, OSError) and error.strerror:
            where = f" ({error.filename})" if error.filename else ""
            return (f"{self.label} cannot take the import: {error.strerror}{where}; free space or fix it there, "
                    "then transfer again")
        return str(error)

    def _clean(self, ledger: Ledger) -> None:
        for entry in list(self.fs.scandir(ledger.directory)):
            if entry.name in (self.incoming, "bundle") or entry.name.startswith("staged-"):
                self.fs.rmtree(entry.path)


