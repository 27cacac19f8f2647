"""``job why`` and ``workspace managers``: why a job is where it is, and what serves the workspace.

The job side of every precondition comes from ``job.json``; the other side —
pools, capabilities, executors, prefixes — is read from the manifests live
managers publish, so a manager that is not running is reported as absent
rather than assumed. An owned job is judged by the observation builder and
takeover verdict the recovery pass uses (with the settings live managers here
published), and a waiting job by the waiting pass's own children
classification and join decision, so ``job why`` never says something a
manager will not do. Read-only. Spec: 000 "Inspecting jobs", "Readiness".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import codec
from ..attempt_records import RunnerErrorDocument
from ..domain import budgets
from ..domain.joins import DEFAULT_JOIN_GRACE_SECONDS, JoinAction, describe_condition
from ..domain.lifecycle import OWNED_KINDS, TERMINAL_KINDS, Event, StateKind
from ..domain.model import ValidationError
from ..domain.scheduling import Offer, Requirements, mismatches
from ..domain.takeover import TakeoverAction, decide_takeover
from ..engine.commit import read_notes
from ..engine.manifest import read_beat, read_heartbeat, read_manifest
from ..engine.recovery import TakeoverSettings, observe
from ..engine.waiting import child_kinds, join_decision
from ..languages.realization import HTTK_V1, LANGUAGE, LANGUAGES, missing_modules, realization_of
from ..ports import ProcessControl, unreadable
from ..store.markers import Marker
from ..store.store import UNRESOLVABLE_CHILD, JobDamage, current_kinds
from ..store.transfer_ledger import SOURCE, Ledger, LedgerError, resume_command
from ..store.workspaces import WorkspaceHandle
from .inspection import job_headlines

FLAPPING_ATTEMPTS = 20


def managers(handle: WorkspaceHandle) -> list[dict[str, Any]]:
    """Every registered manager with its manifest, heartbeat age and liveness."""
    fs, now = handle.fs, handle.ports.clock.now()
    out = []
    for entry in sorted(fs.scandir(handle.layout.managers), key=lambda item: item.name):
        record = read_manifest(fs, handle.layout, entry.name)
        if record is None:
            continue
        manifest: dict[str, Any] = codec.unstructure(record)
        beat = read_beat(fs, handle.layout, entry.name)
        age = None if beat is None else max(0.0, now - beat.time)
        stopped = beat is not None and beat.stopped
        lease = record.lease_seconds or float(handle.policy["lease_seconds"])
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


def realization_lines(spec: Any, find: Callable[[str], Any] | None) -> list[str]:
    """What realizes a language job or a converted v1 task, and what its manager's machine needs; none for native.

    ``find`` (``Ports.find_module``) says whether an engine module is installed here; ``None``: not asked.
    """
    realization = realization_of(spec.runner_source, spec.runner_path)
    if realization.kind == LANGUAGE and realization.language in LANGUAGES:
        language = LANGUAGES[realization.language]
        missing = missing_modules(language, find) if find is not None else None
        here = (f"the manager's machine needs its engine modules: {language.install_hint}" if missing is None else
                "its engine modules are installed on this machine" if not missing else
                f"its engine modules ({', '.join(missing)}) are not installed on this machine; the manager's "
                f"machine needs them: {language.install_hint}")
        return [f"realization: language ({language.name}), run by the packaged runner {spec.runner_path}; {here}"]
    if realization.kind == HTTK_V1:
        return [f"realization: httk-v1, a converted httk v1 task run by the packaged v1 runner; claim pool "
                f"{spec.pool} (serve it with 'httk workflow manager run --pool {spec.pool}')"]
    return []


def why(handle: WorkspaceHandle, marker: Marker, process: ProcessControl | None = None) -> dict[str, Any]:
    """A diagnosis: ``{"job", "kind", "summary", "lines": [...]}``, and ``children`` of a waiting job."""
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
    lines.extend(_refusals(handle, marker))
    if spec is not None:
        lines.extend(realization_lines(spec, handle.ports.find_module))
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
        counters = budgets.counters_of(frame)
        decision = budgets.after_attempt(spec.retry_policy, counters, failure=None, explicit_retry=True)
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
    elif kind in OWNED_KINDS:
        summary, more = _owned(handle, marker, frame, spec, process)
        lines.extend(more)
    elif kind == StateKind.WAITING:
        summary, more, report["children"] = _waiting(handle, frame)
        lines.extend(more)
    elif kind == StateKind.FAILED:
        failure = frame.failure
        summary = f"failed: {failure.code}: {failure.message}" if failure else "failed (no failure recorded)"
        if spec is not None:
            fits = budgets.continue_fits(spec.retry_policy, budgets.counters_of(frame))
            lines.append("an operator 'continue' fits the retry budget" if fits.allowed
                         else f"an operator 'continue' does not fit: {fits.reason}")
        error = _last_error(handle, marker)
        if error:
            lines.append(f"error.json of the last attempt: {error}")
    elif kind == StateKind.PAUSED:
        summary = f"paused ({frame.reason or 'no reason recorded'}); resume with 'job request ... continue'"
    elif kind == StateKind.SUCCEEDED:
        summary = "succeeded; nothing to do"
    elif kind == StateKind.TRANSFERRING:
        summary, more = _transferring(handle, frame)
        lines.extend(more)
    else:
        summary = f"{kind.value}; nothing to do"
    if kind in (StateKind.READY, StateKind.RUNNING, StateKind.FAILED, StateKind.CLAIMED):
        lines.append(
            f"{frame.total_attempts} attempts across {max(frame.activation_ordinal, 1)} activations at step "
            f"{frame.step!r}; {frame.unclean_exits} after unclean exits"
        )
        if spec is not None and spec.maximum_total_attempts is None and frame.total_attempts >= FLAPPING_ATTEMPTS:
            lines.append(f"flapping: {frame.total_attempts} attempts under an unlimited budget without progress")
    if frame.event in (Event.DRAIN_RELEASE, Event.DRAIN_PAUSE):
        lines.append(f"the last attempt was stopped by its manager's drain, not by the job: {frame.reason}")
    lines.extend(_requests(handle, marker))
    # Spec 002: a headline event is meant to be read first when the job is inspected.
    headlines = job_headlines(store, marker, spec, limit=1)
    report["headline"] = headlines[-1] if headlines else None
    if headlines:
        event = headlines[-1]
        lines.insert(0, f"latest headline (step {event['step']!r}): {event['label']}: {event['message']}")
    report["summary"] = summary
    report["lines"] = lines
    report["step"] = frame.step
    return report


def _transferring(handle: WorkspaceHandle, frame: Any) -> tuple[str, list[str]]:
    """Which transfer holds a transferring job and, when its ledger is unfinished, the command that settles it."""
    note = (frame.notes or {}).get("transfer")
    note = note if isinstance(note, dict) else {}
    transfer_id, source, destination = note.get("id"), note.get("from"), note.get("to")
    if not isinstance(transfer_id, str):
        return "transferring, but its frame names no transfer; see 'httk workflow workspace fsck'", []
    try:
        state = Ledger(handle.fs, handle.layout, transfer_id, SOURCE, durable=handle.durable,
                       clock=handle.ports.clock).state()
    except (LedgerError, OSError, codec.DocumentError) as error:
        return f"transferring: held by transfer {transfer_id} to {destination}, whose ledger is unreadable", [
            str(error)]
    held = f"held by transfer {transfer_id} to {destination}"
    if state["final"]:
        return (f"transferring: {held}, which ended ({state['step']}) without settling this job; see 'httk "
                f"workflow workspace fsck {handle.reference}'"), []
    fix = resume_command(source or handle.reference, destination or "DESTINATION")
    where = f"at step {state['step']}" if state["step"] else "before its plan"
    return (f"transferring: {held}, unfinished {where}; no manager claims it until the transfer ends: "
            f"finish it with '{fix}' (unless that transfer's command is still running)"), []


def _refusals(handle: WorkspaceHandle, marker: Marker) -> list[str]:
    """What managers recorded when they refused this job in its current kind (``managers/<id>/refused/``)."""
    out = []
    for entry in sorted(handle.fs.scandir(handle.layout.managers), key=lambda item: item.name):
        path = f"{entry.path}/refused/{marker.key}.json"
        try:
            note = codec.decode_object(handle.fs.read_document(path), path)
        except (OSError, codec.DocumentError):
            continue
        if note.get("kind") == marker.kind.value:
            out.append(f"manager {entry.name} refused it: {note.get('reason')}")
    return out


def _deciders(handle: WorkspaceHandle, this_host: str, owner_id: Any) -> list[dict[str, Any]]:
    """The managers whose verdict ``job why`` reports: the live ones on this host other than the owner.

    Only this host's kernel can answer for a process recorded here, so managers elsewhere are not
    judged from here. With none live, the verdict is that of a manager started here with the defaults.
    """
    found = [manager for manager in managers(handle)
             if manager["live"] and manager.get("host") == this_host and manager["manager_id"] != owner_id]
    return found or [{"manager_id": None, "lease_seconds": handle.policy["lease_seconds"]}]


def _owned(
    handle: WorkspaceHandle, marker: Marker, frame: Any, spec: Any, process: ProcessControl | None
) -> tuple[str, list[str]]:
    """The takeover verdict a manager here reaches, from the observation the recovery pass builds."""
    kind = frame.kind.value
    owner_id = frame.owner_id
    beat, _declared = read_heartbeat(handle.fs, handle.layout, str(owner_id)) if owner_id else (None, None)
    now = handle.ports.clock.now()
    lease = (frame.owner.lease_seconds if frame.owner is not None else 0.0) or float(handle.policy["lease_seconds"])
    age = "never or stopped" if beat is None else f"{max(0.0, now - beat):.0f}s ago"
    lines = [f"owning manager: {owner_id or 'none'} (heartbeat {age}, lease {lease:g}s)"]
    if frame.process is not None and frame.process.host:
        lines.append(f"attempt process recorded on host {frame.process.host}")
    if spec is None:
        return f"{kind}, blocked: no manager takes over a job whose job.json is unreadable; repair it", lines
    if process is None:
        return f"{kind} (owner {owner_id}); the takeover verdict needs this host's process table", lines
    verdicts = []
    for decider in _deciders(handle, process.hostname(), owner_id):
        observation = observe(
            handle.fs, process, marker.kind, frame, spec.workdir_mode,
            this_host=process.hostname(), now=now, beat=beat,
            default_lease=float(decider.get("lease_seconds") or handle.policy["lease_seconds"]),
            settings=TakeoverSettings.from_json(decider.get("takeover")),
        )
        verdict = decide_takeover(observation)
        who = (f"manager {decider['manager_id']} on this host" if decider["manager_id"]
               else "a manager started on this host with the default takeover settings")
        lines.append(f"{who}: {verdict.message}")
        verdicts.append(verdict)
    # The first decider that acts speaks for the summary; else the first one.
    verdict = next((item for item in verdicts if item.awaits_takeover), verdicts[0])
    if verdict.rule == "lease_live":
        return f"{kind} under the live lease of manager {owner_id}", lines
    if verdict.action == TakeoverAction.ADOPT:
        return f"{kind} under an expired lease: a manager here adopts the live attempt ({verdict.rule})", lines
    if verdict.takes_over:
        return f"{kind} under an expired lease: a manager here recovers it ({verdict.rule})", lines
    if verdict.not_before is not None:
        wait = max(verdict.not_before - now, 0.0)
        return (f"{kind} under an expired lease: a manager here recovers it in {wait:.0f}s "
                f"({verdict.admitted_by})", lines)
    return f"{kind} under an expired lease, blocked: {verdict.message}", lines


def _children(handle: WorkspaceHandle, frame: Any, notes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each join child with its state: ``{label, job_id, job_key, kind, noted, resolvable, text}``.

    ``noted`` and ``resolvable`` are the waiting pass's classification (:func:`child_kinds`);
    ``kind`` is the terminal note's, else the child's current marker's (the lookup context.json
    uses, :func:`current_kinds`), else ``unresolvable``; ``text`` says it in one phrase.
    """
    classified = child_kinds(handle.fs, handle.layout, frame, notes)
    join = frame.join
    current = current_kinds(handle.fs, handle.layout,
                            [child for child in join.children if child.job_id not in notes])
    out = []
    for child in join.children:
        state = classified.get(child.label)
        noted = child.job_id in notes
        found = current.get(child.job_id)
        kind = state.value if noted and state is not None else found.value if found else UNRESOLVABLE_CHILD
        if state is None:
            text = "cannot be resolved in this workspace (no terminal note, and its payload is gone)"
        elif noted or (found is not None and found not in TERMINAL_KINDS):
            text = kind
        elif found is not None:
            text = f"{kind}, but its terminal note is missing: the join still counts it as unfinished"
        else:
            text = (f"{UNRESOLVABLE_CHILD}: it has no marker, but its payload is present, so the join still "
                    f"waits on it; run 'httk workflow workspace fsck'")
        out.append({"label": child.label, "job_id": child.job_id, "job_key": child.job_key, "kind": kind,
                    "noted": noted, "resolvable": state is not None, "text": text})
    return out


