"""The transfer ledger: ``.httk-workflow/transfers/<transfer-id>/`` on each side of a transfer.

A ledger is a directory of *slots*, each one small document published once with
``write_new`` (durable in a durable workspace): ``steps/<n>.json``. A slot that
two outcomes compete for holds whichever was published first, so the slot is
the fence between them: at the source, slot 4 holds ``sent`` or ``rolled_back``
(a transfer that was never sent may be rolled back; one that was sent may not,
until the destination decides), and at the destination slot 2 holds
``imported`` or ``rolled_back`` (the decision: after ``imported`` an import only
goes forward). The current step is the one in the highest published slot.

Source: 1 planned, 2 detached, 3 bundled, 4 sent | rolled_back,
5 acknowledged | rolled_back (the destination's decision), 6 retired | rolled_back.
Destination: 1 received, 2 imported | rolled_back, 3 acknowledged | rolled_back.
Slot 6 at the source and slot 3 at the destination are final.
Spec: 000 "Running on a remote", "Freeing disk on a quota'd filesystem".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .. import codec
from ..domain.lifecycle import LEAVING_EVENTS, Event
from ..ports import Clock, Filesystem
from .layout import Layout

if TYPE_CHECKING:
    from .workspaces import WorkspaceHandle

LEDGER_FORMAT = "httk-workflow-transfer-ledger"
STEP_FORMAT = "httk-workflow-transfer-step"
SOURCE = "source"
DESTINATION = "destination"
ROLES = (SOURCE, DESTINATION)
ROLLED_BACK = "rolled_back"
#: The slots of each role, in order, with the steps each may hold.
SLOTS: dict[str, tuple[tuple[str, ...], ...]] = {
    SOURCE: (
        ("planned",),
        ("detached",),
        ("bundled",),
        ("sent", ROLLED_BACK),
        ("acknowledged", ROLLED_BACK),
        ("retired", ROLLED_BACK),
    ),
    DESTINATION: (("received",), ("imported", ROLLED_BACK), ("acknowledged", ROLLED_BACK)),
}
#: What must be published before a step goes into its slot: (slots, steps) one of which holds one of.
REQUIRES: dict[str, dict[tuple[int, str], tuple[tuple[int, ...], tuple[str, ...]] | None]] = {
    SOURCE: {
        (1, "planned"): None,
        (2, "detached"): ((1,), ("planned",)),
        (3, "bundled"): ((2,), ("detached",)),
        (4, "sent"): ((3,), ("bundled",)),
        # Never sent: a plan may be rolled back however far its detaching and bundling got.
        (4, ROLLED_BACK): ((1,), ("planned",)),
        (5, "acknowledged"): ((4,), ("sent",)),
        (5, ROLLED_BACK): ((4,), ("sent",)),
        (6, "retired"): ((5,), ("acknowledged",)),
        (6, ROLLED_BACK): ((4, 5), (ROLLED_BACK,)),
    },
    DESTINATION: {
        (1, "received"): None,
        (2, "imported"): ((1,), ("received",)),
        (2, ROLLED_BACK): None,
        (3, "acknowledged"): ((2,), ("imported",)),
        (3, ROLLED_BACK): ((2,), (ROLLED_BACK,)),
    },
}
_TRANSFER_ID = re.compile(r"^t-[0-9a-f]{12}$")


class LedgerError(ValueError):
    """A ledger that is missing, malformed, or asked for a step out of order; the message names it."""


def transfers_dir(layout: Layout) -> str:
    return f"{layout.control}/transfers"


def check_transfer_id(transfer_id: str) -> str:
    if not isinstance(transfer_id, str) or not _TRANSFER_ID.match(transfer_id):
        raise LedgerError(f"invalid transfer id {transfer_id!r}: expected t- and 12 hex digits")
    return transfer_id


def slot_of(role: str, step: str, after: int = 0) -> int:
    """The first slot (1-based) past ``after`` that may hold ``step``."""
    for number, steps in enumerate(SLOTS[role], start=1):
        if number > after and step in steps:
            return number
    raise LedgerError(f"a {role} ledger has no step {step!r} after slot {after}")


class Ledger:
    """One side's ledger of one transfer, through the filesystem port."""

    def __init__(
        self,
        fs: Filesystem,
        layout: Layout,
        transfer_id: str,
        role: str,
        *,
        durable: bool,
        clock: Clock,
        on_record: Callable[[str, str], None] | None = None,
    ) -> None:
        if role not in ROLES:
            raise LedgerError(f"unknown ledger role {role!r}")
        self.fs = fs
        self.transfer_id = check_transfer_id(transfer_id)
        self.role = role
        self.durable = durable
        self.clock = clock
        self.directory = f"{transfers_dir(layout)}/{transfer_id}"
        self._on_record = on_record

    # -- paths -------------------------------------------------------------------------------
    @property
    def header_file(self) -> str:
        return f"{self.directory}/ledger.json"

    @property
    def bundle_dir(self) -> str:
        return f"{self.directory}/bundle"

    def slot_file(self, number: int) -> str:
        return f"{self.directory}/steps/{number}.json"

    # -- header ------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.fs.exists(self.header_file)

    def create(self, details: dict[str, Any]) -> dict[str, Any]:
        """Publish ``ledger.json`` (role, id, and what the caller records); an existing header wins."""
        header = {"format": LEDGER_FORMAT, "format_version": 1, "transfer_id": self.transfer_id,
                  "role": self.role, "created_at": self.clock.now(), **details}
        self.fs.makedirs(f"{self.directory}/steps", durable=self.durable)
        try:
            self.fs.write_new(self.header_file, codec.encode(header), durable=self.durable)
        except FileExistsError:
            return self.header()
        return header

    def header(self) -> dict[str, Any]:
        try:
            document = codec.decode_object(self.fs.read_document(self.header_file), self.header_file)
        except FileNotFoundError:
            raise LedgerError(f"transfer {self.transfer_id}: no {self.role} ledger at {self.directory}") from None
        if document.get("format") != LEDGER_FORMAT or document.get("role") != self.role:
            raise LedgerError(f"{self.header_file}: not a {self.role} transfer ledger")
        return document

    # -- slots -------------------------------------------------------------------------------
    def read_slot(self, number: int) -> dict[str, Any] | None:
        path = self.slot_file(number)
        try:
            return codec.decode_object(self.fs.read_document(path), path)
        except FileNotFoundError:
            return None

    def record(self, step: str, details: dict[str, Any] | None = None, *, slot: int | None = None) -> dict[str, Any]:
        """Publish ``step`` in its slot (``slot`` picks one of several) and return what the slot holds.

        The slot may already hold another step published first (the fence): the caller
        compares the returned ``step``. Earlier slots must be filled: the steps are ordered.
        """
        number = slot if slot is not None else slot_of(self.role, step)
        if step not in SLOTS[self.role][number - 1]:
            raise LedgerError(f"slot {number} of a {self.role} ledger cannot hold {step!r}")
        existing = self.read_slot(number)
        if existing is not None:
            return existing
        needed = REQUIRES[self.role][(number, step)]
        if needed is not None and not self._holds(*needed):
            raise LedgerError(f"transfer {self.transfer_id}: {self.role} step {step} before {' or '.join(needed[1])}")
        document = {"format": STEP_FORMAT, "format_version": 1, "transfer_id": self.transfer_id,
                    "role": self.role, "slot": number, "step": step, "at": self.clock.now(), **(details or {})}
        try:
            self.fs.write_new(self.slot_file(number), codec.encode(document), durable=self.durable)
        except FileExistsError:
            existing = self.read_slot(number)
            if existing is None:
                raise
            return existing
        if self._on_record is not None:
            self._on_record(self.role, step)
        return document

    def _holds(self, slots: tuple[int, ...], steps: tuple[str, ...]) -> bool:
        """Whether one of ``slots`` holds one of ``steps``."""
        return any((self.read_slot(number) or {}).get("step") in steps for number in slots)

    def steps(self) -> list[dict[str, Any]]:
        """Every published slot, in slot order."""
        out = []
        for number in range(1, len(SLOTS[self.role]) + 1):
            document = self.read_slot(number)
            if document is not None:
                out.append(document)
        return out

    def state(self) -> dict[str, Any]:
        """``{transfer_id, role, step, final, steps}``; ``step`` is ``None`` before the first slot."""
        steps = self.steps()
        last = steps[-1] if steps else None
        final = last is not None and last["slot"] == len(SLOTS[self.role])
        return {
            "transfer_id": self.transfer_id,
            "role": self.role,
            "step": last["step"] if last else None,
            "slot": last["slot"] if last else 0,
            "final": final,
            "rolled_back": any(step["step"] == ROLLED_BACK for step in steps),
            "steps": [{"slot": step["slot"], "step": step["step"], "at": step.get("at")} for step in steps],
        }


