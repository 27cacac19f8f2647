"""The request pass: a manager takes operator requests from ``requests/ready`` and applies them.

A request (published by :mod:`httk.workflow.operations.requests`) captures the
job's exact marker (kind, generation, record reference) when it is made; it
applies only while that marker is still the job's current one, so a delayed
request can never mutate a newer state. What it does is the domain's
:func:`~httk.workflow.domain.requests.plan_request` for that state: the client
refuses a request the plan says can never apply, and the manager applies the
same plan (or retires the request with the plan's reason). A request for an
executor this manager does not serve is left for a manager that does. Entries of
``requests/ready`` are served as a queue, a bounded number per tick, oldest file
first, and the requests of one tick are applied in publication order
(``created_at``, then name): of two requests against the same state the earlier
wins and the later is retired as stale. They are read without following a link or
blocking; anything that is not a request document is quarantined as it was
published, its reason in an audit record beside it. Serving an entry runs through the manager's one containment
(:func:`.containment.contained`): an unexpected error of any type quarantines that
entry as it is, with the reason in its audit record, and the pass goes on. Spec:
000 "Inspect and control".
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import attrs

from .. import codec
from ..domain.frames import OMIT_WHEN_NONE
from ..domain.lifecycle import StateKind
from ..domain.model import check_placement
from ..domain.requests import ACTIONS, plan_request
from ..ports import Entry, UnreadableDocument, Verifier
from ..protocol import one_of
from ..store.markers import Marker, MarkerNameError
from ..store.store import JobDamage
from .cancellation import Cancellation
from .commit import new_activation
from .containment import contained
from .context import TickContext
from .recovery import Recovery

log = logging.getLogger("httk.workflow.manager")
#: Requests read (or moved) per tick; the rest wait for the next tick, in round-robin order.
PER_TICK = 64


@attrs.frozen
class RequestDocument:
    """A request (``httk-workflow-request`` v1): one operator action pinned to the job's exact marker.

    ``signature`` is a detached signature over the canonical JSON of every other member.
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-request", 1)

    request_id: str
    action: Annotated[str, one_of(ACTIONS)]
    job_id: str
    job_key: str
    placement: str
    kind: str
    generation: int
    record_ref: str
    marker: str
    executor: str = "path"
    operator: str | None = None
    reason: str | None = None
    step: str | None = None
    force: bool = False
    created_at: float | None = None
    signature: dict[str, Any] | None = attrs.field(default=None, metadata={OMIT_WHEN_NONE: True})


def published(record: RequestDocument, mtime: float, name: str) -> tuple[float, str]:
    """The publication order of a ready request: its ``created_at``, then its entry name.

    ``created_at`` is the publisher's clock, taken as given (the codec already refuses a
    non-number, NaN and infinity); a request without one counts as published when its file
    was last written. Equal instants fall back to the name, so the order is total.
    """
    return (record.created_at if record.created_at is not None else mtime), name


@attrs.frozen
class RequestPass:
    """What one pass over ``requests/ready`` did."""

    #: A job transitioned.
    changed: bool = False
    #: Requests taken out of ``ready`` (applied, retired or quarantined): the queue moved.
    moved: int = 0
    #: Entries this manager may serve are still waiting beyond this tick's bound.
    pending: bool = False


