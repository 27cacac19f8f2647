"""``precheck``: a read-only readiness report for pending jobs, before managers start.

For every submitted or ready job it checks that the runner reference resolves
by the manager's own rule (:func:`.runners.resolve_runner`, including the safety
property of payload runners) and, where pinned, that the stored bytes still have
the pinned digest, and measures the job against the workspace's live managers.
A language job whose engine modules are absent here names the pip extra to
install: a failure only when no live manager serves its executor, else
``indeterminate``. An installed runner with no search path to look in is ``indeterminate``, not a
failure. The report is advisory: the authoritative gate is at attempt start.
Spec: 000 "Readiness and transfer environment advisories".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..domain.lifecycle import StateKind
from ..domain.scheduling import Requirements, mismatches
from ..languages.realization import LANGUAGE, LANGUAGES, missing_modules, realization_of
from ..store.runners import RunnerUnavailable, digest_mismatch, resolve_runner
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle
from .diagnosis import managers, offer_of

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


def precheck(handle: WorkspaceHandle, *, uid: int, search_paths: Sequence[str] = ()) -> dict[str, Any]:
    """The readiness report; ``failed`` is true when something gives exit status 1.

    ``uid`` is the account whose managers would run the jobs (the safety property of payload runners).
    """
    live = [manager for manager in managers(handle) if manager["live"]]
    jobs: list[dict[str, Any]] = []
    failed = False
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
    notices = [] if live else ["no manager is live for this workspace; claimability was not measured"]
    return {"workspace": handle.root, "jobs": jobs, "notices": notices, "failed": failed,
            "settings": handle.settings()}
