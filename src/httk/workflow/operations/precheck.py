"""``precheck``: a read-only readiness report for pending jobs, before managers start.

For every submitted or ready job it checks that every required setting its
workflow declares resolves (job input, ``HTTK_*`` variable, workspace setting,
declared default: a runner without one fails at once), that the runner reference resolves
by the manager's own rule (:func:`.runners.resolve_runner`, including the safety
property of payload runners) and, where pinned, that the stored bytes still have
the pinned digest, and measures the job against the workspace's live managers.
A language job whose engine modules are absent here names the pip extra to
install: a failure only when no live manager serves its executor, else
``indeterminate``. An installed runner with no search path to look in is ``indeterminate``, not a
failure. Setting names of a hand-edited settings.json that share one ``HTTK_*``
variable (``a.b-c``, ``a.b_c``) are a notice: a manager exports that variable for
neither. The report is advisory: the authoritative gate is at attempt start.
Spec: 000 "Readiness and transfer environment advisories".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..domain.lifecycle import StateKind
from ..domain.scheduling import Requirements, mismatches
from ..languages.realization import LANGUAGE, LANGUAGES, missing_modules, realization_of
from ..store.policy import collision_text, env_collisions, setting_env_name
from ..store.runners import RunnerUnavailable, digest_mismatch, resolve_runner
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle
from .diagnosis import managers, offer_of
from .workflows import declared_settings, setting_fix, unresolved_settings

PENDING = (StateKind.SUBMITTED, StateKind.READY)


def _runner_finding(
    handle: WorkspaceHandle, payload: str, spec: Any, search_paths: Sequence[str], uid: int
) -> dict[str, Any]:
    fs = handle.fs
    source, path = spec.runner_source, spec.runner_path
    if source == "installed" and not search_paths:
        return {"status": "indeterminate", "message": f"installed runner {path!r}: no --runner-search-path given"}
    try:
        candidate = resolve_runner(fs, handle.layout, payload, spec, search_paths, uid=uid)
    except RunnerUnavailable as refused:
        return {"status": "broken", "message": f"{refused} (runner_unavailable at attempt start)"}
    problem = _not_startable(fs, candidate)
    if problem:
        return {"status": "broken", "message": f"{source} runner {path!r}: {problem}"}
    mismatch = digest_mismatch(fs, candidate, spec)
    if mismatch is not None:
        return {"status": "broken", "message": f"{mismatch.message} at {candidate} (runner_mismatch at attempt start)"}
    return {"status": "ok", "message": f"{source} runner {path!r} resolves to {candidate}"}


def _engine_finding(spec: Any, live: Sequence[dict[str, Any]], find: Callable[[str], Any] | None
                    ) -> dict[str, Any] | None:
    """For a language job: whether its engine modules are installed here, else which pip extra brings them.

    The extras belong on the machine that runs the job, so a missing engine fails the
    report only when no live manager serves the job's executor; when one does, that
    manager's machine may well have it, and the finding is ``indeterminate``. ``find``
    is ``Ports.find_module``; without one there is nothing to ask and no finding.
    """
    realization = realization_of(spec.runner_source, spec.runner_path)
    if realization.kind != LANGUAGE or realization.language is None or find is None:
        return None
    language = LANGUAGES[realization.language]
    missing = missing_modules(language, find)
    if not missing:
        return {"check": "engine", "status": "ok",
                "message": f"language job ({language.name}): its engine modules are installed here"}
    what = (f"language job ({language.name}): its engine modules ({', '.join(missing)}) are not installed here; "
            f"install them where the job runs: {language.install_hint}")
    serving = [manager["manager_id"] for manager in live if spec.executor in (manager.get("executors") or ())]
    if serving:
        return {"check": "engine", "status": "indeterminate",
                "message": f"{what} (live manager {', '.join(serving)} serves executor {spec.executor} and may "
                           "have them)"}
    return {"check": "engine", "status": "broken",
            "message": f"{what}; no live manager serves executor {spec.executor}"}


def _not_startable(fs: Any, path: str) -> str | None:
    """Why the manager could not start this runner file, or ``None``.

    ``.py`` runs under the manager's Python and ``.sh``/``.bash`` under bash; anything else
    is executed directly and needs its execute bit and a ``#!`` line (or to be a binary).
    """
    info = fs.lstat(path)
    if info is None or info.is_dir or path.endswith((".py", ".sh", ".bash")):
        return None
    if not info.mode & 0o111:
        return "not executable (chmod +x it, or name it .py/.sh)"
    try:
        head = fs.read_range(path, 0, 4)
    except OSError as error:  # a FIFO or device where the runner belongs is refused, never read blocking
        return f"cannot be read ({error})"
    if not head.startswith(b"#!") and head != b"\x7fELF":
        return "has no '#!' interpreter line"
    return None


def _setting_findings(handle: WorkspaceHandle, unresolved: Sequence[str]) -> list[dict[str, Any]]:
    return [{"check": "setting", "status": "broken", "setting": name,
             "message": f"required setting {name} resolves to nothing (no job input, no {setting_env_name(name)} "
                        "in this environment, no workspace setting, no declared default): its runner fails at "
                        f"once; set it with {setting_fix(handle, name)}, or export {setting_env_name(name)} in the "
                        "manager's environment"} for name in unresolved]


def _settings_notices(handle: WorkspaceHandle, needing: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """One entry per unresolved setting: the jobs that need it and the fix."""
    out = []
    for name, keys in sorted(needing.items()):
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        out.append({"setting": name, "jobs": keys, "fix": setting_fix(handle, name).strip("'"),
                    "environment": setting_env_name(name),
                    "message": f"setting {name} is required by {len(keys)} pending job(s) ({shown}) and resolves to "
                               f"nothing: set it with {setting_fix(handle, name)}, or export "
                               f"{setting_env_name(name)} in the manager's environment"})
    return out


def _collision_notices(handle: WorkspaceHandle, settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Setting names of a hand-edited settings.json that share one environment variable (a warning)."""
    out = []
    for variable, names in sorted(env_collisions(settings).items()):
        fix = f"'httk workflow workspace settings unset {handle.reference} {names[-1]}'"
        out.append({"environment": variable, "settings": list(names), "fix": fix.strip("'"),
                    "message": f"{collision_text(variable, names)}: a manager exports {variable} for neither "
                               f"(runners read each from context.json); keep one name, e.g. {fix}"})
    return out


