"""What the environment a manager gives a runner says beyond the attempt's ``context.json``.

Helpers that run inside a runner without an :class:`~httk.workflow.sdk.Attempt`
(``ProcessSupervisor``, the runtime utilities, the VASP helpers, the Bash bridge's
``job_prepare`` and ``error``) learn the workspace's durability here. Spec:
docs/workflow_filesystem_api.md, the runner environment table.
"""

from __future__ import annotations

import os

DURABLE_ENV = "HTTK_WORKFLOW_DURABLE"


def durable_from_env(default: bool = True) -> bool:
    """Whether ``HTTK_WORKFLOW_DURABLE`` asks for synced publication (unset: ``default``; 0, false, no: not)."""
    value = os.environ.get(DURABLE_ENV)
    if value is None:
        return default
    return value not in ("0", "false", "no", "")