class RequestProcessor:
    """Takes ready requests by rename and applies the domain's plan for each."""

    def __init__(self, ctx: TickContext, recovery: Recovery, cancellation: Cancellation, *,
                 verifier: Callable[[], Verifier | None] = lambda: None) -> None:
        self.ctx = ctx
        self.recovery = recovery
        self.cancellation = cancellation
        #: The verifier of signed requests, asked when one arrives (the composition root may wire it late).
        self.verifier = verifier
        self.fs = ctx.store.fs
        #: Ready entries this manager leaves where they are: requests for an executor it does not
        #: serve (a document never changes), or an entry it failed to move (logged once).
        self._left: set[str] = set()
        #: Each ready name's modification time, stat'ed once when first listed: an entry is
        #: renamed in whole and never rewritten, so a flood costs one lstat per entry, not per tick.
        self._mtimes: dict[str, float] = {}
        self.pending = False

    @property
    def _dir(self) -> str:
        return self.ctx.store.layout.requests

    def process(self) -> RequestPass:
        """Handle up to ``PER_TICK`` ready entries, the earliest published first.

        Entries are taken oldest file first (modification time, then name), so a flood
        beyond one tick is served as a queue; the entries of one tick are then applied
        in publication order (:func:`published`), so of two requests pinned to the same
        state the earlier one applies and the later one is retired as stale.
        """
        self._reclaim_orphans()
        queued: list[tuple[float, str, Entry]] = []
        present: set[str] = set()
        known, mtimes = self._mtimes, {}
        for entry in self.fs.scandir(f"{self._dir}/ready"):
            present.add(entry.name)
            mtime = known.get(entry.name)
            if mtime is None:
                info = self.fs.lstat(entry.path)
                if info is None:
                    continue  # it vanished (another manager took it)
                mtime = info.mtime
            mtimes[entry.name] = mtime  # a name no longer listed drops out
            if entry.name not in self._left:
                queued.append((mtime, entry.name, entry))
        self._left &= present
        self._mtimes = mtimes
        batch = heapq.nsmallest(PER_TICK, queued, key=lambda item: (item[0], item[1]))
        changed, moved = False, 0
        readable: list[tuple[tuple[float, str], Entry, RequestDocument, dict[str, Any]]] = []
        for mtime, name, entry in batch:
            # The manager's one containment: whatever goes wrong ends this entry alone, quarantined.
            read = contained(f"serving request entry {name}", lambda entry=entry: self._read(entry),
                             lambda reason, entry=entry: self._fault(entry, reason))
            if isinstance(read, tuple):
                readable.append((published(read[0], mtime, name), entry, *read))
            elif read is not None:
                moved += 1
                changed |= read
        readable.sort(key=lambda item: item[0])
        for _key, entry, record, request in readable:
            result = contained(f"serving request entry {entry.name}",
                               lambda entry=entry, record=record, request=request: self._take(entry, record, request),
                               lambda reason, entry=entry: self._fault(entry, reason))
            if result is not None:
                moved += 1
                changed |= result
        self.pending = len(queued) > len(batch)
        return RequestPass(changed=changed, moved=moved, pending=self.pending)

    def _read(self, entry: Entry) -> tuple[RequestDocument, dict[str, Any]] | bool | None:
        """One ready entry read: the request, else ``False`` once quarantined or ``None`` when it vanished."""
        if entry.is_symlink or not entry.is_file or not entry.name.endswith(".json"):
            # Publishers rename ``<request-id>.json`` files in; anything else is never opened.
            what = "a name without .json" if entry.is_file and not entry.is_symlink else "not a regular file"
            return self._quarantine_entry(entry.path, entry.name, f"not a request document ({what})")
        try:
            request = codec.decode_object(self.fs.read_document(entry.path), entry.path)
        except FileNotFoundError:
            return None
        except UnreadableDocument as refused:
            return self._quarantine_entry(entry.path, entry.name, f"not a request document: {refused.problem}")
        except OSError as error:
            return self._quarantine_entry(entry.path, entry.name, f"unreadable request entry: {error}")
        except codec.DocumentError as error:
            return self._quarantine_entry(entry.path, entry.name, f"unreadable request: {error}")
        try:
            record = codec.structure(request, RequestDocument, entry.path)
        except codec.DocumentError as error:
            return self._quarantine_entry(entry.path, entry.name, f"unreadable request: {error}", request)
        return record, request

    def _take(self, entry: Entry, record: RequestDocument, request: dict[str, Any]) -> bool | None:
        """Claim a read request and apply it; ``None`` when it stays (unserved, vanished), else whether a job moved."""
        ctx = self.ctx
        if record.executor not in ctx.offer.executors:
            self._left.add(entry.name)
            return None
        claimed = self._claimed(entry.name)
        try:
            self.fs.rename(entry.path, claimed, durable=ctx.handle.durable)
        except FileNotFoundError:
            return None  # another manager took it
        except FileExistsError:
            self._left.add(entry.name)  # never spin on it; a later manager reclaims ours
            log.warning("request %s: already claimed by this manager; left in ready", entry.name)
            return None
        return self._apply(claimed, entry.name, record, request)

    def _claimed(self, name: str) -> str:
        return f"{self._dir}/claimed/{self.ctx.manager_id}/{name}"

    def _fault(self, entry: Entry, reason: str) -> bool | None:
        """Serving ``entry`` raised: quarantine it as it is, from ``ready`` or from our claim, and never retry it.

        ``False`` (moved, no job changed) once quarantined; ``None`` when another actor moved it first.
        """
        self._left.add(entry.name)  # should the quarantine fail too, the entry is not spun on here
        claimed = self._claimed(entry.name)
        path = claimed if self.fs.lstat(claimed) is not None else entry.path
        moved = self._quarantine_entry(path, entry.name, reason)
        if moved is None:  # it had moved on (applied, say) before the error: nothing to quarantine, still said
            log.error("request entry %s: %s", entry.name, reason)
        return moved

    def _reclaim_orphans(self) -> None:
        """Requests claimed by a manager that stopped heartbeating go back to ready."""
        ctx = self.ctx
        for holder in self.fs.scandir(f"{self._dir}/claimed"):
            if holder.name == ctx.manager_id or not holder.is_dir:
                continue
            if not self.recovery.is_stale(holder.name):
                continue
            for entry in self.fs.scandir(holder.path):
                try:
                    self.fs.rename(entry.path, f"{self._dir}/ready/{entry.name}", durable=ctx.handle.durable)
                    log.info("request %s returned to ready from stale manager %s", entry.name, holder.name)
                except (FileNotFoundError, FileExistsError):
                    continue

    def _quarantine_entry(self, path: str, name: str, reason: str,
                          request: dict[str, Any] | None = None) -> bool | None:
        """Move an entry aside exactly as it was published, with an audit record ``<name>.audit.json`` beside it.

        The audit is created new (``<name>.<hex>.audit.json`` when that name is taken, as by
        an entry published under it); its ``quarantined_as`` names the entry it is about.

        The entry itself is never rewritten, so the operator sees the bytes that were
        published; ``request`` (a document that was read) lends its job and request ids to the audit.
        """
        ctx = self.ctx
        target = f"{self._dir}/quarantine/{name}"
        try:
            try:
                self.fs.rename(path, target, durable=ctx.handle.durable)
            except FileExistsError:
                target = f"{target}.{ctx.ids.new_hex(8)}"
                self.fs.rename(path, target, durable=ctx.handle.durable)
        except FileNotFoundError:
            return None  # someone else moved it
        audit: dict[str, Any] = {"entry": name, "quarantined_as": target.rsplit("/", 1)[-1],
                                 "quarantine_reason": reason, "quarantine_at": ctx.clock.now(),
                                 "quarantine_by": ctx.manager_id}
        for member in ("request_id", "job_id", "job_key", "action", "operator"):
            value = (request or {}).get(member)
            if isinstance(value, str):
                audit[member] = value
        # Create-new, never replace: another quarantined entry may be named exactly ``<name>.audit.json``.
        data = codec.encode(audit)
        try:
            self.fs.write_new(f"{target}.audit.json", data, durable=ctx.handle.durable)
        except FileExistsError:
            self.fs.write_new(f"{target}.{ctx.ids.new_hex(8)}.audit.json", data, durable=ctx.handle.durable)
        log.warning("request entry %s quarantined: %s", name, reason)
        return False

    def _move(self, path: str, where: str, name: str, reason: str, request: dict[str, Any]) -> None:
        """A read request to ``applied`` or ``retired``: the document with the reason, who and when added."""
        ctx = self.ctx
        record = {**request, f"{where}_reason": reason, f"{where}_at": ctx.clock.now(),
                  f"{where}_by": ctx.manager_id}
        self.fs.write_atomic(f"{self._dir}/{where}/{name}", codec.encode(record), durable=ctx.handle.durable)
        try:
            self.fs.remove(path)
        except FileNotFoundError:
            pass
        log.info("request %s %s: %s", request.get("request_id", name), where, reason)

    def _apply(self, path: str, name: str, record: RequestDocument, request: dict[str, Any]) -> bool:
        """Apply a claimed request; ``request`` is the document as read (signed, and kept where it is moved)."""
        ctx = self.ctx
        action, step = record.action, record.step
        try:
            marker = Marker.parse(record.kind, check_placement(record.placement), record.marker)
        except (MarkerNameError, ValueError):
            self._quarantine_entry(path, name, "the request does not name a marker", request)
            return False
        operator_key = None
        if record.signature is not None:
            unsigned = {key: value for key, value in request.items() if key != "signature"}
            try:
                verifier = self.verifier()
                if verifier is None:
                    raise ValueError("this manager has no signature verifier")
                operator_key = verifier.verify(codec.dumps(unsigned).encode("utf-8"), request["signature"])
            except ValueError as error:
                self._quarantine_entry(path, name, f"signature rejected: {error}", request)
                return False
        if self.fs.lstat(ctx.store.marker_path(marker)) is None:
            self._move(path, "retired", name,
                       f"job moved on from {marker.kind.value} generation {marker.generation}", request)
            return False
        try:
            view = ctx.store.read_job(marker)
        except JobDamage as damage:
            self._move(path, "retired", name, f"job state unreadable: {damage}", request)
            return False
        plan = plan_request(action, view.marker.kind, view.frame,
                            view.spec.retry_policy if view.spec is not None else None, step=step)
        if plan.event is None:
            self._move(path, "retired", name, plan.refusal, request)
            return False
        changes = dict(plan.changes)
        if plan.activation_step is not None:
            changes.update(new_activation(view.frame, ctx.ids, plan.activation_step, join=None, failure=None))
        if plan.takes_ownership:
            # The manager that fences the attempt owns the rest of the procedure.
            changes["owner"] = ctx.owner_record()
        audit = {"operator": record.operator, "reason": record.reason,
                 "request_id": record.request_id, "operator_key": operator_key}
        result = ctx.finish(marker, view.frame, plan.event, {**changes, **audit})
        if result is None:
            self._move(path, "retired", name, "lost the race to another transition", request)
            return False
        self._move(path, "applied", name, f"applied as {plan.event.value}", request)
        mine = ctx.running.get(view.marker.job_id)
        if mine is not None and result[0].kind == StateKind.RUNNING:
            # A deferred pause renamed our own running marker: keep watching it under its new name.
            mine.marker = result[0]
            mine.view = attrs.evolve(mine.view, marker=result[0], frame=result[1])
        if result[0].kind == StateKind.CANCELLING:
            self.cancellation.start(result[0], result[1])
        return True
