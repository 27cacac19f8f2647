"""Operator requests: published by the CLI, taken and applied by a manager.

A request captures the job's exact marker (kind, generation, record reference)
when it is made; it applies only while that marker is still the job's current
one, so a delayed request can never mutate a newer state. What it does is the
domain's :func:`~httk.workflow.domain.requests.plan_request` for that state: the
client refuses a request the plan says can never apply, and the manager applies
the same plan (or retires the request with the plan's reason). A request for an
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
from typing import TYPE_CHECKING, Any

import attrs

from .. import codec
from ..domain.lifecycle import StateKind
from ..domain.model import check_placement
from ..domain.requests import ACTIONS, RequestPlan, plan_request
from ..ports import Entry, Signer, UnreadableDocument
from ..store.markers import Marker, MarkerNameError
from ..store.store import JobDamage, JobView
from ..store.workspaces import WorkspaceHandle
from .commit import new_activation
from .containment import contained

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger("httk.workflow.manager")
REQUEST_FORMAT = "httk-workflow-request"
#: Requests read (or moved) per tick; the rest wait for the next tick, in round-robin order.
PER_TICK = 64


class RequestError(ValueError):
    """A request refused before publication; nothing was written."""


def plan_for(view: JobView, action: str, step: str | None) -> RequestPlan:
    """The domain's plan of ``action`` against the exact state ``view`` holds."""
    policy = view.spec.retry_policy if view.spec is not None else None
    return plan_request(action, view.marker.kind, view.frame, policy, step=step)


