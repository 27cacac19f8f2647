"""Submit up to N managers of one workspace through a batch system, as many as the site allows.

The batch system reports the site's limits (:meth:`BatchSystem.submit_limits`),
the domain rule decides how many to submit, and they are submitted one by one.
When the scheduler refuses one after others went in (a limit the reports did not
show, or jobs another session queued meanwhile), submission stops there and the
report says so; a refusal before the first one is an error. Spec: 000 "Running on
a remote".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..domain.submit_limits import SubmitLimits, allowed_submissions, unknown_partition
from ..ports import BatchSystem, BatchSystemError


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
