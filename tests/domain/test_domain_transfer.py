"""A transferring job is the transfer's: no operator request applies to it (domain rule)."""

from __future__ import annotations

import pytest

from httk.workflow.domain.frames import StateFrame
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import RetryPolicy
from httk.workflow.domain.requests import ACTIONS, plan_request


@pytest.mark.parametrize("action", ACTIONS)
def test_every_request_on_a_transferring_job_is_refused_naming_the_transfer(action):
    frame = StateFrame(workspace_id="w", job_id="j", job_key="j", placement="p", generation=3,
                       kind=StateKind.TRANSFERRING, event="transfer_detach", previous_record_ref=None,
                       created_at=1.0, priority=0, step="main")
    plan = plan_request(action, StateKind.TRANSFERRING, frame, RetryPolicy(), step="main")
    assert not plan.applies
    assert plan.refusal.startswith("a transferring job belongs to an unfinished transfer; finish that first")