def iter_ledgers(fs: Filesystem, layout: Layout) -> Iterator[tuple[str, str]]:
    """``(transfer id, role)`` of every ledger of the workspace; an unreadable header is skipped."""
    for entry in sorted(fs.scandir(transfers_dir(layout)), key=lambda item: item.name):
        if not entry.is_dir or not _TRANSFER_ID.match(entry.name):
            continue
        path = f"{entry.path}/ledger.json"
        try:
            role = codec.decode_object(fs.read_document(path), path).get("role")
        except (OSError, codec.DocumentError):
            continue
        if role in ROLES:
            yield entry.name, str(role)


def resume_command(source: str, destination: str) -> str:
    """The command that finishes an unfinished transfer from ``source`` to ``destination`` (as the user names them)."""
    return f"httk workflow transfer {source} {destination} --resume"


def unfinished_sources(fs: Filesystem, layout: Layout, clock: Clock) -> list[dict[str, Any]]:
    """Every transfer this workspace is the source of that has a plan but no final step, read only.

    Each is ``{transfer_id, step, destination, jobs}`` (``destination`` as its command
    named it, ``jobs`` the planned job keys). Its jobs stay ``transferring`` until the
    transfer is finished: a killed command leaves it so, and only running it again (or
    with ``--resume``) settles it. A command still running shows here as well.

    A ledger that does not read is listed with its ``problem`` (and no jobs) instead of
    stopping the listing: status reports damage, it does not refuse because of it.
    """
    out: list[dict[str, Any]] = []
    for transfer_id, role in iter_ledgers(fs, layout):
        if role != SOURCE:
            continue
        ledger = Ledger(fs, layout, transfer_id, SOURCE, durable=False, clock=clock)
        try:
            state = ledger.state()
            if state["final"] or state["step"] is None:
                continue  # never planned: no job was touched
            jobs = planned_keys(ledger.read_slot(1), ledger.slot_file(1))
        except (LedgerError, OSError, codec.DocumentError) as error:
            out.append({"transfer_id": transfer_id, "step": None, "destination": None, "jobs": [],
                        "problem": " ".join(str(error).split())})
            continue
        try:
            destination = (ledger.header().get("destination") or {}).get("label")
        except (LedgerError, OSError, codec.DocumentError):
            destination = None
        out.append({"transfer_id": transfer_id, "step": state["step"], "destination": destination, "jobs": jobs})
    return out


