"""Transactional data: whether a commit applies the data operations an outcome staged.

Owns the rule that only a job whose ``data.mode`` is ``transactional`` may stage
``put`` and ``remove`` operations. An outcome of any other job that stages them is
a protocol error, and its operations are not applied, so no data tree ever exists
for a job that did not declare one. How the operations are applied (exactly once,
never outside the data tree) is the transaction service's.
Spec: 001 "Data and workdir changes".
"""

from __future__ import annotations

import attrs

from httk.workflow.domain.model import Failure

TRANSACTIONAL = "transactional"


@attrs.frozen
class StagedDataDecision:
    """What a commit does with the data operations an outcome staged."""

    #: Apply the staged transaction to the job's data tree.
    apply: bool
    #: The failure the outcome becomes instead of what it published; ``None`` when it stands.
    failure: Failure | None = None


def decide_staged_data(data_mode: str, *, staged: bool) -> StagedDataDecision:
    """The decision for an outcome that did (``staged``) or did not stage data operations."""
    if not staged:
        return StagedDataDecision(apply=False)
    if data_mode != TRANSACTIONAL:
        return StagedDataDecision(apply=False, failure=Failure(
            "protocol_error", f"the outcome stages data operations but the job's data mode is {data_mode}"))
    return StagedDataDecision(apply=True)
