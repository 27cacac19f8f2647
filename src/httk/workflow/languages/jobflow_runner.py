"""The jobflow engine: a jobflow ``Flow`` runs as jobs of a workspace, one per jobflow ``Job``.

A flow is one *conductor* job (step ``conduct``); each jobflow ``Job`` becomes one
child job of it (step ``run``). The conductor spawns every job whose parents have
all succeeded, gathers that wave (``all_terminal``), and conducts again: the
dependencies of the flow are joins. Every job is transactional: its outputs — the
``JobStoreDocument`` jobflow itself stores, one per ``(uuid, index)`` — are put into
its data under ``jobflow/outputs/``, and the conductor copies them into its own data
when it gathers the job. A job's ``OutputReference`` inputs are resolved by jobflow's
own ``Job.run`` from an in-memory ``JobStore`` holding the documents of its parents,
which the conductor passes in the child's inputs.

A ``Response`` maps onto the same primitives:

- ``replace``, ``detour``: the job spawns a sub-conductor per diversion flow and
  gathers them (step ``absorb``), so the job, and therefore everything that depends
  on it, finishes only after them (a detour's flow is what the job's children wait
  for). A replacement carries the replaced job's uuid at the next index, so a
  reference to the replaced job resolves to the replacement's output (jobflow's
  "latest" index);
- ``addition``: the job hands the flow to its conductor (``jobflow/addition.json``),
  which spawns it once the job has succeeded, beside the job's children: they do
  not wait for it, and a failed addition fails the flow, not the job;
- ``stop_children``: the conductor runs none of the job's descendants (``stopped``);
- ``stop_jobflow``: the job runs none of its diversions and the conductor spawns
  nothing more (``not_run``).

A flow stopped either way did not finish successfully, as jobflow's ``run_locally``
says (``ensure_success`` raises): the conductor fails with ``jobflow_flow_stopped``.

A job that raises fails with ``jobflow_job_failed`` (not retried: jobflow has no
retry either); its descendants whose ``on_missing_references`` is ``error`` (the
default) never run and the flow fails with ``jobflow_flow_failed``. This module
imports jobflow; nothing but the packaged runner (``languages/jobflow/run.py``) and
:mod:`..operations.language_jobs` at submission imports it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..runtime import ChildSpec
from ..sdk import Attempt, Runner
from . import LANGUAGES
from .jobflow_codec import decode, encode

LANGUAGE = LANGUAGES["jobflow"]
OUTPUTS = "jobflow/outputs"
#: What a job sent to an additional store (``@job(data=True)``): one blob per file, ``<store>.<blob_uuid>.json``.
BLOBS = "jobflow/blobs"
RESPONSE = "jobflow/response.json"
#: A job's ``Response.addition``, for its conductor to add to the flow (the job does not run it).
ADDITION = "jobflow/addition.json"
FLOW_SUMMARY = "jobflow/flow.json"
#: Where this attempt stages each file it puts (below the workdir; removed once put has copied it).
STAGING = ".httk-jobflow"
#: The diversions a job runs itself (gathered before it ends): its dependents wait for them.
DIVERSIONS = ("replace", "detour")
#: Terminal states of a jobflow job inside one conductor (``state["statuses"]``).
SUCCEEDED, FAILED, ERRORED, STOPPED, NOT_RUN = "succeeded", "failed", "errored", "stopped", "not_run"

run = Runner("jobflow")


def label_for(name: str, uuid: str) -> str:
    """A child label (a job tag): the job's name made tag-safe, and the first 8 hex digits of its uuid."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    slug = re.sub(r"-{2,}", "-", slug)[:30].rstrip("-._") or "job"
    return f"{slug}-{uuid.replace('-', '')[:8]}"


def document_name(document: Mapping[str, Any]) -> str:
    return f"{document['uuid']}.{int(document['index'])}.json"


def blob_name(blob: Mapping[str, Any]) -> str:
    return f"{blob['store']}.{blob['blob_uuid']}.json"


