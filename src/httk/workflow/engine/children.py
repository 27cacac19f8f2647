"""Creating the children an outcome spawns: verified first, created once, never over another job.

The runner names each child's job id, so the manager verifies the names before
it creates anything: a child whose payload name, marker or job id belongs to an
existing job (a second parent spawning the same id, a retried attempt spawning
its predecessor's child again, an id listed twice, a job at any placement
holding the id's workspace-wide reservation, :mod:`.job_ids`) refuses the whole
outcome, and nothing is created for it. What tells this outcome's own children
from another job after a crash is the parent and attempt recorded in each
child's id reservation and in its ``.httk-job/parent.json``.

Creation is crash-safe in four phases, each one group commit (its writes made,
then synced together: one sync per directory touched, file syncs overlapped by
:meth:`~.ports.Filesystem.sync_trees`) finished before the next begins: every
child's job id is reserved (:func:`.job_ids.reserve_job_ids`); every payload gets
its parent record and its ``submitted`` marker staged inside it; every payload is
renamed into place (a payload without a marker is seen by no manager); then each
staged marker is renamed into the state tree and, once those are durable, each
child is ledgered. A rename comes only after what it names is durable, so a crash
anywhere leaves each child created in full or without a marker. A replay redoes
only what is not ledgered, and a clash found midway (another job won an id or a name meanwhile)
moves this outcome's payloads back and releases its reservations before
refusing. Two managers may run one commit at once (a lease is evidence, not a
fence): a payload the other one moved is recognized by its parent record, and
the staged marker, renamed once, is published once even if a manager registers
it before the slower one looks. Spec: 001 "Spawning children";
docs/workflow_filesystem_api.md "Commits".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .. import codec
from ..domain.lifecycle import StateKind
from ..domain.model import JobKey
from ..ports import Filesystem
from ..protocol import JOB_FILE, PRIVATE_DIR, parse_job_bytes
from ..store.job_ids import (
    JobIdTaken,
    Reservation,
    check_job_id,
    job_id_traces,
    release_job_id,
    reserve_job_id,
    reserve_job_ids,
)
from ..store.links import UntrustedLink, refuse_links
from ..store.markers import INIT_REF, Marker, MarkerNameError
from ..store.store import Store
from .outcome_reader import Outcome

PARENT_FILE = "parent.json"
#: The child's ``submitted`` marker, staged in its payload before the payload moves (published by one rename).
STAGED_MARKER = "submitted.marker"


class ChildrenError(ValueError):
    """An outcome whose spawned children cannot be created (a protocol error of the runner)."""


@attrs.frozen
class _Child:
    label: str
    key: JobKey
    placement: str
    source: str  # the payload in the outcome
    destination: str  # the payload in the workspace
    ledger: str
    priority: int
    in_place: bool  # a crashed run of this commit already renamed the payload into place
    reservation: Reservation  # the child's job id, reserved workspace-wide before its payload moves


@attrs.frozen
class ChildPlan:
    """The verified, not yet created children of one outcome (see :func:`plan_children`)."""

    store: Store
    parent: Marker
    attempt_id: str
    children: tuple[_Child, ...]

    def create(self, between: Callable[[], None] | None = None) -> list[Marker]:
        """Reserve every child's job id, place every payload with its marker staged, then publish and
        ledger the markers, each phase one group commit; the markers made now.

        Safe against a concurrent run of this same commit (a mistaken lease expiry): a payload
        or marker another applier of it placed meanwhile is recognized by its parent record
        and counted as placed, never as a clash. ``between`` is called before each phase and
        each child's rename (a heartbeat, and the check that this manager still holds the commit).
        """
        check = between if between is not None else _nothing
        placed = [child for child in self.children if child.in_place]
        self._reserve(placed)
        moving = [child for child in self.children if not child.in_place]
        if moving:
            check()
            self._stage(moving)
            _make_dirs(self.store.fs, [posixpath.dirname(child.destination) for child in moving],
                       durable=self.store.config.durable)
        for child in moving:
            check()
            if not self._move(child):
                # Something that reserves no id (a directory made by hand) took the name since the plan.
                _withdraw(self.store, placed, self.children)
                raise ChildrenError(
                    f"child {child.label!r}: job {child.key} at {child.placement} was created by another "
                    "job meanwhile; a spawn must name a new job id"
                )
            placed.append(child)
        pending = [child for child in self.children if not self.store.fs.exists(child.ledger)]
        if self.store.config.durable and pending:
            # The renames are durable before any marker names them: destination directories first, so
            # that where a filesystem syncs the two halves apart a crash leaves a name twice, never nowhere.
            self.store.fs.fsync_dirs(sorted({posixpath.dirname(child.destination) for child in pending}))
            if moving:
                self.store.fs.fsync_dirs(sorted({posixpath.dirname(child.source) for child in moving}))
        return self._publish(pending, check)

    def _reserve(self, placed: Sequence[_Child]) -> None:
        """Phase 1: every child's job id reserved workspace-wide (:func:`.job_ids.reserve_job_ids`)."""
        fs, layout, durable = self.store.fs, self.store.layout, self.store.config.durable
        fresh: list[Reservation] = []
        replayed: list[Reservation] = []
        label = {child.key.job_id: child.label for child in self.children}
        try:
            for child in self.children:
                # A reservation naming this attempt's child is a crashed run's: kept, not a clash.
                (replayed if check_job_id(fs, layout, child.reservation) else fresh).append(child.reservation)
            if fresh:
                _make_dirs(fs, [posixpath.dirname(layout.id_reservation(item.job_id)) for item in fresh],
                           durable=durable)
                try:
                    reserve_job_ids(fs, layout, fresh, durable=durable, writer=self.store.writer.writer_id)
                except (JobIdTaken, OSError):
                    # A concurrent run of this commit shares the batch's temp names, or another job took an
                    # id: settled one id at a time, as a single reservation does (exclusive, no shared temp).
                    for reservation in fresh:
                        reserve_job_id(fs, layout, reservation, durable=durable)
                    replayed = [*replayed, *fresh]  # what the broken batch renamed is not synced yet
        except JobIdTaken as taken:
            # Another job took the id since the plan: this outcome creates nothing after all.
            _withdraw(self.store, placed, self.children)
            raise ChildrenError(f"child {label.get(taken.job_id, taken.job_id)!r}: {taken}; "
                                "a spawn must name a new job id") from None
        if durable and replayed:
            # A crashed run may have renamed a reservation without syncing its bucket.
            fs.fsync_dirs(sorted({posixpath.dirname(layout.id_reservation(item.job_id)) for item in replayed}))

    def _stage(self, moving: Sequence[_Child]) -> None:
        """Phase 2: ``parent.json`` and the staged marker written into every payload still in the outcome,
        then synced as one group, before any payload moves.

        ``parent.json`` is written to a temp named by this applier, the temps are synced
        together and only then renamed onto the name: so the name, once it exists, has its
        whole content, even when two appliers of this commit write it at once.
        """
        fs, durable = self.store.fs, self.store.config.durable
        temp_name = f".{PARENT_FILE}.{self.store.writer.writer_id}"
        records: list[tuple[_Child, str, bytes]] = []  # (child, temp, record) of each record to write
        directories: set[str] = set()  # the directories whose new names the rename must find durable
        for child in moving:
            if fs.lstat(child.source) is None:
                continue  # moved by a concurrent run of this commit: :meth:`_move` tells
            private = f"{child.source}/{PRIVATE_DIR}"
            if fs.lstat(private) is None:
                directories.add(child.source)  # the private directory's own name
            else:
                for entry in fs.scandir(private):
                    if entry.name.startswith(f".{PARENT_FILE}.") and entry.name != temp_name:
                        _remove(fs, entry.path)  # a temp a crashed run of this commit left
            directories.add(private)
            record = codec.encode({**(child.reservation.parent or {}), "staged_marker": True})
            if _read(fs, f"{private}/{PARENT_FILE}") != record:
                fs.write_atomic(f"{private}/{temp_name}", record, durable=False)
                records.append((child, f"{private}/{temp_name}", record))
            staged = f"{private}/{STAGED_MARKER}"
            info = fs.lstat(staged)
            if info is not None and not (info.is_file and info.size == 0):
                fs.rmtree(staged)  # only an empty file may become a marker
            try:
                fs.create_empty(staged, durable=False)
            except FileExistsError:
                pass  # staged by a crashed run of this commit
        if durable and records:
            _each(fs.sync_trees, [temp for _child, temp, _record in records])
        for _child, temp, record in records:
            target = f"{posixpath.dirname(temp)}/{PARENT_FILE}"
            try:
                fs.rename(temp, target, durable=False)
            except (FileExistsError, FileNotFoundError):
                # Another applier's record (or a runner's own file) holds the name, or this temp moved with
                # a payload another applier placed: the name must say this record, durably.
                _remove(fs, temp)
                if _read(fs, target) != record:
                    fs.write_atomic(target, record, durable=durable)
        if durable and directories:
            _each(fs.fsync_dirs, sorted(directories))

    def _move(self, child: _Child) -> bool:
        """Phase 3, one child: its staged payload renamed into place; ``False`` if the name holds another job's."""
        fs = self.store.fs
        if fs.lstat(child.source) is not None:
            try:
                fs.rename(child.source, child.destination, durable=False)
                return True
            except (FileExistsError, FileNotFoundError):
                pass  # another applier of this commit, or another job: the parent record tells
        creator = _creator(self.store, child.destination)
        if creator is None or not _by_this_outcome(creator, self.parent, self.attempt_id, child.label):
            return False
        if fs.lstat(f"{child.source}/{JOB_FILE}") is None:
            # The parent record written just as a concurrent applier moved the payload.
            fs.rmtree(child.source)
        _remove(fs, f"{child.destination}/{PRIVATE_DIR}/.{PARENT_FILE}.{self.store.writer.writer_id}")
        return True

    def _publish(self, pending: Sequence[_Child], check: Callable[[], None]) -> list[Marker]:
        """Phase 4: every staged marker renamed into the state tree, synced, then every child ledgered."""
        store = self.store
        fs, durable = store.fs, store.config.durable
        if not pending:
            return []
        markers = sorted({f"{store.layout.kind_dir(StateKind.SUBMITTED)}/{child.placement}" for child in pending})
        _make_dirs(fs, [posixpath.dirname(pending[0].ledger), *markers], durable=durable)
        created: list[Marker] = []
        adopted: list[_Child] = []
        for child in pending:
            check()
            marker = Marker(StateKind.SUBMITTED, child.placement, child.key, child.priority, 0, INIT_REF)
            staged = f"{child.destination}/{PRIVATE_DIR}/{STAGED_MARKER}"
            try:
                # The staged marker travelled with the payload and is renamed once, by whichever run of
                # this commit gets there first; gone, it was published (and may be registered since).
                fs.rename(staged, store.marker_path(marker), durable=False)
                created.append(marker)
                adopted.append(child)
            except FileNotFoundError:
                if _unstaged(store, child) and not store.locate(child.placement, str(child.key)):
                    created.append(store.create_submitted(child.placement, child.key, child.priority))
            except FileExistsError:
                pass  # the generation-0 marker is there already
        if durable:
            # Every pending child's marker directory: a crashed run may have renamed a marker it never synced.
            fs.fsync_dirs(markers)
        if durable and adopted:
            # The staged names leave the payloads for good before the ledger says so: a staged marker
            # surviving beside its published one would be published a second time by a replay.
            fs.fsync_dirs(sorted({f"{child.destination}/{PRIVATE_DIR}" for child in adopted}))
        for child in pending:
            fs.write_atomic(child.ledger, b"", durable=False)
        if durable:
            fs.fsync_dir(posixpath.dirname(pending[0].ledger))
        return created