def _waiting(handle: WorkspaceHandle, frame: Any) -> tuple[str, list[str], list[dict[str, Any]]]:
    """The join decision the waiting pass reaches, from the same children classification, and the children."""
    join = frame.join
    if join is None:
        return "waiting, but the recorded join is invalid: the frame records no join", [], []
    live = [manager for manager in managers(handle) if manager["live"]]
    grace = float(next((manager["join_grace_seconds"] for manager in live if manager.get("join_grace_seconds")),
                       DEFAULT_JOIN_GRACE_SECONDS))
    lines = [f"join: {describe_condition(join.when, join.count)}, then step {join.step!r}"
             + (f", on_impossible {join.on_impossible!r}" if join.on_impossible else "")]
    # The notes are read once: the classification and the decision below rest on the same ones.
    notes = read_notes(handle.fs, handle.layout, frame.job_id)
    children = _children(handle, frame, notes)
    for child in children:
        lines.append(f"child {child['label']} ({child['job_key']}): {child.pop('text')}")
    if join.first_unresolved_at is not None:
        lines.append(f"first recorded unresolvable at {join.first_unresolved_at:.0f} (epoch seconds); the job "
                     f"fails with dependency_failure {grace:g}s (--join-grace-seconds) after that")
    try:
        decision = join_decision(handle.fs, handle.layout, frame, now=handle.ports.clock.now(), grace_seconds=grace,
                                 notes=notes)
    except (ValidationError, KeyError) as error:
        return f"waiting, but the recorded join is invalid: {error}", lines, children
    if decision.action == JoinAction.WAIT:
        summary = f"waiting on {len(decision.blocking)} active child(ren)"
        if decision.unresolved:
            summary += f"; {len(decision.unresolved)} cannot be resolved here"
        lines.append(decision.reason)
        return summary, lines, children
    return f"the next manager resolves the join: {decision.reason}", lines, children


