"""Creating the children an outcome spawns: verified first, created once, never over another job.

The runner names each child's job id, so the manager verifies the names before
it creates anything: a child whose payload name, marker or job id belongs to an
existing job (a second parent spawning the same id, a retried attempt spawning
its predecessor's child again, an id listed twice, a job at any placement
holding the id's workspace-wide reservation, :mod:`.job_ids`) refuses the whole
outcome, and nothing is created for it. What tells this outcome's own children
from another job after a crash is the parent and attempt recorded in each
child's id reservation and in its ``.httk-job/parent.json``.

Creation is crash-safe in four phases: every child's job id is reserved, every
payload is renamed into place with its ``submitted`` marker staged inside it (a
payload without a marker is seen by no manager), then each staged marker is
renamed into the state tree and ledgered. A replay redoes only what is not
ledgered, and a clash found midway (another job won an id or a name meanwhile)
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
from ..protocol import JOB_FILE, PRIVATE_DIR, parse_job_bytes
from ..store.job_ids import JobIdTaken, Reservation, check_job_id, job_id_traces, release_job_id, reserve_job_id
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
        """Reserve every child's job id, rename every payload into place, then publish and ledger each
        marker; the markers made now.

        Safe against a concurrent run of this same commit (a mistaken lease expiry): a payload
        or marker another applier of it placed meanwhile is recognized by its parent record
        and counted as placed, never as a clash. ``between`` is called before each child's
        rename and marker (a heartbeat, and the check that this manager still holds the commit).
        """
        fs, durable = self.store.fs, self.store.config.durable
        placed = [child for child in self.children if child.in_place]
        for child in self.children:
            try:
                # A reservation naming this attempt's child is a crashed run's: kept, not a clash.
                reserve_job_id(fs, self.store.layout, child.reservation, durable=durable)
            except JobIdTaken as taken:
                # Another job took the id since the plan: this outcome creates nothing after all.
                _withdraw(self.store, placed, self.children)
                raise ChildrenError(f"child {child.label!r}: {taken}; a spawn must name a new job id") from None
        for child in self.children:
            if child.in_place:
                continue
            if between is not None:
                between()
            if not self._place(child):
                # Something that reserves no id (a directory made by hand) took the name since the plan.
                _withdraw(self.store, placed, self.children)
                raise ChildrenError(
                    f"child {child.label!r}: job {child.key} at {child.placement} was created by another "
                    "job meanwhile; a spawn must name a new job id"
                )
            placed.append(child)
        created: list[Marker] = []
        for child in self.children:
            if between is not None:
                between()
            if fs.exists(child.ledger):
                continue  # a concurrent run of this commit published it
            marker = Marker(StateKind.SUBMITTED, child.placement, child.key, child.priority, 0, INIT_REF)
            try:
                # The staged marker travelled with the payload and is renamed once, by whichever run of
                # this commit gets there first; gone, it was published (and may be registered since).
                if self.store.adopt(f"{child.destination}/{PRIVATE_DIR}/{STAGED_MARKER}", marker):
                    created.append(marker)
                elif _unstaged(self.store, child) and not self.store.locate(child.placement, str(child.key)):
                    created.append(self.store.create_submitted(child.placement, child.key, child.priority))
            except FileExistsError:
                pass  # the generation-0 marker is there already
            fs.write_atomic(child.ledger, b"", durable=durable)
        return created

    def _place(self, child: _Child) -> bool:
        """Rename one payload into place; ``False`` when the name holds another job's payload."""
        fs, durable = self.store.fs, self.store.config.durable
        if fs.lstat(child.source) is not None:
            link = {**(child.reservation.parent or {}), "staged_marker": True}
            fs.write_atomic(f"{child.source}/{PRIVATE_DIR}/{PARENT_FILE}", codec.encode(link), durable=durable)
            staged = f"{child.source}/{PRIVATE_DIR}/{STAGED_MARKER}"
            info = fs.lstat(staged)
            if info is not None and not (info.is_file and info.size == 0):
                fs.rmtree(staged)  # only an empty file may become a marker
            try:
                fs.create_empty(staged, durable=durable)
            except FileExistsError:
                pass  # staged by a crashed run of this commit
            try:
                fs.rename(child.source, child.destination, durable=durable)
                return True
            except (FileExistsError, FileNotFoundError):
                pass  # another applier of this commit, or another job: the parent record tells
        creator = _creator(self.store, child.destination)
        if creator is None or not _by_this_outcome(creator, self.parent, self.attempt_id, child.label):
            return False
        if fs.lstat(f"{child.source}/{JOB_FILE}") is None:
            # The parent record written just as a concurrent applier moved the payload.
            fs.rmtree(child.source)
        return True


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