def plan_children(store: Store, control: str, outcome: Outcome, parent: Marker, *, attempt_id: str) -> ChildPlan:
    """Check every child ``outcome`` spawns against the workspace; :class:`ChildrenError` on the first clash.

    Nothing is written, except that after a clash the payloads a crashed run of
    this same commit had already moved are moved back into the outcome.
    """
    fs, layout = store.fs, store.layout
    anchor = posixpath.dirname(control)
    ledger_dir = f"{control}/commit/children"
    ids_at: dict[str, set[str]] = {}
    seen: set[str] = set()
    children: list[_Child] = []
    reservations: list[_Child] = []  # every child's reservation, released again should the outcome be refused
    problems: list[str] = []
    for spawned in outcome.spawned:
        label, key, placement = spawned["label"], JobKey.parse(spawned["job_key"]), spawned["placement"]
        who = f"child {label!r}"
        source = f"{control}/outcome.ready/children/{spawned['payload']}"
        destination = layout.payload(placement, str(key))
        ledger = f"{ledger_dir}/{key.job_id}"
        if key.job_id in seen:
            problems.append(f"{who}: job id {key.job_id} is spawned twice by this outcome")
            continue
        seen.add(key.job_id)
        if key.job_id == parent.job_id:
            problems.append(f"{who}: job id {key.job_id} is the spawning job's own")
            continue
        link = {"job_id": parent.job_id, "job_key": str(parent.key), "placement": parent.placement,
                "label": label, "attempt_id": attempt_id}
        reservation = Reservation(key.job_id, str(key), placement, "spawn", parent=link)
        base = _Child(label, key, placement, source, destination, ledger, 0, False, reservation)
        reservations.append(base)
        try:
            refuse_links(fs, anchor, ledger, f"{source}/{JOB_FILE}", f"{source}/{PRIVATE_DIR}/{PARENT_FILE}",
                         f"{source}/{PRIVATE_DIR}/{STAGED_MARKER}")
        except UntrustedLink as error:
            problems.append(f"{who}: {error}")
            continue
        if fs.exists(ledger):
            continue  # created by a crashed run of this commit
        problem: str | None = None
        priority = 0
        for _read in range(2):
            # Read twice when the first says "not placed": a concurrent run of this same commit may have
            # moved the payload (and published its marker) between the reads of the first round.
            creator = _creator(store, destination)
            if creator is not None:
                break
            problem, priority = _fresh(store, spawned, placement, reservation, source, ids_at)
            if problem is None:
                break
        if creator is not None:
            if _by_this_outcome(creator, parent, attempt_id, label):
                children.append(attrs.evolve(base, priority=_priority(store, destination), in_place=True))
            else:
                problems.append(f"{who}: job {key} at {placement} already exists ({_origin(creator)}); "
                                "a spawn must name a new job id")
        elif problem is not None:
            problems.append(f"{who}: {problem}")
        else:
            children.append(attrs.evolve(base, priority=priority))
    if problems:
        _withdraw(store, [child for child in children if child.in_place], reservations)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ChildrenError(problems[0] + more)
    return ChildPlan(store, parent, attempt_id, tuple(children))


