"""Job-id reservations: one exclusive name per job id across the whole workspace.

A job id is global: ``attempts/``, ``workdirs/``, ``data/`` and ``joins/`` are
keyed by it alone, whatever the job's placement, so two jobs sharing an id
would share all of them. The reservation ``.httk-workflow/ids/<first two
digits>/<job-id>`` is published exclusively and durably (a temp file, fsync, a
rename that never replaces) before anything else of the job is written: by
submission before the payload, by a spawn before the child's payload is renamed
into place, by a transfer import before the job's marker. A second job with the
same id is then refused wherever it is placed, even before the first has run.

A reservation holds the job's key and placement and, for a spawned child, the
parent and attempt that spawned it (``httk-workflow-job-id`` v1). One that
names the same job is a replay of a creation a crash interrupted, never a
clash. Reservations are never collected (``workspace gc`` leaves them): a
terminal job's id stays taken, since its data, joins and journal frames still
name it. Workspaces made before reservations have none: ``workspace fsck``
reports ``missing_id_reservation`` and ``--repair`` creates them, while
creation still checks the cheap traces (:func:`job_id_traces`) too.
Spec: docs/workflow_filesystem_api.md "Job ids".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from .. import codec
from ..domain.model import OMIT_WHEN_NONE, UUID_PATTERN
from ..ports import Filesystem, unreadable
from ..protocol import PRIVATE_DIR
from .layout import Layout

FORMAT = "httk-workflow-job-id"
#: Where a reservation came from (recorded for an operator reading it; it never decides anything).
ORIGINS = ("submission", "spawn", "import", "fsck")
#: The members of a spawned child's parent record that tell one spawning attempt from another.
_PARENT_IDENTITY = ("job_id", "attempt_id", "label")


@attrs.frozen
class Reservation:
    """What a reservation says: the job holding the id, and the attempt that spawned it, if any."""

    FORMAT: ClassVar[codec.Format] = codec.Format(FORMAT)

    job_id: str
    job_key: str
    placement: str
    origin: str = "submission"
    #: A spawned child's ``.httk-job/parent.json`` record (``job_id``, ``job_key``, ``attempt_id``, ``label``...).
    parent: dict[str, Any] | None = attrs.field(default=None, eq=False, hash=False, metadata={OMIT_WHEN_NONE: True})

    def same_job(self, other: Reservation) -> bool:
        """Whether ``other`` names this very job: same key and placement, spawned by the same attempt (or neither)."""
        return (self.job_key, self.placement, _parent_identity(self.parent)) == (
            other.job_key, other.placement, _parent_identity(other.parent))

    def describe(self) -> str:
        """``job KEY at PLACEMENT`` and, for a child, who spawned it."""
        text = f"job {self.job_key} at {self.placement}"
        if self.parent:
            attempt = f", attempt {self.parent['attempt_id']}" if self.parent.get("attempt_id") else ""
            text += f" (spawned by job {self.parent.get('job_key') or self.parent.get('job_id')}{attempt})"
        return text

    def to_json(self) -> dict[str, Any]:
        """The reservation document (``httk-workflow-job-id`` v1), through the one converter."""
        return codec.unstructure(self)

    @classmethod
    def from_json(cls, document: Mapping[str, Any], path: str) -> Reservation:
        """Read a reservation document; a malformed one raises :class:`~.codec.DocumentError` naming the member."""
        return codec.structure(dict(document), cls, path)


def _parent_identity(parent: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    return None if parent is None else tuple(parent.get(name) for name in _PARENT_IDENTITY)


class JobIdTaken(ValueError):
    """The id is reserved by another job (or by a reservation that cannot be read); the message is one line."""

    def __init__(self, job_id: str, path: str, holder: Reservation | None, problem: str = "") -> None:
        who = holder.describe() if holder is not None else f"an unreadable reservation ({problem})"
        super().__init__(f"job id {job_id} already belongs to {who}, reserved at {path}")
        self.job_id = job_id
        self.path = path
        self.holder = holder


def read_reservation(fs: Filesystem, layout: Layout, job_id: str) -> Reservation | None:
    """The reservation of ``job_id``, or ``None`` when there is none.

    Raises :class:`JobIdTaken` (holder ``None``) when the name holds something that is
    not a readable reservation: the id is taken all the same, by whatever put it there.
    """
    path = layout.id_reservation(job_id)
    try:
        data = fs.read_document(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise JobIdTaken(job_id, path, None, unreadable(path, error)) from None
    try:
        reservation = Reservation.from_json(codec.decode_object(data, path), path)
    except codec.DocumentError as error:
        raise JobIdTaken(job_id, path, None, str(error)) from None
    if reservation.job_id != job_id:
        raise JobIdTaken(job_id, path, None, f"it names job id {reservation.job_id}")
    return reservation


#: The origins whose reservation is made as the job is created here, so its time is the submission's.
_CREATING = ("submission", "spawn")


def submitted_at(fs: Filesystem, layout: Layout, job_id: str) -> float | None:
    """When ``job_id`` was submitted (or spawned) here: its reservation's time, published just before its payload.

    ``None`` for a job that arrived by transfer or whose reservation fsck recreated
    (neither time is the submission's), and for one without a readable reservation.
    """
    try:
        held = read_reservation(fs, layout, job_id)
    except (JobIdTaken, codec.DocumentError):
        return None
    if held is None or held.origin not in _CREATING:
        return None
    info = fs.lstat(layout.id_reservation(job_id))
    return info.mtime if info is not None else None


def check_job_id(fs: Filesystem, layout: Layout, wanted: Reservation) -> bool:
    """Whether ``wanted`` is reserved already (a replay); ``False`` when the id is free.

    Raises :class:`JobIdTaken` when another job holds it. Reads only.
    """
    held = read_reservation(fs, layout, wanted.job_id)
    if held is None:
        return False
    if not held.same_job(wanted):
        raise JobIdTaken(wanted.job_id, layout.id_reservation(wanted.job_id), held)
    return True


def reserve_job_id(fs: Filesystem, layout: Layout, wanted: Reservation, *, durable: bool) -> bool:
    """Reserve ``wanted.job_id`` for the job ``wanted`` names: the one call every creation of a job makes.

    Exclusive and, when ``durable``, synced before it returns. ``True`` when the
    reservation was made now; ``False`` when it names this same job already (a
    replay of a creation a crash interrupted). Raises :class:`JobIdTaken`, having
    written nothing, when another job holds the id.
    """
    path = layout.id_reservation(wanted.job_id)
    for _try in range(2):
        if check_job_id(fs, layout, wanted):
            return False
        try:
            fs.write_new(path, codec.encode(wanted.to_json()), durable=durable)
        except FileExistsError:
            continue  # another creation won the name between the check and the write: whose is it?
        return True
    raise JobIdTaken(wanted.job_id, path, None, "the name exists but does not read back")


def reserve_job_ids(
    fs: Filesystem, layout: Layout, wanted: Sequence[Reservation], *, durable: bool, writer: str,
    reserved: Callable[[Reservation], None] | None = None,
) -> None:
    """Reserve many fresh ids as one group commit; the names and bytes :func:`reserve_job_id` makes.

    ``writer`` names this writer's temps (the store's journal writer id): two writers
    reserving the same ids (two runs of one children commit) never share a temp.
    Durable: every reservation is written to a hidden temp sibling, the temps are synced
    together, each is renamed (never replacing) onto its name, and each bucket directory
    is synced once. So a name, once it exists, has its whole content, as with one
    reservation. Each id must be free (checked by the caller); one taken since raises
    :class:`JobIdTaken` after the earlier ones were made, each reported to ``reserved``
    as it is made so the caller can release them.
    """
    if not durable:
        for reservation in wanted:
            data = codec.encode(reservation.to_json())
            _create(fs, layout, reservation, lambda path, data=data: fs.write_new(path, data, durable=False))
            if reserved is not None:
                reserved(reservation)
        return
    temps = [_temp(layout, reservation, writer) for reservation in wanted]
    try:
        for reservation, temp in zip(wanted, temps, strict=True):
            # In place: the temp is this writer's alone, and only its synced whole is renamed.
            fs.write_staged(temp, codec.encode(reservation.to_json()), durable=False)
        fs.sync_trees(temps)
        for reservation, temp in zip(wanted, temps, strict=True):
            _create(fs, layout, reservation, lambda path, temp=temp: fs.rename(temp, path, durable=False))
            if reserved is not None:
                reserved(reservation)
    except Exception:
        for temp in temps:
            if fs.lstat(temp) is not None:  # written but not renamed: the batch stopped before it
                fs.remove(temp)
        raise
    fs.fsync_dirs(sorted({posixpath.dirname(layout.id_reservation(reservation.job_id)) for reservation in wanted}))


def _temp(layout: Layout, reservation: Reservation, writer: str) -> str:
    path = layout.id_reservation(reservation.job_id)
    return f"{posixpath.dirname(path)}/.{reservation.job_id}.bulk.{writer}"


def _create(fs: Filesystem, layout: Layout, reservation: Reservation, publish: Callable[[str], None]) -> None:
    """``publish(path)`` of one reservation; :class:`JobIdTaken` when the name exists (made since the check)."""
    path = layout.id_reservation(reservation.job_id)
    try:
        publish(path)
    except FileExistsError:
        held = None
        try:
            held = read_reservation(fs, layout, reservation.job_id)
        except JobIdTaken:
            pass
        raise JobIdTaken(reservation.job_id, path, held, "created while the batch was written") from None


def release_job_id(fs: Filesystem, layout: Layout, wanted: Reservation) -> None:
    """Remove the reservation of ``wanted`` if it names that job (undoing a creation that was refused)."""
    try:
        held = read_reservation(fs, layout, wanted.job_id)
    except JobIdTaken:
        return
    if held is not None and held.same_job(wanted):
        try:
            fs.remove(layout.id_reservation(wanted.job_id))
        except FileNotFoundError:
            pass


def job_id_traces(fs: Filesystem, layout: Layout, job_id: str) -> str | None:
    """A directory that shows ``job_id`` was used by a job already, if any (a cheap check for old workspaces).

    ``attempts/``, ``workdirs/``, ``data/`` and ``joins/`` are keyed by the job id alone,
    so a job that has been claimed once (or waited on children) left one of them.
    """
    for path in (layout.job_attempts(job_id), layout.persistent_workdir(job_id), layout.data_dir(job_id),
                 f"{layout.control}/joins/{job_id}"):
        if fs.lstat(path) is not None:
            return path
    return None


def missing_reservations(fs: Filesystem, layout: Layout, job_ids: Iterable[str], deadline: float) -> set[str]:
    """The ids of ``job_ids`` that have no reservation once the visibility deadline has passed.

    Every creation reserves before it publishes a marker, so a job met by its marker
    has its reservation unless it predates them; a lagging view is waited out once
    for the whole set, as fsck's other confirmations are.
    """
    pending = set(job_ids)

    def probe() -> bool | None:
        pending.difference_update([job_id for job_id in pending if fs.lstat(layout.id_reservation(job_id))])
        return True if not pending else None

    fs.retry_until(probe, deadline)
    return pending


def reservation_of(fs: Filesystem, layout: Layout, job_id: str, job_key: str, placement: str) -> Reservation:
    """The reservation an existing job should hold (``fsck --repair``): its parent record read from its payload."""
    path = f"{layout.payload(placement, job_key)}/{PRIVATE_DIR}/parent.json"
    try:
        parent: dict[str, Any] | None = codec.decode_object(fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        parent = None
    return Reservation(job_id, job_key, placement, "fsck", parent=parent)


def iter_reservations(fs: Filesystem, layout: Layout) -> Iterator[tuple[str, float]]:
    """``(job_id, mtime)`` of every reservation: the id buckets' regular files named by a job id.

    A bucket also holds the hidden temps of a reservation being written (``.<id>.bulk.<writer>``,
    ``.<id>.tmp.<hex>``, which a crash can leave behind): those are no job, and are
    what :func:`reservation_temps` lists.
    """
    for bucket in fs.scandir(layout.ids):
        for entry in fs.scandir(bucket.path):
            if UUID_PATTERN.match(entry.name) and entry.name.startswith(bucket.name):
                info = fs.lstat(entry.path)
                if info is not None and info.is_file:
                    yield entry.name, info.mtime


def reservation_temps(fs: Filesystem, layout: Layout, older_than: float) -> list[str]:
    """The hidden temps in the id buckets last written before ``older_than``: left by an interrupted reservation.

    A younger one may belong to a creation still under way, which renames it into
    place (or removes it) within moments; such a temp is not listed.
    """
    temps = []
    for bucket in fs.scandir(layout.ids):
        for entry in fs.scandir(bucket.path):
            if entry.name.startswith(".") and not entry.is_dir:
                info = fs.lstat(entry.path)
                if info is not None and info.mtime < older_than:
                    temps.append(entry.path)
    return sorted(temps)
