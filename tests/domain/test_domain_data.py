"""Staged data operations: applied only for a transactional job, a protocol error for any other."""

from __future__ import annotations

import attrs
import pytest

from httk.workflow.domain.data import StagedDataDecision, decide_staged_data
from httk.workflow.domain.model import DATA_MODES, Failure


@pytest.mark.parametrize("data_mode", DATA_MODES)
def test_an_outcome_that_stages_nothing_applies_nothing_and_stands(data_mode: str) -> None:
    assert decide_staged_data(data_mode, staged=False) == StagedDataDecision(apply=False, failure=None)


def test_a_transactional_job_applies_what_it_staged() -> None:
    assert decide_staged_data("transactional", staged=True) == StagedDataDecision(apply=True, failure=None)


def test_staging_data_without_the_transactional_mode_is_a_protocol_error_naming_the_mode() -> None:
    decision = decide_staged_data("none", staged=True)
    assert decision == StagedDataDecision(apply=False, failure=Failure(
        "protocol_error", "the outcome stages data operations but the job's data mode is none"))


def test_the_decision_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        decide_staged_data("transactional", staged=True).apply = False  # type: ignore[misc]