def _fresh(store: Store, spawned: dict[str, Any], placement: str, reservation: Reservation, source: str,
           ids_at: dict[str, set[str]]) -> tuple[str | None, int]:
    """Why a child not yet in place cannot be created (``None``: it can), and its priority."""
    job_id = reservation.job_id
    if store.fs.lstat(source) is None:
        return f"its payload {spawned['payload']} is not in the outcome", 0
    used = _job_id_in_use(store, job_id, placement, ids_at)
    if used is not None:
        return (f"job id {job_id} ({reservation.job_key} at {placement}) names an existing job ({used}); "
                "a spawn must name a new job id"), 0
    try:
        check_job_id(store.fs, store.layout, reservation)  # a job at any placement, run or not
    except JobIdTaken as taken:
        return f"{taken}; a spawn must name a new job id", 0
    try:
        return None, _priority(store, source)
    except FileNotFoundError:
        return f"its payload {spawned['payload']} is not in the outcome", 0


def _unstaged(store: Store, child: _Child) -> bool:
    """Whether the payload in place was placed without a staged marker (by a manager before staging)."""
    creator = _creator(store, child.destination)
    return creator is not None and creator.get("staged_marker") is not True


def _priority(store: Store, payload: str) -> int:
    path = f"{payload}/{JOB_FILE}"
    return parse_job_bytes(store.fs.read_document(path), path).priority


