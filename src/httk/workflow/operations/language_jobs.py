"""Language jobs and converted v1 tasks at submission: a packaged runner published, a payload submitted.

:func:`submit_flow` turns a jobflow ``Flow`` (or one ``Job``) into the conductor job
of :mod:`..languages.jobflow_runner`: its job.json pins the packaged runner
``languages/jobflow`` of the workspace runner store by digest and carries the
serialized flow as its ``flow`` input; the conductor spawns one job per jobflow
``Job`` as the flow runs. :func:`publish_packaged_runner` publishes a packaged
runner directory (``languages/jobflow``, ``compat/httk-v1``) the way ``job new``
publishes a shipped workflow: its regular files, never caches, content addressed,
so an unchanged package is a no-op and a newer one replaces the name while old jobs
keep the digest they pinned. Spec: 000 "precheck" (language jobs), "Runner contract".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..domain.model import JobKey, ValidationError, check_placement, check_tag
from ..languages.realization import LANGUAGES, packaged_runner_dir
from ..protocol import JOB_FILE, JobSpec
from ..store.digests import fs_digest
from ..store.runners import publish_runner, stage_tree
from ..store.workspaces import WorkspaceHandle
from .submission import Submitted, check_path_lengths, job_paths, submit

DEFAULT_PLACEMENT = "jobflow"


class LanguageJobError(ValueError):
    """A language job that is refused before anything is written."""


def publish_packaged_runner(handle: WorkspaceHandle, source: str, name: str, scratch: str) -> dict[str, Any]:
    """Publish the packaged runner directory ``source`` as ``name``; returns its job.json reference."""
    tree = f"{scratch}/runner"
    stage_tree(handle.fs, source, tree, durable=handle.durable)
    reference = {"path": name, "sha256": fs_digest(handle.fs, tree), "source": "workspace"}
    publish_runner(handle.fs, handle.layout, tree, name, replace=True, durable=handle.durable)
    return reference


def submit_flow(
    workspace: Any,
    flow: Any,
    *,
    placement: str = DEFAULT_PLACEMENT,
    tag: str | None = None,
    name: str | None = None,
    pool: str | None = None,
    capabilities: tuple[str, ...] = (),
    priority: int = 0,
    module_sources: Callable[[list[str]], Mapping[str, str]] | None = None,
) -> Submitted:
    """Submit a jobflow ``Flow`` (a ``Job`` or a list of them is wrapped) as one conductor job of ``workspace``.

    ``workspace`` is a :class:`~httk.workflow.workspace.Workspace` or its handle. The
    conductor runs at ``placement``, and so do the jobs it spawns, one per jobflow
    ``Job``. Refusals (a bad placement or tag, an object that is no flow) write nothing.

    ``module_sources`` is given the top-level modules decoding the flow imports and
    returns the source files (relative path -> text) of those that must travel with the
    job (``languages.installation.local_module_sources``: the ones not installed); the
    runner puts them on its ``sys.path`` before it decodes, in this job and its children.
    """
    from jobflow import Flow, Job
    from jobflow.core.flow import get_flow

    from ..languages.jobflow_codec import encode, referenced_modules

    handle: WorkspaceHandle = getattr(workspace, "handle", workspace)
    if not isinstance(flow, Flow | Job | list | tuple):
        raise LanguageJobError(f"expected a jobflow Flow or Job, got {type(flow).__name__}; give a function "
                               "that returns one (e.g. --flow mypackage.flows:make_flow)")
    try:
        flow = get_flow(list(flow) if isinstance(flow, tuple) else flow)
        chosen = check_placement(placement)
        if tag is not None:
            check_tag(tag)
        document = encode(flow)
        modules = dict(module_sources(referenced_modules(document))) if module_sources else {}
    except (ValidationError, ValueError, TypeError) as error:
        raise LanguageJobError(str(error)) from None
    if "__main__" in referenced_modules(document):
        raise LanguageJobError("the flow's jobs are defined in __main__, which no runner can import; define them "
                               "in a module (e.g. myflows.py) and import it")
    language = LANGUAGES["jobflow"]
    fs, durable = handle.fs, handle.durable
    key = JobKey(handle.ports.ids.new_id(), tag)
    scratch = f"{handle.layout.tmp}/new-{key.job_id}"
    payload = f"{scratch}/payload"
    source = packaged_runner_dir("jobflow")
    try:
        spec_values: dict[str, Any] = {"pool": pool} if pool else {}
        spec = JobSpec(
            name=name or flow.name or "Flow",
            workflow="jobflow",
            runner_source="workspace",
            runner_path=language.runner_name,
            runner_sha256="0" * 64,
            initial_step="conduct",
            inputs={"flow": document, "references": [], **({"modules": modules} if modules else {})},
            priority=priority,
            capabilities=capabilities,
            data_mode="transactional",
            declarations={"jobflow": {"flow_uuid": flow.uuid, "jobs": len(flow.all_uuids)}},
            tag=tag,
            **spec_values,
        )
        check_path_lengths(job_paths(handle, payload, chosen, key, staging=None), chosen)
        reference = publish_packaged_runner(handle, source, language.runner_name, scratch)
        spec = attrs.evolve(spec, runner_sha256=reference["sha256"])
        fs.write_atomic(f"{payload}/{JOB_FILE}", spec.to_bytes(), durable=durable)
        return submit(handle, payload, chosen, move=True, tag=tag, job_id=key.job_id)
    finally:
        fs.rmtree(scratch)

