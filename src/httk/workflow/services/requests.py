"""Operator requests: published by the CLI, taken and applied by a manager.

A request captures the job's exact marker (kind, generation, record reference)
when it is made; it applies only while that marker is still the job's current
one, so a delayed request can never mutate a newer state. A request that can
never apply is retired with its reason; one for an executor this manager does
not serve is left for a manager that does. Spec: 000 "Inspect and control".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from .. import codec
from ..domain import budgets
from ..domain.lifecycle import TRANSITIONS, Event, StateKind
from ..domain.model import ValidationError, check_placement, check_step
from ..ports import Signer
from .commit import counters_of, new_activation
from .markers import Marker, MarkerNameError
from .store import JobDamage, JobView
from .workspaces import WorkspaceHandle

if TYPE_CHECKING:
    from .manager import Manager

log = logging.getLogger("httk.workflow.manager")
REQUEST_FORMAT = "httk-workflow-request"
ACTIONS = ("pause", "continue", "cancel", "override_step")
PER_TICK = 64


class RequestError(ValueError):
    """A request refused before publication; nothing was written."""


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
    if action == "override_step":
        if not step:
            raise RequestError("override_step needs --step STEP")
        if (view.marker.kind, Event.OPERATOR_OVERRIDE_STEP) not in TRANSITIONS:
            raise RequestError(
                f"the step of a {view.marker.kind.value} job cannot be overridden; pause it (or let it finish) first"
            )
        try:
            check_step(step)
        except ValidationError as error:
            raise RequestError(str(error)) from None
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
    elif step is not None:
        raise RequestError("--step is only meaningful with override_step")
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


class RequestProcessor:
    """Takes ready requests by rename and applies them through the transition table."""

    def __init__(self, manager: Manager) -> None:
        self.m = manager

    @property
    def _dir(self) -> str:
        return self.m.layout.requests

    def process(self) -> bool:
        """Handle up to ``PER_TICK`` ready requests; True when any job changed."""
        m = self.m
        changed = False
        self._reclaim_orphans()
        entries = sorted(m.fs.scandir(f"{self._dir}/ready"), key=lambda entry: entry.name)[:PER_TICK]
        for entry in entries:
            if not entry.name.endswith(".json"):
                continue
            try:
                request = codec.decode_object(m.fs.read_bytes(entry.path), entry.path)
            except FileNotFoundError:
                continue
            except codec.DocumentError as error:
                self._move(entry.path, "quarantine", entry.name, f"unreadable request: {error}", {})
                continue
            executor = request.get("executor", "path")
            if not isinstance(executor, str):
                self._move(entry.path, "quarantine", entry.name, "the request's executor is not a string", request)
                continue
            if executor not in m.offer.executors:
                continue
            claimed = f"{self._dir}/claimed/{m.id}/{entry.name}"
            try:
                m.fs.rename(entry.path, claimed, durable=m.handle.durable)
            except (FileNotFoundError, FileExistsError):
                continue
            changed |= self._apply(claimed, entry.name, request)
        return changed

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
        event, changes, problem = self._plan(view, action, request)
        if event is None:
            self._move(path, "retired", name, problem, request)
            return False
        audit = {"operator": request.get("operator"), "reason": request.get("reason"),
                 "request_id": request.get("request_id"), "operator_key": operator_key}
        result = m.finish(marker, view.frame, event, {**changes, **audit})
        if result is None:
            self._move(path, "retired", name, "lost the race to another transition", request)
            return False
        self._move(path, "applied", name, f"applied as {event.value}", request)
        mine = m.running.get(view.marker.job_id)
        if mine is not None and result[0].kind == StateKind.RUNNING:
            # A deferred pause renamed our own running marker: keep watching it under its new name.
            mine.marker = result[0]
            mine.view = attrs.evolve(mine.view, marker=result[0], frame=result[1])
        if result[0].kind == StateKind.CANCELLING:
            m.cancellation.start(result[0], result[1])
        return True

    def _plan(
        self, view: JobView, action: str, request: dict[str, Any]
    ) -> tuple[Event | None, dict[str, Any], str]:
        m = self.m
        kind, frame, spec = view.marker.kind, view.frame, view.spec
        if action == "pause":
            if (kind, Event.OPERATOR_PAUSE) in TRANSITIONS:
                return Event.OPERATOR_PAUSE, {}, ""
            if (kind, Event.DEFER_PAUSE) in TRANSITIONS:
                return Event.DEFER_PAUSE, {"pause_requested": True}, ""
            return None, {}, f"a {kind.value} job cannot be paused"
        if action == "continue":
            if kind == StateKind.FAILED:
                if spec is None:
                    return None, {}, "job.json is unreadable"
                verdict = budgets.continue_fits(spec.retry_policy, counters_of(frame))
                if not verdict.allowed:
                    return None, {}, f"continue does not fit the retry budget: {verdict.reason}"
                return Event.OPERATOR_CONTINUE, {"attempt_ordinal": 0, "failure": None}, ""
            if kind == StateKind.PAUSED:
                join = frame.join or {}
                if join and not join.get("resolved"):
                    # Paused while waiting: resume the same join rather than rerun the spawning step.
                    return Event.OPERATOR_RESUME_WAIT, {"pause_requested": False}, ""
                return Event.OPERATOR_CONTINUE, {"pause_requested": False}, ""
            if frame.pause_requested and (kind, Event.DEFER_PAUSE) in TRANSITIONS:
                return Event.DEFER_PAUSE, {"pause_requested": False}, ""
            return None, {}, f"a {kind.value} job has nothing to continue"
        if action == "cancel":
            if (kind, Event.OPERATOR_CANCEL) in TRANSITIONS:
                owner = None
                if kind == StateKind.RUNNING:
                    # The manager that fences the attempt owns the rest of the procedure.
                    owner = m.owner_record()
                return Event.OPERATOR_CANCEL, {"owner": owner}, ""
            return None, {}, f"a {kind.value} job cannot be cancelled"
        step = request.get("step")
        try:
            check_step(step or "")
        except ValidationError as error:
            return None, {}, str(error)
        if (kind, Event.OPERATOR_OVERRIDE_STEP) not in TRANSITIONS:
            return None, {}, f"the step of a {kind.value} job cannot be overridden"
        assert step is not None
        return Event.OPERATOR_OVERRIDE_STEP, new_activation(frame, m.ids, step, join=None, failure=None), ""
