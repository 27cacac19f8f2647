"""``job why`` and ``workspace managers``: why a job is where it is, and what serves the workspace.

The job side of every precondition comes from ``job.json``; the other side —
pools, capabilities, executors, prefixes — is read from the manifests live
managers publish, so a manager that is not running is reported as absent
rather than assumed. Read-only. Spec: 000 "Inspecting jobs", "Readiness".
"""

from __future__ import annotations

from typing import Any

from .. import codec
from ..domain import budgets
from ..domain.lifecycle import StateKind
from ..domain.scheduling import Offer, Requirements, mismatches
from ..domain.takeover import TakeoverObservation, decide_takeover
from ..ports import ProcessControl, ProcessIdentity
from .commit import counters_of, read_notes
from .markers import Marker
from .store import JobDamage
from .workspaces import WorkspaceHandle

FLAPPING_ATTEMPTS = 20


def managers(handle: WorkspaceHandle) -> list[dict[str, Any]]:
    """Every registered manager with its manifest, heartbeat age and liveness."""
    fs, now = handle.fs, handle.ports.clock.now()
    out = []
    for entry in sorted(fs.scandir(handle.layout.managers), key=lambda item: item.name):
        try:
            manifest = codec.decode_object(fs.read_bytes(f"{entry.path}/manager.json"), "manager.json")
        except (FileNotFoundError, codec.DocumentError):
            continue
        try:
            beat = codec.decode_object(fs.read_bytes(f"{entry.path}/heartbeat.json"), "heartbeat.json")
            age: float | None = max(0.0, now - float(beat["time"]))
            stopped = bool(beat.get("stopped"))
        except (FileNotFoundError, codec.DocumentError, KeyError, TypeError, ValueError):
            age, stopped = None, False
        lease = float(manifest.get("lease_seconds") or handle.policy["lease_seconds"])
        live = age is not None and age <= lease and not stopped
        out.append({**manifest, "heartbeat_age": age, "stopped": stopped, "live": live})
    return out


def offer_of(manager: dict[str, Any]) -> Offer:
    return Offer(
        pools=frozenset(manager.get("pools") or ()),
        capabilities=frozenset(manager.get("capabilities") or ()),
        executors=frozenset(manager.get("executors") or ()),
        placement_prefixes=tuple(manager.get("placement_prefixes") or ()),
    )


def why(handle: WorkspaceHandle, marker: Marker, process: ProcessControl | None = None) -> dict[str, Any]:
    """A diagnosis: ``{"job", "kind", "summary", "lines": [...]}``."""
    store = handle.store
    lines: list[str] = []
    report: dict[str, Any] = {"job": str(marker.key), "kind": marker.kind.value, "placement": marker.placement}
    try:
        view = store.read_job(marker)
    except JobDamage as damage:
        report["summary"] = f"the job's state frame is unreadable ({damage.code}); run 'httk workflow workspace fsck'"
        report["lines"] = [damage.message]
        return report
    frame, spec = view.frame, view.spec
    live = [manager for manager in managers(handle) if manager["live"]]
    kind = marker.kind
    if spec is None:
        lines.append(f"job.json is unreadable: {view.spec_error}")
    if kind == StateKind.SUBMITTED:
        summary = "submitted and not yet registered by any manager"
        executor = spec.executor if spec else "path"
        serving = [m["manager_id"] for m in live if executor in (m.get("executors") or ())]
        lines.append(f"live managers serving the {executor!r} executor: {', '.join(serving) or 'none'}")
    elif kind == StateKind.READY and spec is not None:
        requirements = Requirements(pool=spec.pool, capabilities=frozenset(spec.capabilities),
                                    executor=spec.executor, placement=marker.placement)
        lines.append(f"runner executor: {spec.executor}")
        lines.append(f"claim pool: {spec.pool}")
        lines.append(f"required capabilities: {', '.join(spec.capabilities) or 'none'}")
        lines.append("maintenance lock: none")
        decision = budgets.after_attempt(spec.retry_policy, counters_of(frame), failure=None, explicit_retry=True)
        within = decision.retry or frame.attempt_ordinal == 0
        lines.append(f"attempt budgets: {'within budget' if within else decision.reason}")
        accepting = []
        for manager in live:
            missing = mismatches(offer_of(manager), requirements)
            if missing:
                lines.append(f"manager {manager['manager_id']} does not accept it: "
                             + "; ".join(f"{item.kind} {item.value} ({item.advice})" for item in missing))
            else:
                accepting.append(manager["manager_id"])
        if not live:
            flags = f" --pool {spec.pool}" if spec.pool != "default" else ""
            flags += "".join(f" --capability {capability}" for capability in spec.capabilities)
            summary = f"ready; no manager is live: start one with 'httk workflow run{flags}'"
        elif accepting:
            summary = f"ready; accepted by live manager(s) {', '.join(accepting)}: it runs when a worker is free"
        else:
            summary = "ready, but no live manager accepts it (see the mismatches)"
    elif kind in (StateKind.CLAIMED, StateKind.RUNNING):
        summary, more = _owned(handle, frame, spec, process)
        lines.extend(more)
    elif kind == StateKind.COMMITTING:
        summary = "an outcome is being committed; any manager serving the executor resumes it if its owner stops"
        owner = (frame.owner or {}).get("manager_id")
        lines.append(f"committing manager: {owner}")
    elif kind == StateKind.WAITING:
        summary, more = _waiting(handle, frame)
        lines.extend(more)
    elif kind == StateKind.FAILED:
        failure = frame.failure or {}
        summary = f"failed: {failure.get('code')}: {failure.get('message')}"
        if spec is not None:
            fits = budgets.continue_fits(spec.retry_policy, counters_of(frame))
            lines.append("an operator 'continue' fits the retry budget" if fits.allowed
                         else f"an operator 'continue' does not fit: {fits.reason}")
        error = _last_error(handle, marker)
        if error:
            lines.append(f"error.json of the last attempt: {error}")
    elif kind == StateKind.PAUSED:
        summary = f"paused ({frame.reason or 'no reason recorded'}); resume with 'job request ... continue'"
    elif kind == StateKind.CANCELLING:
        process_host = (frame.process or {}).get("host")
        summary = f"being cancelled; a manager on host {process_host} verifies the process is gone"
    elif kind == StateKind.SUCCEEDED:
        summary = "succeeded; nothing to do"
    else:
        summary = f"{kind.value}; nothing to do"
    if kind in (StateKind.READY, StateKind.RUNNING, StateKind.FAILED, StateKind.CLAIMED):
        lines.append(
            f"{frame.total_attempts} attempts across {max(frame.activation_ordinal, 1)} activations at step "
            f"{frame.step!r}; {frame.unclean_exits} after unclean exits"
        )
        if spec is not None and spec.maximum_total_attempts is None and frame.total_attempts >= FLAPPING_ATTEMPTS:
            lines.append(f"flapping: {frame.total_attempts} attempts under an unlimited budget without progress")
    lines.extend(_requests(handle, marker))
    report["summary"] = summary
    report["lines"] = lines
    report["step"] = frame.step
    return report