def precheck(
    handle: WorkspaceHandle, *, uid: int, search_paths: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The readiness report; ``failed`` is true when something gives exit status 1.

    ``uid`` is the account whose managers would run the jobs (the safety property of payload runners);
    ``environ`` is this process's environment, the ``HTTK_*`` layer of the settings check
    (``None``: no such layer, only job inputs, workspace settings and declared defaults count).
    """
    live = [manager for manager in managers(handle) if manager["live"]]
    jobs: list[dict[str, Any]] = []
    failed = False
    settings = handle.settings()
    needing: dict[str, list[str]] = {}
    declared_by_runner: dict[tuple[str, str, str | None], dict[str, dict[str, bool]]] = {}
    for kind in PENDING:
        for marker in handle.store.iter_markers(kind):
            entry: dict[str, Any] = {"job": str(marker.key), "kind": kind.value, "placement": marker.placement}
            try:
                spec = handle.store.read_spec(marker)
            except JobDamage as damage:
                entry["findings"] = [{"check": "job", "status": "broken", "message": str(damage)}]
                jobs.append(entry)
                failed = True
                continue
            payload = handle.layout.payload(marker.placement, str(marker.key))
            runner = {"check": "runner", **_runner_finding(handle, payload, spec, search_paths, uid)}
            findings = [runner]
            failed |= runner["status"] == "broken"
            # One workflow.json read per pinned runner, not per job (a payload runner is per job).
            pin = (spec.runner_source, spec.runner_path if spec.runner_source != "payload" else payload,
                   spec.runner_sha256)
            if pin not in declared_by_runner:
                declared_by_runner[pin] = declared_settings(handle.fs, handle.layout, payload, spec)
            unresolved = unresolved_settings(declared_by_runner[pin], inputs=spec.inputs, settings=settings,
                                             environ=environ)
            findings.extend(_setting_findings(handle, unresolved))
            for name in unresolved:
                needing.setdefault(name, []).append(str(marker.key))
            failed |= bool(unresolved)
            engine = _engine_finding(spec, live, handle.ports.find_module)
            if engine is not None:
                findings.append(engine)
                failed |= engine["status"] == "broken"
            if live:
                requirements = Requirements(pool=spec.pool, capabilities=frozenset(spec.capabilities),
                                            executor=spec.executor, placement=marker.placement)
                unmet = {manager["manager_id"]: mismatches(offer_of(manager), requirements) for manager in live}
                if all(unmet.values()):
                    closest = min(unmet, key=lambda name: len(unmet[name]))
                    wording = "; ".join(f"{item.kind} {item.value} ({item.advice})" for item in unmet[closest])
                    findings.append({"check": "claim", "status": "broken",
                                     "message": f"no live manager can claim it; closest {closest}: {wording}"})
                    failed = True
                else:
                    accepting = [name for name, missing in unmet.items() if not missing]
                    findings.append({"check": "claim", "status": "ok",
                                     "message": f"claimable by {', '.join(accepting)}"})
            entry["findings"] = findings
            jobs.append(entry)
    missing = _settings_notices(handle, needing)
    collisions = _collision_notices(handle, settings)
    notices = [entry["message"] for entry in missing] + [entry["message"] for entry in collisions]
    if not live:
        notices.append("no manager is live for this workspace; claimability was not measured")
    return {"workspace": handle.root, "jobs": jobs, "notices": notices, "failed": failed,
            "settings": settings, "settings_missing": missing, "settings_collisions": collisions}
