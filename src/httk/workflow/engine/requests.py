"""The request pass: a manager takes operator requests from ``requests/ready`` and applies them.

A request (published by :mod:`httk.workflow.operations.requests`) captures the
job's exact marker (kind, generation, record reference) when it is made; it
applies only while that marker is still the job's current one, so a delayed
request can never mutate a newer state. What it does is the domain's
:func:`~httk.workflow.domain.requests.plan_request` for that state: the client
refuses a request the plan says can never apply, and the manager applies the
same plan (or retires the request with the plan's reason). A request for an
executor this manager does not serve is left for a manager that does. Entries of
``requests/ready`` are served round-robin, a bounded number per tick, and read
without following a link or blocking; anything that is not a request document is
quarantined. Serving an entry runs through the manager's one containment
(:func:`.containment.contained`): an unexpected error of any type quarantines that
entry as it is, with the reason in its audit record, and the pass goes on. Spec:
000 "Inspect and control".
"""

from __future__ import annotations

import bisect
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
        #: Round-robin cursor: the last name examined; the next pass starts after it.
        self._cursor = ""
        #: Ready entries this manager leaves where they are: requests for an executor it does not
        #: serve (a document never changes), or an entry it failed to move (logged once).
        self._left: set[str] = set()
        self.pending = False

    @property
    def _dir(self) -> str:
        return self.ctx.store.layout.requests

    def process(self) -> RequestPass:
        """Handle up to ``PER_TICK`` ready entries, continuing after the last one examined."""
        self._reclaim_orphans()
        entries = sorted(self.fs.scandir(f"{self._dir}/ready"), key=lambda entry: entry.name)
        present = {entry.name for entry in entries}
        self._left &= present
        candidates = [entry for entry in entries if entry.name not in self._left]
        names = [entry.name for entry in candidates]
        start = bisect.bisect_right(names, self._cursor)
        order = candidates[start:] + candidates[:start]
        batch = order[:PER_TICK]
        changed, moved = False, 0
        for entry in batch:
            # The manager's one containment: whatever goes wrong ends this entry alone, quarantined.
            result = contained(f"serving request entry {entry.name}", lambda entry=entry: self._serve(entry),
                               lambda reason, entry=entry: self._fault(entry, reason))
            if result is not None:
                moved += 1
                changed |= result
        if batch:
            self._cursor = batch[-1].name
        self.pending = len(order) > len(batch)
        return RequestPass(changed=changed, moved=moved, pending=self.pending)

    def _serve(self, entry: Entry) -> bool | None:
        """One ready entry: ``None`` when it stays (unserved, vanished), else whether a job changed."""
        ctx = self.ctx
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
            self._move(entry.path, "quarantine", entry.name, f"unreadable request: {error}", {})
            return False
        try:
            record = codec.structure(request, RequestDocument, entry.path)
        except codec.DocumentError as error:
            self._move(entry.path, "quarantine", entry.name, f"unreadable request: {error}", request)
            return False
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

    def _quarantine_entry(self, path: str, name: str, reason: str) -> bool | None:
        """Move an entry that is not a request document aside as it is, unread, with an audit record beside it."""
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
        audit = {"entry": name, "quarantine_reason": reason, "quarantine_at": ctx.clock.now(),
                 "quarantine_by": ctx.manager_id}
        self.fs.write_atomic(f"{target}.audit.json", codec.encode(audit), durable=ctx.handle.durable)
        log.warning("request entry %s quarantined: %s", name, reason)
        return False

    def _move(self, path: str, where: str, name: str, reason: str, request: dict[str, Any]) -> None:
        ctx = self.ctx
        record = {**request, f"{where}_reason": reason, f"{where}_at": ctx.clock.now(),
                  f"{where}_by": ctx.manager_id}
        self.fs.write_atomic(f"{self._dir}/{where}/{name}", codec.encode(record), durable=ctx.handle.durable)
        try:
            self.fs.remove(path)
        except FileNotFoundError:
            pass
        level = logging.WARNING if where == "quarantine" else logging.INFO
        log.log(level, "request %s %s: %s", request.get("request_id", name), where, reason)

    def _apply(self, path: str, name: str, record: RequestDocument, request: dict[str, Any]) -> bool:
        """Apply a claimed request; ``request`` is the document as read (signed, and kept where it is moved)."""
        ctx = self.ctx
        action, step = record.action, record.step
        try:
            marker = Marker.parse(record.kind, check_placement(record.placement), record.marker)
        except (MarkerNameError, ValueError):
            self._move(path, "quarantine", name, "the request does not name a marker", request)
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
                self._move(path, "quarantine", name, f"signature rejected: {error}", request)
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
