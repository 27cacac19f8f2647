"""Submit up to N managers of one workspace through a batch system, as many as the site allows.

The batch system reports the site's limits (:meth:`BatchSystem.submit_limits`),
the domain rule decides how many to submit, and they are submitted one by one.
When the scheduler refuses one after others went in (a limit the reports did not
show, or jobs another session queued meanwhile), submission stops there and the
report says so; a refusal before the first one is an error. Spec: 000 "Running on
a remote".

Many managers may serve one workspace, so a manager already queued or running is
no reason to refuse another; :func:`serving_managers` names them, so that a
second ``run`` is never silent about the first (:func:`serving_note`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..domain.submit_limits import SubmitLimits, allowed_submissions, unknown_partition
from ..ports import BatchJobStatus, BatchSystem, BatchSystemError, TransportError
from .forwarding import RemoteSession, recorded_job_ids
from .remotes import RemoteError

#: How many of the most recent manager jobs a workspace records ``run`` asks the scheduler about.
RECENT_JOBS = 200


class SubmitLimitError(BatchSystemError):
    """No manager was submitted because a site limit admits none (one line: the reason)."""


@attrs.frozen
class ManagerSubmission:
    """What one ``run REMOTE:WS --managers N`` submitted, and why not more."""

    requested: int
    job_ids: tuple[str, ...]
    reason: str
    limits: SubmitLimits

    @property
    def summary(self) -> str:
        return f"submitted {len(self.job_ids)} of {self.requested} managers: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "submitted": len(self.job_ids),
            "job_ids": list(self.job_ids),
            "reason": self.reason,
            "limits": self.limits.as_json(),
        }


def submit_managers(
    batch: BatchSystem, script: str, *, workdir: str, requested: int, settings: Mapping[str, Any],
    workspace: str | None = None,
) -> ManagerSubmission:
    """Submit ``script`` up to ``requested`` times to run in ``workdir``; raise :class:`SubmitLimitError` for none.

    When the scheduler refuses the first one and the script's partition is one the scheduler
    does not list, the error names the setting, the site's partitions and (with ``workspace``,
    how the user names the workspace, ``REMOTE:WS``) the command that changes it.
    """
    limits = batch.submit_limits(settings)
    allowance = allowed_submissions(requested, limits)
    if allowance.count == 0:
        raise SubmitLimitError(f"{batch.name}: submitted 0 of {requested} managers: {allowance.reason}; "
                               f"{allowance.fix}")
    job_ids: list[str] = []
    reason = allowance.reason
    for _ in range(allowance.count):
        try:
            job_ids.append(batch.submit(script, workdir=workdir))
        except BatchSystemError as error:
            if not job_ids:
                hint = unknown_partition(limits)
                if hint is None:
                    raise
                command = (f" ('httk workflow workspace settings set {workspace} {limits.partition_setting} NAME')"
                           if workspace and limits.partition_setting else "")
                raise type(error)(f"{error}; {hint}{command}") from None
            reason = f"the scheduler refused the next one ({error}); {allowance.reason}"
            break
    return ManagerSubmission(requested, tuple(job_ids), reason, limits)


@attrs.frozen
class ServingManager:
    """A manager of the workspace that is queued or running already: a batch job, or a live registered manager."""

    #: ``batch`` (a job of the batch system that ``run`` submitted) or ``registered`` (live in the workspace).
    source: str
    #: The batch job id, or the manager id.
    id: str
    #: The scheduler's word (``PENDING``, ``RUNNING``...), or ``live``.
    state: str
    #: The command that cancels (drains) it (``None``: the batch system does not spell one), and ``where``.
    cancel: str | None
    where: str

    def describe(self, batch_name: str) -> str:
        if self.source == "batch":
            return f"{batch_name} job {self.id} ({self.state})"
        return f"manager {self.id} (live on {self.where})"

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def cancel_command(batch: BatchSystem, job_ids: Sequence[str]) -> str | None:
    """The command a user types to cancel the batch jobs ``job_ids``, on the batch system's machine.

    The batch system's own cancel command (``scancel 12 13``, ``qdel 12``). Only one whose
    job ids are pids (``job_ids_are_pids``: ``local``, where the id is the manager's pid)
    is spelled ``kill -TERM PID``: SIGTERM drains a manager, which is what cancelling one
    does, and its cancel is a shell program nobody types. ``None`` for a plug-in that does
    not spell its cancel as a command.
    """
    if job_ids_are_pids(batch):
        return shlex.join(["kill", "-TERM", *(job_id.split(".", 1)[0] for job_id in job_ids)])
    argv = getattr(batch, "cancel_argv", None)
    words = [str(word) for word in argv(list(job_ids))] if callable(argv) else []
    return shlex.join(words) if words else None


def job_ids_are_pids(batch: BatchSystem) -> bool:
    """Whether ``batch`` says its job ids are the managers' pids (a plug-in that does not say: they are not)."""
    return getattr(batch, "job_ids_are_pids", False) is True


def serving_managers(
    batch: BatchSystem, jobs: Mapping[str, BatchJobStatus], registered: Sequence[Mapping[str, Any]], *, remote: str
) -> list[ServingManager]:
    """The batch ``jobs`` still queued or running, then the live ``registered`` managers none of them is (pure).

    ``jobs`` are the statuses of the manager jobs the workspace's batch directory records,
    ``registered`` what ``workspace managers --json`` lists. Under a batch system whose job
    ids are pids (``local``) a registered manager whose pid is a job's id is that job, and
    named once; a scheduler's job id says nothing about the pid on its node (and the two
    number ranges overlap), so under one a running job is named twice, once as each.
    ``remote`` is where the batch commands are typed.
    """
    queued = [job_id for job_id, status in jobs.items() if not status.finished]
    out = [ServingManager("batch", job_id, jobs[job_id].state, cancel_command(batch, [job_id]), remote)
           for job_id in queued]
    pids = {job_id.split(".", 1)[0] for job_id in queued} if job_ids_are_pids(batch) else set()
    for manager in registered:
        if not manager.get("live") or str(manager.get("pid")) in pids:
            continue
        host = str(manager.get("host") or remote)
        out.append(ServingManager("registered", str(manager.get("manager_id")), "live",
                                  shlex.join(["kill", "-TERM", str(manager.get("pid"))]), host))
    return out


def already_serving(session: RemoteSession, workspace: str, workdir: str) -> list[ServingManager]:
    """The managers already queued or running for ``workspace`` there: its batch ``workdir``'s jobs, and its registry.

    The jobs are the most recent :data:`RECENT_JOBS` the output files in ``workdir``
    name, as the scheduler reports them; the registry is ``workspace managers --json``.
    What cannot be read is left out: this is advice, never a reason not to submit.
    """
    try:
        job_ids = (recorded_job_ids(session, workdir) or [])[-RECENT_JOBS:]
        jobs = session.batch.status(job_ids) if job_ids else {}
    except (BatchSystemError, TransportError):
        jobs = {}
    try:
        registered = session.httk_json(["workflow", "workspace", "managers", "--json", "--", workspace])
    except (RemoteError, TransportError):
        registered = []
    rows = [row for row in registered if isinstance(row, dict)] if isinstance(registered, list) else []
    return serving_managers(session.batch, jobs, rows, remote=session.remote.name)


def serving_note(batch: BatchSystem, found: Sequence[ServingManager], workspace: str, remote: str) -> str:
    """One line: which managers already serve ``workspace``, that another is submitted anyway, and how to cancel.

    Not counted: under a scheduler a running job is also a live registered manager.
    """
    named = ", ".join(manager.describe(batch.name) for manager in found)
    jobs = [manager.id for manager in found if manager.source == "batch"]
    cancels = []
    if jobs:
        command = cancel_command(batch, jobs)
        cancels.append(f"'{command}' on {remote}" if command else f"cancel {batch.name} job(s) {' '.join(jobs)} "
                       f"on {remote}")
    cancels += [f"'{manager.cancel}' on {manager.where}" for manager in found if manager.source == "registered"]
    return (f"{workspace} is already served by {named}; submitting another all the same (many managers may "
            f"serve one workspace); to cancel: {' and '.join(cancels)}")