def departed(fs: Filesystem, layout: Layout, clock: Clock, selector: str) -> dict[str, Any] | None:
    """The retired transfer that last took the job ``selector`` names away from here, if one did; read only.

    ``{transfer_id, job_key, destination}`` (``destination`` as its command named it, or
    ``None``); ``selector`` is a job uuid, a ``tag--uuid`` key or a prefix of either. A job
    that went away, came back and went again has several: the newest says where it is now.
    An unreadable ledger is passed over: this answers "where did it go", not "is it whole".
    """
    wanted = selector.strip().lower()
    found: tuple[float, dict[str, Any]] | None = None
    for transfer_id, role in iter_ledgers(fs, layout):
        if role != SOURCE:
            continue
        ledger = Ledger(fs, layout, transfer_id, SOURCE, durable=False, clock=clock)
        try:
            if ledger.state()["step"] != "retired":
                continue
            header, jobs = ledger.header(), (ledger.read_slot(1) or {}).get("jobs") or []
        except (LedgerError, OSError, codec.DocumentError):
            continue
        for job in jobs if isinstance(jobs, list) else []:
            if not isinstance(job, dict):
                continue
            key, job_id = str(job.get("job_key", "")), str(job.get("job_id", ""))
            if wanted and (key.startswith(wanted) or job_id.startswith(wanted)):
                created = float(header.get("created_at") or 0.0)
                if found is None or created > found[0]:
                    destination = (header.get("destination") or {}).get("label")
                    found = (created, {"transfer_id": transfer_id, "job_key": key,
                                       "destination": destination if isinstance(destination, str) else None})
    return found[1] if found else None


def planned_keys(step: Mapping[str, Any] | None, path: str) -> list[str]:
    """The job keys a recorded step (at ``path``) names in ``jobs``; none for a missing step or ``jobs``.

    Raises ``LedgerError`` when ``jobs`` is not a list of objects each with a string
    ``job_key``: a damaged step, which the callers report instead of guessing keys.
    """
    jobs = (step or {}).get("jobs")
    if jobs is None:
        return []
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        raise LedgerError(f"{path}: jobs is not a list of job objects")
    keys = [job.get("job_key") for job in jobs]
    for number, key in enumerate(keys, 1):
        if not isinstance(key, str) or not key:
            raise LedgerError(f"{path}: job {number} of jobs has no job_key")
    return keys


_STEP_FILE = re.compile(r"^[1-9][0-9]*\.json$")


