"""``v1 convert``: an unchanged httk v1 task directory becomes a payload run by the packaged v1 runner.

The payload is the task directory's files as they are (``ht_steps``, ``ht.config``,
inputs, an ``ht.run.current`` of a task stopped mid-run) plus a ``job.json`` that
pins the packaged runner ``compat/httk-v1`` of the workspace runner store by
digest, starts at the step the directory name records, and claims from the pool
``taskset`` (``httk workflow manager run --pool taskset``). The v1 priority (1 first
... 5 last) becomes the job priority ``3 - p``, and the v1 fields are kept in the
``v1`` input. Everything a user can get wrong is refused before the first write:
not a v1 task, a task that already ended, no ``ht_steps``/``ht_run``, an output that
exists. Spec: 000 "Runner contract"; docs/v1_compatibility.md.
"""

from __future__ import annotations

import posixpath

import attrs

from ..domain.model import ValidationError, check_placement, check_step
from ..languages.realization import V1_RUNNER_NAME, packaged_runner_dir
from ..languages.v1_format import ENDED, TaskName, V1FormatError, parse_task_name, tag_for, task_job_spec
from ..protocol import JOB_FILE, PRIVATE_DIR, JobSpec
from ..store.workspaces import WorkspaceHandle
from .language_jobs import publish_packaged_runner
from .submission import Submitted, submit

DEFAULT_PLACEMENT = "httk-v1"


class ConversionError(ValueError):
    """A task directory that cannot be converted; nothing was written."""


@attrs.frozen
class Converted:
    """A converted task: where its payload is (or was, once submitted), its definition and its v1 name."""

    payload: str
    spec: JobSpec
    task: TaskName
    submitted: Submitted | None = None


def _task_name(handle: WorkspaceHandle, source: str) -> TaskName:
    fs = handle.fs
    info = fs.lstat(source)
    if info is None or not info.is_dir or info.is_symlink:
        raise ConversionError(f"{source}: not a directory; give the path of a v1 task directory (ht.task.…)")
    try:
        task = parse_task_name(posixpath.basename(source))
    except V1FormatError as error:
        raise ConversionError(f"{error}; rename it the way the v1 taskmanager names tasks, e.g. "
                              "ht.task.any.mytask.start.0.unclaimed.3.waitstart") from None
    if task.status in ENDED:
        raise ConversionError(f"{source}: the task is {task.status} already; to run it again, rename it to "
                              f"{task.with_status('waitstep')} first (as with the v1 taskmanager)")
    if not fs.exists(f"{source}/ht_steps") and not fs.exists(f"{source}/ht_run"):
        raise ConversionError(f"{source}: has neither ht_steps nor ht_run; a v1 task runs one of them")
    for reserved in (JOB_FILE, PRIVATE_DIR):
        if fs.lstat(f"{source}/{reserved}") is not None:
            raise ConversionError(f"{source}: holds {reserved}, which a payload reserves; rename it first")
    try:
        check_step(task.step)
    except ValidationError as error:
        raise ConversionError(f"{source}: the task's step {task.step!r} cannot be a job step ({error})") from None
    return task


def convert(
    handle: WorkspaceHandle,
    source: str,
    *,
    output: str | None = None,
    placement: str | None = None,
    pool: str = "taskset",
) -> Converted:
    """Convert the v1 task at ``source`` into ``output``, or (``output`` None) submit it at ``placement``.

    Either way the packaged v1 runner is published into the workspace runner store first.
    """
    fs, durable = handle.fs, handle.durable
    source = posixpath.normpath(source)
    task = _task_name(handle, source)
    chosen = None
    if output is None:
        try:
            chosen = check_placement(placement or DEFAULT_PLACEMENT)
        except ValidationError as error:
            raise ConversionError(str(error)) from None
    elif fs.lstat(output) is not None:
        raise ConversionError(f"{output}: exists already; give --output a new directory")
    job_id = handle.ports.ids.new_id()
    scratch = f"{handle.layout.tmp}/v1-{job_id}"
    target = output if output is not None else f"{scratch}/payload"
    try:
        reference = publish_packaged_runner(handle, packaged_runner_dir("httk_v1"), V1_RUNNER_NAME, scratch)
        spec = task_job_spec(task, reference, source=source, pool=pool)
        fs.copy_tree(source, target, durable=durable)
        fs.write_atomic(f"{target}/{JOB_FILE}", spec.to_bytes(), durable=durable)
        submitted = None
        if chosen is not None:
            submitted = submit(handle, target, chosen, move=True, tag=tag_for(task.taskid), job_id=job_id)
            target = submitted.payload
    except BaseException:
        if output is not None and chosen is None:
            fs.rmtree(output)
        raise
    finally:
        fs.rmtree(scratch)
    return Converted(target, spec, task, submitted)