def publish_request(
    handle: WorkspaceHandle,
    view: JobView,
    action: str,
    *,
    operator: str,
    reason: str,
    step: str | None = None,
    force: bool = False,
    warn: Any = None,
    signer: Signer | None = None,
) -> dict[str, Any]:
    """Validate and publish one request (``requests/tmp`` → ``requests/ready``); returns it."""
    if action not in ACTIONS:
        raise RequestError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    if not operator:
        raise RequestError("--operator is required (who is asking), e.g. --operator \"$USER\"")
    if action == "override_step" and not step:
        raise RequestError("override_step needs --step STEP")
    if action != "override_step" and step is not None:
        raise RequestError("--step is only meaningful with override_step")
    # The request is pinned to this exact state, so a plan refused now is refused forever.
    plan = plan_for(view, action, step)
    if not plan.applies:
        raise RequestError(f"cannot {action} job {view.marker.key}: {plan.refusal}")
    if action == "override_step":
        recorded = view.frame.runner_steps
        if recorded is None:
            if warn:
                warn(f"note: job {view.marker.key} has no recorded runner_steps yet; {step!r} cannot be "
                     "pre-validated (the runner refuses it at the next attempt if it does not implement it)")
        elif step not in recorded:
            message = f"step {step!r} is not one of the recorded runner steps: {', '.join(recorded)}"
            if not force:
                raise RequestError(message + " (pass --force if the runner was changed to add it)")
            if warn:
                warn(f"note: {message}; publishing anyway because of --force")
    marker = view.marker
    request_id = handle.ports.ids.new_id()
    document = {
        "format": REQUEST_FORMAT,
        "format_version": 1,
        "request_id": request_id,
        "action": action,
        "job_id": marker.job_id,
        "job_key": str(marker.key),
        "placement": marker.placement,
        "kind": marker.kind.value,
        "generation": marker.generation,
        "record_ref": marker.ref,
        "marker": marker.name,
        "executor": view.spec.executor if view.spec is not None else "path",
        "operator": operator,
        "reason": reason,
        "step": step,
        "force": force,
        "created_at": handle.ports.clock.now(),
    }
    if signer is not None:
        # A detached signature over the canonical JSON of everything else: attribution, not authorization.
        document["signature"] = signer.sign(codec.dumps(document).encode("utf-8"))
    layout = handle.layout
    temp = f"{layout.requests}/tmp/{request_id}.json"
    handle.fs.write_new(temp, codec.encode(document), durable=handle.durable)
    handle.fs.rename(temp, f"{layout.requests}/ready/{request_id}.json", durable=handle.durable)
    return document


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

    def __init__(self, manager: Manager) -> None:
        self.m = manager
        #: Round-robin cursor: the last name examined; the next pass starts after it.
        self._cursor = ""
        #: Ready entries this manager leaves where they are: requests for an executor it does not
        #: serve (a document never changes), or an entry it failed to move (logged once).
        self._left: set[str] = set()
        self.pending = False

    @property
    def _dir(self) -> str:
        return self.m.layout.requests

    def process(self) -> RequestPass:
        """Handle up to ``PER_TICK`` ready entries, continuing after the last one examined."""
        self._reclaim_orphans()
        entries = sorted(self.m.fs.scandir(f"{self._dir}/ready"), key=lambda entry: entry.name)
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
        m = self.m
        if entry.is_symlink or not entry.is_file or not entry.name.endswith(".json"):
            # Publishers rename ``<request-id>.json`` files in; anything else is never opened.
            what = "a name without .json" if entry.is_file and not entry.is_symlink else "not a regular file"
            return self._quarantine_entry(entry.path, entry.name, f"not a request document ({what})")
        try:
            request = codec.decode_object(m.fs.read_document(entry.path), entry.path)
        except FileNotFoundError:
            return None
        except UnreadableDocument as refused:
            return self._quarantine_entry(entry.path, entry.name, f"not a request document: {refused.problem}")
        except OSError as error:
            return self._quarantine_entry(entry.path, entry.name, f"unreadable request entry: {error}")
        except codec.DocumentError as error:
            self._move(entry.path, "quarantine", entry.name, f"unreadable request: {error}", {})
            return False
        executor = request.get("executor", "path")
        if not isinstance(executor, str):
            self._move(entry.path, "quarantine", entry.name, "the request's executor is not a string", request)
            return False
        if executor not in m.offer.executors:
            self._left.add(entry.name)
            return None
        claimed = self._claimed(entry.name)
        try:
            m.fs.rename(entry.path, claimed, durable=m.handle.durable)
        except FileNotFoundError:
            return None  # another manager took it
        except FileExistsError:
            self._left.add(entry.name)  # never spin on it; a later manager reclaims ours
            log.warning("request %s: already claimed by this manager; left in ready", entry.name)
            return None
        return self._apply(claimed, entry.name, request)

    def _claimed(self, name: str) -> str:
        return f"{self._dir}/claimed/{self.m.id}/{name}"

    def _fault(self, entry: Entry, reason: str) -> bool | None:
        """Serving ``entry`` raised: quarantine it as it is, from ``ready`` or from our claim, and never retry it.

        ``False`` (moved, no job changed) once quarantined; ``None`` when another actor moved it first.
        """
        self._left.add(entry.name)  # should the quarantine fail too, the entry is not spun on here
        claimed = self._claimed(entry.name)
        path = claimed if self.m.fs.lstat(claimed) is not None else entry.path
        moved = self._quarantine_entry(path, entry.name, reason)
        if moved is None:  # it had moved on (applied, say) before the error: nothing to quarantine, still said
            log.error("request entry %s: %s", entry.name, reason)
        return moved

    def _reclaim_orphans(self) -> None:
        """Requests claimed by a manager that stopped heartbeating go back to ready."""
        m = self.m
        for holder in m.fs.scandir(f"{self._dir}/claimed"):
            if holder.name == m.id or not holder.is_dir:
                continue
            if not m.recovery.is_stale(holder.name):
                continue
            for entry in m.fs.scandir(holder.path):
                try:
                    m.fs.rename(entry.path, f"{self._dir}/ready/{entry.name}", durable=m.handle.durable)
                    log.info("request %s returned to ready from stale manager %s", entry.name, holder.name)
                except (FileNotFoundError, FileExistsError):
                    continue

    def _quarantine_entry(self, path: str, name: str, reason: str) -> bool | None:
        """Move an entry that is not a request document aside as it is, unread, with an audit record beside it."""
        m = self.m
        target = f"{self._dir}/quarantine/{name}"
        try:
            try:
                m.fs.rename(path, target, durable=m.handle.durable)
            except FileExistsError:
                target = f"{target}.{m.ids.new_hex(8)}"
                m.fs.rename(path, target, durable=m.handle.durable)
        except FileNotFoundError:
            return None  # someone else moved it
        audit = {"entry": name, "quarantine_reason": reason, "quarantine_at": m.clock.now(), "quarantine_by": m.id}
        m.fs.write_atomic(f"{target}.audit.json", codec.encode(audit), durable=m.handle.durable)
        log.warning("request entry %s quarantined: %s", name, reason)
        return False

    def _move(self, path: str, where: str, name: str, reason: str, request: dict[str, Any]) -> None:
        m = self.m
        record = {**request, f"{where}_reason": reason, f"{where}_at": m.clock.now(), f"{where}_by": m.id}
        m.fs.write_atomic(f"{self._dir}/{where}/{name}", codec.encode(record), durable=m.handle.durable)
        try:
            m.fs.remove(path)
        except FileNotFoundError:
            pass
        level = logging.WARNING if where == "quarantine" else logging.INFO
        log.log(level, "request %s %s: %s", request.get("request_id", name), where, reason)

    def _apply(self, path: str, name: str, request: dict[str, Any]) -> bool:
        m = self.m
        action = request.get("action")
        if request.get("format") != REQUEST_FORMAT or action not in ACTIONS:
            self._move(path, "quarantine", name, "not an httk-workflow-request version 1 document", request)
            return False
        try:
            if not all(isinstance(request.get(key), str) for key in ("kind", "placement", "marker")):
                raise ValueError("kind, placement and marker must be strings")
            marker = Marker.parse(request["kind"], check_placement(request["placement"]), request["marker"])
        except (MarkerNameError, KeyError, ValueError):
            self._move(path, "quarantine", name, "the request does not name a marker", request)
            return False
        step = request.get("step")
        if step is not None and not isinstance(step, str):
            self._move(path, "quarantine", name, "the request's step is not a string", request)
            return False
        operator_key = None
        if "signature" in request:
            unsigned = {key: value for key, value in request.items() if key != "signature"}
            try:
                if m.verifier is None:
                    raise ValueError("this manager has no signature verifier")
                operator_key = m.verifier.verify(codec.dumps(unsigned).encode("utf-8"), request["signature"])
            except ValueError as error:
                self._move(path, "quarantine", name, f"signature rejected: {error}", request)
                return False
        if m.fs.lstat(m.store.marker_path(marker)) is None:
            self._move(path, "retired", name,
                       f"job moved on from {marker.kind.value} generation {marker.generation}", request)
            return False
        try:
            view = m.store.read_job(marker)
        except JobDamage as damage:
            self._move(path, "retired", name, f"job state unreadable: {damage}", request)
            return False
        plan = plan_for(view, action, step)
        if plan.event is None:
            self._move(path, "retired", name, plan.refusal, request)
            return False
        changes = dict(plan.changes)
        if plan.activation_step is not None:
            changes.update(new_activation(view.frame, m.ids, plan.activation_step, join=None, failure=None))
        if plan.takes_ownership:
            # The manager that fences the attempt owns the rest of the procedure.
            changes["owner"] = m.owner_record()
        audit = {"operator": request.get("operator"), "reason": request.get("reason"),
                 "request_id": request.get("request_id"), "operator_key": operator_key}
        result = m.finish(marker, view.frame, plan.event, {**changes, **audit})
        if result is None:
            self._move(path, "retired", name, "lost the race to another transition", request)
            return False
        self._move(path, "applied", name, f"applied as {plan.event.value}", request)
        mine = m.running.get(view.marker.job_id)
        if mine is not None and result[0].kind == StateKind.RUNNING:
            # A deferred pause renamed our own running marker: keep watching it under its new name.
            mine.marker = result[0]
            mine.view = attrs.evolve(mine.view, marker=result[0], frame=result[1])
        if result[0].kind == StateKind.CANCELLING:
            m.cancellation.start(result[0], result[1])
        return True
