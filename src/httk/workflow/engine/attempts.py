"""Preparing one attempt: control directory, verified runner copy, workdir, context, environment.

The runner is copied below the attempt control directory, its pinned digest is
verified against that copy, and only the copy is executed, so nothing can change
the bytes between the check and the exec. Nothing of the job travels in the
environment beyond paths and identities: children, inputs and settings are in
``context.json``. Spec: 000 "Runner contract", "Share one runner between many
jobs", "Application settings"; docs/workflow_filesystem_api.md "Attempts".
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping
from typing import Any

import attrs

from .. import codec
from ..attempt_records import ContextDocument
from ..domain.frames import StateFrame
from ..domain.model import Failure
from ..ports import Filesystem
from ..protocol import JOB_FILE, PRIVATE_DIR, JobSpec
from ..store.layout import Layout
from ..store.markers import Marker
from ..store.policy import (
    PolicyError,
    check_setting_name,
    check_setting_value,
    collision_text,
    env_collisions,
    scalar_settings_env,
)
from ..store.runners import RunnerUnavailable, digest_mismatch, resolve_runner

log = logging.getLogger("httk.workflow.manager")

#: The launch failure of a job whose payload holds a file no copy opens (a FIFO, socket or device).
PAYLOAD_UNREADABLE = "payload_unreadable"


class LaunchRefused(Exception):
    """The attempt cannot start; ``failure`` is the canonical failure to record."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.code}: {failure.message}")
        self.failure = failure


@attrs.frozen
class AttemptPlan:
    """Everything needed to start one attempt."""

    control: str
    workdir: str
    data: str | None
    argv: tuple[str, ...]
    env: dict[str, str]
    context: dict[str, Any]


@attrs.frozen
class LaunchSettings:
    """What the composition root tells attempt preparation about this host."""

    python: str
    shell_lib: str
    base_env: Mapping[str, str]
    runner_search_paths: tuple[str, ...] = ()
    manager_id: str = ""
    host: str = ""
    #: The settings-name clashes already warned about, so a fan-out logs each once, not once per attempt.
    #: Not an ``__init__`` argument, so every ``attrs.evolve`` (one per manager) starts an empty set.
    warned_collisions: set[tuple[str, tuple[str, ...]]] = attrs.field(init=False, factory=set, eq=False, repr=False)

    def library_env(self) -> dict[str, str]:
        """Where a Bash runner finds its library, and the interpreter (with httk.workflow) its bridge runs under.

        The library's path is exported under both names: ``HTTK_WORKFLOW_BASH_API`` is the
        httk-workflow 2.1 spelling, also accepted (docs/workflow_filesystem_api.md).
        """
        return {
            "HTTK_WORKFLOW_SHELL_LIB": self.shell_lib,
            "HTTK_WORKFLOW_BASH_API": self.shell_lib,
            "HTTK_WORKFLOW_PYTHON": self.python,
        }


def _entry_point(fs: Filesystem, copy: str) -> str:
    info = fs.lstat(copy)
    if info is not None and info.is_dir:
        for name in ("run", "run.py", "run.sh"):
            if fs.exists(f"{copy}/{name}"):
                return f"{copy}/{name}"
        raise LaunchRefused(Failure("runner_unavailable", f"runner directory {copy} has no run, run.py or run.sh"))
    return copy


def command_for(entry: str, python: str) -> tuple[str, ...]:
    """Python runners run under the manager's interpreter, so ``httk.workflow`` imports."""
    if entry.endswith(".py"):
        return (python, entry)
    if entry.endswith((".sh", ".bash")):
        return ("bash", entry)
    return (entry,)


def copy_job_files(fs: Filesystem, source: str, destination: str, code: str, what: str) -> None:
    """``copy_tree`` of one job's own files; one that no copy opens is that job's launch failure ``code``.

    A FIFO, socket or device in a payload or a runner directory (put there after submission,
    whose copy refuses them too) is refused by the copy unread: without this it would surface as
    an unexpected error of the claim, and the job would be refused and left claimed at every pass.
    The tree is searched for the culprit only after a copy failed, so a good copy costs nothing more.
    """
    try:
        fs.copy_tree(source, destination, durable=False, staged=True)
    except OSError:
        special = special_file(fs, source)
        if special is None:
            raise  # not the job's files: the workspace's own fault (a full disk, say), as before
        raise LaunchRefused(Failure(code, f"{what}: {special} is not a regular file, directory or symlink")) from None