def _creator(store: Store, destination: str) -> dict[str, Any] | None:
    """The parent record of the payload at ``destination`` (``{}`` when it has none); ``None`` if absent."""
    if store.fs.lstat(destination) is None:
        return None
    path = f"{destination}/{PRIVATE_DIR}/{PARENT_FILE}"
    try:
        return codec.decode_object(store.fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        return {}


def _by_this_outcome(creator: dict[str, Any], parent: Marker, attempt_id: str, label: str) -> bool:
    if creator.get("job_id") != parent.job_id:
        return False
    if "attempt_id" not in creator:  # written before parent.json named the attempt
        return creator.get("label") == label
    return creator.get("attempt_id") == attempt_id


def _origin(creator: dict[str, Any]) -> str:
    if not creator.get("job_id"):
        return "not spawned by this job"
    attempt = f", attempt {creator['attempt_id']}" if creator.get("attempt_id") else ""
    return f"spawned by job {creator.get('job_key') or creator['job_id']}{attempt}"


def _job_id_in_use(store: Store, job_id: str, placement: str, ids_at: dict[str, set[str]]) -> str | None:
    """What shows ``job_id`` belongs to a job already: a marker at ``placement``, or the job's own directories.

    A job id is global, but the markers are read only at the child's placement
    (one listing per kind, shared by the children there): a job elsewhere is
    found by the attempt, workdir, data and join directories it has once claimed.
    """
    known = ids_at.get(placement)
    if known is None:
        known = ids_at[placement] = set()
        for kind in StateKind:
            for entry in store.fs.scandir(f"{store.layout.kind_dir(kind)}/{placement}"):
                if entry.is_dir:
                    continue
                try:
                    known.add(Marker.parse(kind, placement, entry.name).job_id)
                except MarkerNameError:
                    continue
    if job_id in known:
        return f"a marker of job {job_id} is at {placement}"
    trace = job_id_traces(store.fs, store.layout, job_id)
    return None if trace is None else f"{trace} exists"


def _withdraw(store: Store, placed: Sequence[_Child], reserved: Sequence[_Child] = ()) -> None:
    """Undo what this outcome made of the children no marker names yet.

    The payloads in ``placed`` go back into the outcome; the ids of ``reserved`` are
    released where the reservation names this attempt's child (a retry may spawn them again).
    """
    for child in placed:
        if store.locate(child.placement, str(child.key)):
            continue
        try:
            store.fs.rename(child.destination, child.source, durable=store.config.durable)
        except (FileExistsError, FileNotFoundError):
            continue
    for child in reserved:
        if not store.locate(child.placement, str(child.key)):
            release_job_id(store.fs, store.layout, child.reservation)


def _nothing() -> None:
    """No checkpoint between the steps (a caller that holds nothing to heartbeat)."""


def _make_dirs(fs: Filesystem, directories: Sequence[str], *, durable: bool) -> None:
    """Create ``directories`` (and their parents); when ``durable``, each new name's parent is synced once."""
    wanted = sorted(set(directories))
    missing: set[str] = set()
    if durable:
        for directory in wanted:
            current = directory
            while current != posixpath.dirname(current) and fs.lstat(current) is None:
                missing.add(current)
                current = posixpath.dirname(current)
    for directory in wanted:
        fs.makedirs(directory, durable=False)
    if missing:
        fs.fsync_dirs(sorted({posixpath.dirname(path) for path in missing}))


def _each(sync: Callable[[Sequence[str]], None], paths: Sequence[str]) -> None:
    """``sync(paths)`` as one group; should a name be gone (a concurrent applier moved its payload), each
    remaining one alone."""
    try:
        sync(paths)
    except FileNotFoundError:
        for path in paths:
            try:
                sync([path])
            except FileNotFoundError:
                continue  # that payload is another applier's to sync now


def _read(fs: Filesystem, path: str) -> bytes | None:
    try:
        return fs.read_document(path)
    except OSError:
        return None


def _remove(fs: Filesystem, path: str) -> None:
    try:
        fs.remove(path)
    except FileNotFoundError:
        pass