def read_documents(data: Path | None, folder: str = OUTPUTS) -> dict[str, dict[str, Any]]:
    """The output documents (or blobs) a job's (or a conductor's) committed data holds, by file name."""
    if data is None or not (data / folder).is_dir():
        return {}
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted((data / folder).iterdir())
        if path.name.endswith(".json")
    }


def put_documents(a: Attempt, documents: Iterable[Mapping[str, Any]], folder: str = OUTPUTS) -> None:
    """Stage each document into this job's data at ``jobflow/outputs/<uuid>.<index>.json`` (blobs: ``BLOBS``)."""
    staging = a.workdir / STAGING / a.context.attempt_id / folder.rsplit("/", 1)[-1]
    staging.mkdir(parents=True, exist_ok=True)
    for document in documents:
        name = document_name(document) if folder == OUTPUTS else blob_name(document)
        (staging / name).write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
        a.put(staging / name, f"{folder}/{name}")
        (staging / name).unlink()  # put copied it into the outcome draft


def _blobs_of(blobs: Iterable[Mapping[str, Any]], documents: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The blobs the jobs of ``documents`` stored."""
    uuids = {doc.get("uuid") for doc in documents}
    return sorted((dict(blob) for blob in blobs if blob.get("job_uuid") in uuids), key=blob_name)


def put_json(a: Attempt, destination: str, document: Any) -> None:
    staging = a.workdir / STAGING / a.context.attempt_id
    staging.mkdir(parents=True, exist_ok=True)
    path = staging / destination.replace("/", "_")
    path.write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
    a.put(path, destination)
    path.unlink()  # put copied it into the outcome draft


def _referenced_uuids(value: Any) -> set[str]:
    """The uuids of the ``OutputReference`` objects a serialized value holds, at any depth."""
    found: set[str] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if item.get("@class") == "OutputReference" and isinstance(item.get("uuid"), str):
                found.add(item["uuid"])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


def _references(documents: Iterable[Mapping[str, Any]], uuids: Iterable[str]) -> list[dict[str, Any]]:
    """The documents of ``uuids`` and, transitively, of every reference their outputs hold.

    An output may itself be references (a replacement flow's output names its jobs' outputs), which
    jobflow resolves in turn, so a job is given the closure rather than only its direct parents.
    """
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        by_uuid.setdefault(str(doc.get("uuid")), []).append(dict(doc))
    chosen: dict[str, list[dict[str, Any]]] = {}
    pending = set(uuids)
    while pending:
        uuid = pending.pop()
        if uuid in chosen or uuid not in by_uuid:
            continue
        chosen[uuid] = by_uuid[uuid]
        for doc in chosen[uuid]:
            pending |= _referenced_uuids(doc.get("output")) - chosen.keys()
    return sorted((doc for docs in chosen.values() for doc in docs), key=document_name)


def _child(a: Attempt, inputs: dict[str, Any], step: str) -> ChildSpec:
    # Jobflow retries nothing, and neither does a jobflow job here (a killed runner is still retried).
    modules = a.input("modules", {})
    if modules:  # every job of the flow decodes with the flow's shipped modules
        inputs = {**inputs, "modules": modules}
    return ChildSpec(step=step, inputs=inputs, data_mode="transactional")


def _load(a: Attempt, name: str) -> Any | None:
    """Input ``name`` decoded, the flow's shipped modules importable first; ``None`` once the attempt failed.

    A flow whose module this Python cannot import fails ``jobflow_flow_unimportable``, not
    retried: a retry would not find it either (unlike a killed runner).
    """
    modules: dict[str, str] = dict(a.input("modules", {}))
    if modules:
        root = a.workdir / STAGING / "modules"
        for relative, source in modules.items():
            parts = Path(relative).parts
            if Path(relative).is_absolute() or ".." in parts or not relative.endswith(".py"):
                a.fail("jobflow_flow_unimportable", f"shipped module path {relative!r} is not a relative .py path",
                       details={"module": relative})
                return None
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(source, encoding="utf-8")
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        return decode(a.input(name))
    except ImportError as error:
        module = error.name or str(error)
        a.fail("jobflow_flow_unimportable",
               f"the flow needs module {module!r}, which cannot be imported where this job runs "
               f"({type(error).__name__}: {error}); install it there (pip install), put its directory on the "
               "managers' PYTHONPATH, or submit with 'job new --flow MODULE:FUNCTION' from its directory, so "
               "that its source travels with the job",
               details={"module": module, "shipped": sorted(modules)})
        return None


# ----------------------------------------------------------------------------------------- conductor
def _absorb_children(a: Attempt, labels: Mapping[str, str], statuses: dict[str, str],
                     failures: dict[str, Any], stopping: dict[str, Any], additions: list[tuple[str, Any]]
                     ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Fold the gathered wave into ``statuses``; return the output documents and blobs its jobs produced.

    The flows a job's ``Response.addition`` asks for are appended to ``additions`` (with the job's uuid).
    """
    produced: dict[str, dict[str, Any]] = {}
    blobs: dict[str, dict[str, Any]] = {}
    for child in a.children:
        uuid = labels.get(child.label)
        if uuid is None:
            continue
        if not child.succeeded:
            statuses[uuid] = FAILED
            failures[uuid] = {"label": child.label, "kind": child.kind,
                              "code": child.failure.code if child.failure else None,
                              "message": child.failure.message if child.failure else ""}
            continue
        statuses[uuid] = SUCCEEDED
        produced.update(read_documents(child.data))
        blobs.update(read_documents(child.data, BLOBS))
        response_path = child.data / RESPONSE if child.data is not None else None
        response = json.loads(response_path.read_text(encoding="utf-8")) if response_path and \
            response_path.is_file() else {}
        if response.get("stop_children"):
            stopping.setdefault("stop_children", []).append(uuid)
        if response.get("stop_jobflow") and not stopping.get("stopped_by"):
            stopping["stopped_by"] = uuid
        if response.get("addition") and child.data is not None and (child.data / ADDITION).is_file():
            additions.append((uuid, json.loads((child.data / ADDITION).read_text(encoding="utf-8"))))
    return produced, blobs


def _spawn_additions(a: Attempt, additions: Iterable[tuple[str, Any]], labels: dict[str, str],
                     statuses: dict[str, str], added: dict[str, str], stopping: Mapping[str, Any],
                     known: Mapping[str, Any], blobs: Mapping[str, Any]) -> bool:
    """Spawn a sub-conductor for each added flow, as a job of this flow whose parent has succeeded.

    Its status is the flow's (``statuses[flow uuid]``); nothing of the flow waits for it but the
    conductor's next wave. After ``stop_jobflow`` nothing is added (``not_run``). Whether one was spawned.
    """
    spawned = False
    for parent, document in additions:
        uuid = str(document.get("uuid") or parent)
        added[uuid] = str(document.get("name") or "addition")
        if stopping.get("stopped_by"):
            statuses[uuid] = NOT_RUN
            continue
        label = label_for("addition", uuid)
        labels[label] = uuid
        references = _references(known.values(), _referenced_uuids(document))
        inputs = {"flow": document, "references": references, "blobs": _blobs_of(blobs.values(), references)}
        a.spawn(_child(a, inputs, "conduct"), label=label)
        spawned = True
    return spawned


def _plan(flow: Any, statuses: dict[str, str], stopping: Mapping[str, Any]) -> list[Any]:
    """Mark what can no longer run; return the jobs that can run now (every parent succeeded)."""
    from jobflow.core.reference import OnMissing

    stop_children = set(stopping.get("stop_children", ()))
    ready = []
    for job, parents in flow.iterflow():
        if job.uuid in statuses:
            continue
        if stopping.get("stopped_by"):
            statuses[job.uuid] = NOT_RUN
            continue
        parent_states = [statuses.get(parent) for parent in parents]
        if any(parent in stop_children or statuses.get(parent) == STOPPED for parent in parents):
            statuses[job.uuid] = STOPPED
        elif any(state in (FAILED, ERRORED) for state in parent_states):
            if job.config.on_missing_references == OnMissing.ERROR:
                statuses[job.uuid] = ERRORED
            elif all(state in (SUCCEEDED, FAILED, ERRORED) for state in parent_states):
                ready.append(job)
        elif all(state == SUCCEEDED for state in parent_states):
            ready.append(job)
    return ready


@run.step
def conduct(a: Attempt) -> None:
    """Spawn every job of the flow that can run now and gather them; conclude when none is left."""
    flow = _load(a, "flow")
    if flow is None:
        return
    state = a.state.read()
    statuses: dict[str, str] = dict(state.get("statuses", {}))
    labels: dict[str, str] = dict(state.get("labels", {}))
    failures: dict[str, Any] = dict(state.get("failures", {}))
    stopping: dict[str, Any] = dict(state.get("stopping", {}))
    added: dict[str, str] = dict(state.get("added", {}))
    additions: list[tuple[str, Any]] = []
    produced, new_blobs = _absorb_children(a, labels, statuses, failures, stopping, additions)
    put_documents(a, produced.values())
    put_documents(a, new_blobs.values(), BLOBS)
    known = {**{document_name(doc): doc for doc in a.input("references", [])}, **read_documents(a.data), **produced}
    blobs = {**{blob_name(blob): blob for blob in a.input("blobs", [])}, **read_documents(a.data, BLOBS),
             **new_blobs}
    ready = _plan(flow, statuses, stopping)
    for job in ready:
        label = label_for(job.name, job.uuid)
        labels[label] = job.uuid
        references = _references(known.values(), job.input_uuids)
        inputs = {"job": encode(job), "references": references, "blobs": _blobs_of(blobs.values(), references)}
        a.spawn(_child(a, inputs, "run"), label=label)
    spawned = _spawn_additions(a, additions, labels, statuses, added, stopping, known, blobs)
    names = {**{job.uuid: job.name for job, _ in flow.iterflow()}, **added}
    a.state.merge({"statuses": statuses, "labels": labels, "failures": failures, "stopping": stopping,
                   "names": names, "added": added})
    if ready or spawned:
        a.gather("conduct", when="all_terminal")
        return
    summary = {"flow": flow.uuid, "name": flow.name, "statuses": statuses, "names": names, **stopping}
    put_json(a, FLOW_SUMMARY, summary)
    bad = sorted(uuid for uuid, status in statuses.items() if status in (FAILED, ERRORED))
    if bad:
        described = ", ".join(f"{names.get(uuid, uuid)} ({statuses[uuid]})" for uuid in bad)
        a.fail("jobflow_flow_failed", f"{len(bad)} of {len(statuses)} jobs of flow {flow.name!r} did not "
               f"succeed: {described}", details={"failures": failures, "statuses": statuses})
        return
    # As jobflow's run_locally: a flow stopped by stop_jobflow, or with jobs stop_children skipped,
    # did not finish successfully.
    skipped = sorted(uuid for uuid, status in statuses.items() if status in (STOPPED, NOT_RUN))
    if stopping.get("stopped_by") or skipped:
        by = stopping.get("stopped_by")
        cause = (f"{names.get(by, by)} returned stop_jobflow" if by else "stop_children of "
                 + ", ".join(names.get(uuid, uuid) for uuid in stopping.get("stop_children", ())))
        a.fail("jobflow_flow_stopped", f"flow {flow.name!r} was stopped ({cause}): {len(skipped)} of "
               f"{len(statuses)} jobs did not run", details={"statuses": statuses, **stopping})
        return
    a.succeed()


# ----------------------------------------------------------------------------------------- one job
@run.step(name="run")
def run_job(a: Attempt) -> None:
    """Run one jobflow Job with its parents' outputs in a JobStore; store its outputs; follow its Response."""
    import traceback

    from jobflow import JobStore
    from maggma.stores import MemoryStore

    job = _load(a, "job")
    if job is None:
        return
    references = list(a.input("references", []))
    given = list(a.input("blobs", []))
    stores = _AdditionalStores(MemoryStore)
    for blob in given:
        stores[blob["store"]].update([{k: v for k, v in blob.items() if k != "store"}], key="blob_uuid")
    store = JobStore(MemoryStore(), additional_stores=stores)
    store.connect()
    if references:
        store.docs_store.update([dict(doc) for doc in references], key=["uuid", "index"])
    try:
        response = job.run(store=store, job_dir=a.workdir)
    except Exception as error:  # noqa: BLE001 - a jobflow job that raises is that job's failure
        a.fail("jobflow_job_failed", f"jobflow job {job.name!r} raised {type(error).__name__}: {error}",
               details={"uuid": job.uuid, "index": job.index, "traceback": traceback.format_exc()[-4000:]})
        return
    own = [_plain(doc) for doc in store.docs_store.query({"uuid": job.uuid})]
    put_documents(a, own)
    own_blobs = [{**_plain(blob), "store": name} for name, blob_store in stores.items()
                 for blob in blob_store.query({"job_uuid": job.uuid})]
    put_documents(a, own_blobs, BLOBS)
    # stop_jobflow: jobflow's run_locally returns before running the job's diversions, and so does this.
    stopped = bool(response.stop_jobflow)
    diversions = [] if stopped else [(kind, getattr(response, kind)) for kind in DIVERSIONS
                                     if getattr(response, kind) is not None]
    addition = None if stopped else response.addition
    put_json(a, RESPONSE, {
        "uuid": job.uuid, "index": job.index, "name": job.name,
        "stop_children": bool(response.stop_children), "stop_jobflow": stopped,
        "diversions": [kind for kind, _ in diversions], "addition": addition is not None,
        "stored_data": response.stored_data is not None,
    })
    if addition is not None:
        # An addition joins the flow beside the job's children, which do not wait for it: the
        # conductor spawns it once this job has succeeded (only a detour re-parents the children).
        put_json(a, ADDITION, encode(addition))
    if not diversions:
        a.succeed()
        return
    available, blobs = references + own, given + own_blobs
    for kind, flow in diversions:
        a.spawn(_child(a, {"flow": encode(flow), "references": available, "blobs": blobs}, "conduct"),
                label=label_for(kind, flow.uuid))
    a.gather("absorb", when="all_terminal")


@run.step
def absorb(a: Attempt) -> None:
    """Take the outputs of the replace/detour flows a job spawned; the job fails when one of them failed."""
    put_documents(a, [doc for child in a.children.succeeded for doc in read_documents(child.data).values()])
    put_documents(a, [blob for child in a.children.succeeded for blob in read_documents(child.data, BLOBS).values()],
                  BLOBS)
    failed = [child.label for child in a.children.failed]
    if failed:
        a.fail("jobflow_diversion_failed", f"the replace/detour flows of this job's Response did not succeed: "
               f"{', '.join(failed)}", details={"failed": failed})
        return
    a.succeed()


class _AdditionalStores(dict):
    """A job's additional stores (``@job(data=True)``): each name a connected in-memory store on first use."""

    def __init__(self, factory: Any) -> None:
        super().__init__()
        self._factory = factory

    def __missing__(self, name: str) -> Any:
        created = self._factory(key="blob_uuid")
        created.connect()
        self[name] = created
        return created


def _plain(document: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document without the store's own ``_id``, as JSON."""
    return encode({key: value for key, value in document.items() if key != "_id"})


def main() -> int:
    """The packaged runner's entry point; a machine without the engine fails the job saying which extra to install."""
    try:
        import jobflow  # noqa: F401 - probing the extra before dispatching
    except ImportError as error:
        attempt = Attempt.initialize()
        attempt.fail("language_engine_missing", f"the jobflow engine is not installed where this job runs "
                     f"({error}); install it there: {LANGUAGE.install_hint}", details={"extra": LANGUAGE.extra})
        return 0
    return run.main()