def special_file(fs: Filesystem, path: str) -> str | None:
    """The first name at or below ``path`` that is a FIFO, socket or device (never opened); ``None`` if none."""
    info = fs.lstat(path)
    if info is None or info.is_file or info.is_symlink:
        return None
    if not info.is_dir:
        return path
    for entry in sorted(fs.scandir(path), key=lambda item: item.name):
        if entry.is_symlink or entry.is_file:
            continue
        found = special_file(fs, entry.path) if entry.is_dir else entry.path
        if found is not None:
            return found
    return None


def seed_workdir(fs: Filesystem, payload: str, workdir: str, staging: str, *, durable: bool) -> None:
    """Create ``workdir`` as a copy of the payload without job.json and .httk-job/ (all or nothing)."""
    if fs.exists(workdir):
        return
    fs.rmtree(staging)
    fs.makedirs(staging)
    for entry in fs.scandir(payload):
        if entry.name in (JOB_FILE, PRIVATE_DIR):
            continue
        try:
            copy_job_files(fs, entry.path, f"{staging}/{entry.name}", PAYLOAD_UNREADABLE,
                           "the payload cannot be copied into the workdir")
        except LaunchRefused:
            fs.rmtree(staging)
            raise
    if durable:
        fs.sync_tree(staging)
    try:
        fs.rename(staging, workdir, durable=durable)
    except FileExistsError:
        fs.rmtree(staging)


def control_ordinal(fs: Filesystem, layout: Layout, job_id: str, attempt_id: str, total_attempts: int) -> int:
    """The ordinal that names an attempt's control directory: its total-attempts count, or one past the last.

    An attempt given back uncharged (stopped by a drain, or a claim released before its
    launch) leaves a control directory under the ordinal the job's next attempt has again;
    numbering past it keeps every attempt's directory distinct and in the order they ran.
    """
    highest = 0
    for entry in fs.scandir(layout.job_attempts(job_id)):
        head, _, tail = entry.name.partition("-")
        if head.isdigit() and tail != attempt_id:
            highest = max(highest, int(head))
    return max(total_attempts, highest + 1)