def _last_error(handle: WorkspaceHandle, marker: Marker) -> str | None:
    attempts = sorted(entry.path for entry in handle.fs.scandir(handle.layout.job_attempts(marker.job_id)))
    if not attempts:
        return None
    path = f"{attempts[-1]}/error.json"
    try:
        # A runner wrote it: read it the one safe way (a FIFO there must not block 'job why').
        error = codec.read(handle.fs.read_document(path), RunnerErrorDocument, "error.json")
    except FileNotFoundError:
        return None
    except OSError as problem:
        return unreadable(path, problem)
    except codec.DocumentError:
        return None
    where = f" at {error.file}:{error.line}" if error.file else ""
    return f"{error.summary}{where}"


def _requests(handle: WorkspaceHandle, marker: Marker) -> list[str]:
    lines = []
    for where in ("ready", "retired", "quarantine"):
        for entry in handle.fs.scandir(f"{handle.layout.requests}/{where}"):
            if where == "quarantine" and not entry.name.endswith(".audit.json"):
                continue  # a quarantined entry is kept as published; its audit record names its job
            try:
                # Never follow, block on or slurp an entry the manager will quarantine.
                request = codec.decode_object(handle.fs.read_document(entry.path), entry.path)
            except (OSError, codec.DocumentError):
                continue
            if request.get("job_id") != marker.job_id:
                continue
            if where == "ready":
                lines.append(f"pending request: {request.get('action')} by {request.get('operator')}")
            elif where == "retired":
                lines.append(f"retired request {request.get('action')}: {request.get('retired_reason')}")
            else:
                lines.append(f"quarantined request {request.get('action')}: {request.get('quarantine_reason')} "
                             f"(as published: requests/quarantine/{request.get('quarantined_as')})")
    return lines