def ledger_census(fs: Filesystem, layout: Layout, clock: Clock) -> Iterator[dict[str, Any]]:
    """Every ledger of the workspace that ``fsck`` names, read only, in transfer-id order.

    ``{transfer_id, path, problem}`` for one that does not read: a ``ledger.json`` that
    does not parse or is not this transfer's, a step that does not parse or does not fit
    its slot, or steps without a header (a transfer nothing can finish or roll back).
    A directory holding no header and no step is a creation under way (or one that died
    before it recorded anything) and is skipped, as is every settled ledger.

    ``{transfer_id, path, role, step, source, destination, jobs}`` (labels as the
    command named them, ``jobs`` the job keys in flight) for one that is unfinished and
    holds jobs: a source with a plan and no final step (its jobs stay ``transferring``),
    and a destination that decided ``imported`` but has not acknowledged (its jobs may
    be only partly placed here). A destination that received a bundle and decided
    nothing holds no job (they are still at the source) and is not named.
    """
    for entry in sorted(fs.scandir(transfers_dir(layout)), key=lambda item: item.name):
        if not entry.is_dir or not _TRANSFER_ID.match(entry.name):
            continue
        transfer_id, header_path = entry.name, f"{entry.path}/ledger.json"
        base = {"transfer_id": transfer_id, "path": entry.path}
        try:
            header = codec.decode_object(fs.read_document(header_path), header_path)
        except FileNotFoundError:
            if any(_STEP_FILE.match(step.name) for step in fs.scandir(f"{entry.path}/steps")):
                yield {**base, "problem": f"{header_path} is missing, but steps were recorded"}
            continue
        except (OSError, codec.DocumentError) as error:
            yield {**base, "problem": " ".join(str(error).split())}
            continue
        role = header.get("role")
        if header.get("format") != LEDGER_FORMAT or role not in ROLES or header.get("transfer_id") != transfer_id:
            yield {**base, "problem": f"{header_path} is not the ledger of transfer {transfer_id}"}
            continue
        ledger = Ledger(fs, layout, transfer_id, str(role), durable=False, clock=clock)
        try:
            steps = ledger.steps()
            for step in steps:
                if step.get("slot") not in range(1, len(SLOTS[ledger.role]) + 1) or \
                        step.get("step") not in SLOTS[ledger.role][int(step["slot"]) - 1]:
                    raise LedgerError(f"{ledger.directory}/steps: slot {step.get('slot')!r} holds "
                                      f"{step.get('step')!r}, which no {ledger.role} ledger records there")
            last = steps[-1] if steps else None
            if last is None or last["slot"] == len(SLOTS[ledger.role]):
                continue  # nothing recorded yet, or settled
            if ledger.role == SOURCE:
                jobs = planned_keys(ledger.read_slot(1), ledger.slot_file(1))
            elif last["step"] == "imported":
                jobs = planned_keys(last, ledger.slot_file(int(last["slot"])))
            else:
                continue  # received, or rolled back: every job is at the source
        except (LedgerError, OSError, codec.DocumentError) as error:
            yield {**base, "problem": " ".join(str(error).split())}
            continue
        source, destination = header.get("source") or {}, header.get("destination") or {}
        yield {**base, "role": ledger.role, "step": last["step"],
               "source": source.get("label") if isinstance(source, dict) else None,
               "destination": destination.get("label") if isinstance(destination, dict) else None,
               "jobs": jobs}


def held_by_transfer(fs: Filesystem, layout: Layout, frame: Mapping[str, Any] | None) -> bool:
    """Whether a job with this newest frame and no marker belongs to a transfer rather than being damage.

    It left: the frame is a ``transfer_retire`` (the job lives in another workspace now).
    It is not here yet, or never will be: the frame was written by an import
    (``transfer_import``, or one of the imported history frames) of a transfer this
    workspace's ledger has not acknowledged; the import places the marker itself, or
    was rolled back and the job stayed at its source. ``fsck`` must not restore such
    a marker, or the job would be in two workspaces.
    """
    if not frame:
        return False
    notes = frame.get("notes") if isinstance(frame.get("notes"), dict) else {}
    if frame.get("event") in {event.value for event in LEAVING_EVENTS}:
        return True
    transfer_id = None
    if frame.get("event") == Event.TRANSFER_IMPORT.value and isinstance(notes.get("transfer"), dict):
        transfer_id = notes["transfer"].get("id")
    elif isinstance(notes.get("imported"), dict):
        transfer_id = notes["imported"].get("transfer_id")
    if not isinstance(transfer_id, str) or not _TRANSFER_ID.match(transfer_id):
        return False
    path = f"{transfers_dir(layout)}/{transfer_id}/steps/{len(SLOTS[DESTINATION])}.json"
    try:
        final = codec.decode_object(fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        return True
    return final.get("step") != "acknowledged"


class TransferSide:
    """One workspace of a transfer in one ``role``; ``label`` is how the user named it (for messages)."""

    role: str

    def __init__(
        self, handle: WorkspaceHandle, label: str, *, on_record: Callable[[str, str], None] | None = None
    ) -> None:
        self.handle = handle
        self.fs = handle.fs
        self.store = handle.store
        self.layout = handle.layout
        self.label = label
        self._on_record = on_record

    def ledger(self, transfer_id: str) -> Ledger:
        return Ledger(self.fs, self.layout, transfer_id, self.role, durable=self.handle.durable,
                      clock=self.handle.ports.clock, on_record=self._on_record)