def prepare_attempt(
    fs: Filesystem,
    layout: Layout,
    settings: LaunchSettings,
    *,
    workspace_id: str,
    durable: bool,
    marker: Marker,
    frame: StateFrame,
    spec: JobSpec,
    workspace_settings: dict[str, Any],
    children: list[dict[str, Any]],
    restart: dict[str, Any],
    now: float,
    uid: int,
) -> AttemptPlan:
    """Lay out the control directory of the attempt ``frame`` describes and return how to start it.

    ``uid`` is the manager's account, which a payload runner must belong to.
    """
    job_id = marker.job_id
    attempt_id = frame.attempt_id or ""
    control = layout.attempt_dir(job_id, control_ordinal(fs, layout, job_id, attempt_id, frame.total_attempts),
                                 attempt_id)
    payload = layout.payload(marker.placement, str(marker.key))
    _check_settings(workspace_settings)
    fs.rmtree(control)
    # The runner publishes outcome.ready/ below the control directory, so its name (and a new
    # attempts/<job-id>/'s) must survive a crash: synced below, in one group with its parent's.
    job_attempts = layout.job_attempts(job_id)
    named = [posixpath.dirname(job_attempts), job_attempts] if fs.lstat(job_attempts) is None else [job_attempts]
    fs.makedirs(control)
    try:
        runner_source = resolve_runner(fs, layout, payload, spec, settings.runner_search_paths, uid=uid)
    except RunnerUnavailable as refused:
        raise LaunchRefused(refused.failure) from None
    copy = f"{control}/runner/{posixpath.basename(runner_source)}"
    # Staged: nothing reads the copy before this manager has verified it below.
    copy_job_files(fs, runner_source, copy, "runner_unavailable",
                   f"{spec.runner_source} runner {spec.runner_path!r} cannot be copied")
    mismatch = digest_mismatch(fs, copy, spec)
    if mismatch is not None:
        raise LaunchRefused(mismatch)
    entry = _entry_point(fs, copy)
    if spec.workdir_mode == "isolated":
        workdir = f"{control}/workdir"
    else:
        workdir = layout.persistent_workdir(job_id)
    seed_workdir(fs, payload, workdir, f"{layout.tmp}/seed-{job_id}-{attempt_id}", durable=durable)
    data = None
    if spec.data_mode == "transactional":
        data = f"{layout.data_dir(job_id)}/current"
        fs.makedirs(data, durable=durable)
    context = {
        "format": ContextDocument.FORMAT.name,
        "format_version": ContextDocument.FORMAT.version,
        "workspace": layout.root,
        "workspace_id": workspace_id,
        "job_id": job_id,
        "job_key": str(marker.key),
        "placement": marker.placement,
        "step": frame.step,
        "activation_id": frame.activation_id,
        "activation_ordinal": frame.activation_ordinal,
        "attempt_id": attempt_id,
        "attempt_ordinal": frame.attempt_ordinal,
        "total_attempts": frame.total_attempts,
        "payload": payload,
        "workdir": workdir,
        "data": data,
        "control": control,
        "durable": durable,
        "workdir_mode": spec.workdir_mode,
        "data_mode": spec.data_mode,
        "manager_id": settings.manager_id,
        "host": settings.host,
        "created_at": now,
        "runner": spec.runner,
        "settings": workspace_settings,
        "restart": restart,
        "children": children,
    }
    fs.write_atomic(f"{control}/context.json", codec.encode(context), durable=durable)
    if durable:
        # One group commit for the new directory names, instead of one fsync after each mkdir;
        # everything is durable before the launch transition records the attempt.
        fs.fsync_dirs(named)
    env = dict(settings.base_env)
    collisions = env_collisions(workspace_settings)
    for variable, names in collisions.items():
        if (variable, names) in settings.warned_collisions:
            continue
        settings.warned_collisions.add((variable, names))
        log.warning("job %s: %s in settings.json; it is exported for neither (a runner reads both from "
                    "context.json): unset one with 'httk workflow workspace settings unset' (warned once per "
                    "manager)", marker.key, collision_text(variable, names))
    for name, value in scalar_settings_env(workspace_settings, collisions).items():
        # A real HTTK_* deployment override in the manager's environment outranks the workspace setting.
        env.setdefault(name, value)
    env.update(
        {
            "HTTK_WORKFLOW_CONTEXT": f"{control}/context.json",
            "HTTK_WORKFLOW_CONTROL_DIR": control,
            "HTTK_WORKFLOW_JOB_DIR": payload,
            "HTTK_WORKFLOW_WORKDIR": workdir,
            "HTTK_WORKFLOW_WORKSPACE_DIR": layout.root,
            "HTTK_WORKFLOW_STEP": frame.step,
            "HTTK_WORKFLOW_DURABLE": "1" if durable else "0",
            "HTTK_WORKFLOW_JOB_ID": job_id,
            "HTTK_WORKFLOW_ATTEMPT_ID": attempt_id,
            **settings.library_env(),
        }
    )
    env.pop("HTTK_WORKFLOW_DATA_DIR", None)
    env.pop("HTTK_WORKFLOW_DESCRIBE", None)
    if data is not None:
        env["HTTK_WORKFLOW_DATA_DIR"] = data
    return AttemptPlan(control, workdir, data, command_for(entry, settings.python), env, context)


def _check_settings(workspace_settings: dict[str, Any]) -> None:
    """Each setting as ``settings set`` checks it: a hand-edited bad value fails this job, not the manager."""
    for name, value in workspace_settings.items():
        try:
            # The name too: it becomes an environment variable name, where a NUL would fail the launch itself.
            check_setting_name(name)
            check_setting_value(name, value)
        except PolicyError as error:
            raise LaunchRefused(Failure("setting_invalid", str(error), {"setting": name})) from None