def _owned(
    handle: WorkspaceHandle, frame: Any, spec: Any, process: ProcessControl | None
) -> tuple[str, list[str]]:
    owner = frame.owner or {}
    manager_id = owner.get("manager_id")
    known = {manager["manager_id"]: manager for manager in managers(handle)}
    manager = known.get(manager_id)
    age = manager.get("heartbeat_age") if manager else None
    lease = float(owner.get("lease_seconds") or handle.policy["lease_seconds"])
    lines = [f"owning manager: {manager_id} (heartbeat {'never' if age is None else f'{age:.0f}s'} ago, "
             f"lease {lease:.0f}s)"]
    if age is not None and age <= lease and not (manager or {}).get("stopped"):
        return f"{frame.kind.value} under live manager {manager_id}", lines
    recorded = frame.process or {}
    this_host = process.hostname() if process else ""
    alive = None
    if process is not None and recorded.get("pid"):
        alive = process.is_alive(ProcessIdentity(str(recorded.get("host")), int(recorded["pid"]),
                                                 recorded.get("start_ticks"), int(recorded.get("pgid") or 0)))
    verdict = decide_takeover(TakeoverObservation(
        kind=frame.kind, workdir_mode=spec.workdir_mode if spec else "persistent",
        recorded_host=str(recorded.get("host") or owner.get("host") or ""), this_host=this_host,
        process_alive=alive, outcome_published=False, heartbeat_age=float("inf") if age is None else age,
        lease_seconds=lease,
    ))
    lines.append(verdict.message)
    if verdict.takes_over:
        return f"{frame.kind.value} under an expired lease: the next manager recovers it ({verdict.rule})", lines
    return f"{frame.kind.value} under an expired lease, blocked: {verdict.message}", lines


def _waiting(handle: WorkspaceHandle, frame: Any) -> tuple[str, list[str]]:
    join = frame.join or {}
    notes = read_notes(handle.fs, handle.layout, frame.job_id)
    lines = [f"join: {join.get('when')}"
             + (f" (count {join.get('count')})" if join.get("count") else "")
             + f", then step {join.get('step')!r}"
             + (f", on_impossible {join.get('on_impossible')!r}" if join.get("on_impossible") else "")]
    blocking, unresolved = [], []
    for child in join.get("children", []):
        note = notes.get(child["job_id"])
        if note is not None:
            state = note["kind"]
        elif handle.fs.exists(handle.layout.payload(child["placement"], child["job_key"])):
            state = "active"
            blocking.append(child["label"])
        else:
            state = "cannot be resolved in this workspace"
            unresolved.append(child["label"])
        lines.append(f"child {child['label']} ({child['job_key']}): {state}")
    if join.get("first_unresolved_at") is not None:
        lines.append(f"first recorded unresolvable at {join['first_unresolved_at']:.0f} (epoch seconds); the job "
                     "fails with dependency_failure when --join-grace-seconds have passed since")
    summary = f"waiting on {len(blocking)} active child(ren)"
    if unresolved:
        summary += f"; {len(unresolved)} cannot be resolved here"
    return summary, lines


def _last_error(handle: WorkspaceHandle, marker: Marker) -> str | None:
    attempts = sorted(entry.path for entry in handle.fs.scandir(handle.layout.job_attempts(marker.job_id)))
    if not attempts:
        return None
    try:
        error = codec.decode_object(handle.fs.read_bytes(f"{attempts[-1]}/error.json"), "error.json")
    except (FileNotFoundError, codec.DocumentError):
        return None
    where = f" at {error['file']}:{error['line']}" if error.get("file") else ""
    return f"{error.get('exception', 'error')}: {error.get('message', '')}{where}"


def _requests(handle: WorkspaceHandle, marker: Marker) -> list[str]:
    lines = []
    for where in ("ready", "retired"):
        for entry in handle.fs.scandir(f"{handle.layout.requests}/{where}"):
            try:
                request = codec.decode_object(handle.fs.read_bytes(entry.path), entry.path)
            except (FileNotFoundError, codec.DocumentError):
                continue
            if request.get("job_id") != marker.job_id:
                continue
            if where == "ready":
                lines.append(f"pending request: {request.get('action')} by {request.get('operator')}")
            else:
                lines.append(f"retired request {request.get('action')}: {request.get('retired_reason')}")
    return lines
