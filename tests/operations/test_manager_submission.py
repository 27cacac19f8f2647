"""Submitting N managers through the BatchSystem port: as many as the limits admit, stopping at a refusal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from httk.workflow.domain.submit_limits import SubmitLimits
from httk.workflow.operations.manager_submission import SubmitLimitError, submit_managers
from httk.workflow.ports import BatchJobStatus, BatchSystemError


class ScriptedBatch:
    """A BatchSystem double: fixed limits, numbered job ids, and a scheduler refusal after ``accepts`` jobs."""

    name = "scripted"

    def __init__(self, limits: SubmitLimits, *, accepts: int | None = None) -> None:
        self.limits = limits
        self.accepts = accepts
        self.submitted: list[tuple[str, str]] = []
        self.asked: list[Mapping[str, Any]] = []

    def compose_script(self, workspace_path: str, settings: Mapping[str, Any], manager_args: Sequence[str],
                       httk_command: Sequence[str], *, workers: int | None = None) -> str:
        return f"run {workspace_path}\n"

    def submit(self, script: str, *, workdir: str) -> str:
        if self.accepts is not None and len(self.submitted) >= self.accepts:
            raise BatchSystemError("scripted: sbatch failed (exit 1): sbatch: error: QOSMaxSubmitJobPerUserLimit")
        self.submitted.append((script, workdir))
        return str(100 + len(self.submitted))

    def status(self, job_ids: Sequence[str]) -> Mapping[str, BatchJobStatus]:
        return {}

    def cancel(self, job_ids: Sequence[str]) -> None:
        return None

    def submit_limits(self, settings: Mapping[str, Any]) -> SubmitLimits:
        self.asked.append(settings)
        return self.limits


def test_submits_only_the_room_left_under_max_submit():
    batch = ScriptedBatch(SubmitLimits(max_submit=10, max_submit_source="MaxSubmitJobs", queued=7))
    report = submit_managers(batch, "s\n", workdir="/ws/.httk-workflow/batch", requested=5,
                             settings={"slurm.partition": "batch"})
    assert report.job_ids == ("101", "102", "103")
    assert batch.submitted == [("s\n", "/ws/.httk-workflow/batch")] * 3
    assert batch.asked == [{"slurm.partition": "batch"}]
    assert report.summary == "submitted 3 of 5 managers: MaxSubmitJobs is 10 and 7 of your jobs are already queued"
    assert report.as_json()["submitted"] == 3 and report.as_json()["limits"]["max_submit"] == 10


def test_none_admitted_is_a_refusal_and_submits_nothing():
    batch = ScriptedBatch(SubmitLimits(partition="batch", partition_state="DRAIN"))
    with pytest.raises(SubmitLimitError) as refused:
        submit_managers(batch, "s\n", workdir="/w", requested=3, settings={})
    assert str(refused.value) == ("scripted: submitted 0 of 3 managers: partition batch is DRAIN: it accepts no new "
                                  "jobs; choose another partition in the workspace's settings, or wait until it is UP")
    assert batch.submitted == []


def test_a_scheduler_refusal_after_some_stops_there_and_is_reported():
    batch = ScriptedBatch(SubmitLimits(notes=("no accounting",)), accepts=2)
    report = submit_managers(batch, "s\n", workdir="/w", requested=4, settings={})
    assert report.job_ids == ("101", "102")
    assert report.reason == ("the scheduler refused the next one (scripted: sbatch failed (exit 1): sbatch: error: "
                             "QOSMaxSubmitJobPerUserLimit); no submit limit reported; no accounting")


def test_a_scheduler_refusal_of_the_first_is_its_own_error():
    batch = ScriptedBatch(SubmitLimits(), accepts=0)
    with pytest.raises(BatchSystemError, match="QOSMaxSubmitJobPerUserLimit"):
        submit_managers(batch, "s\n", workdir="/w", requested=2, settings={})


def test_sbatch_refusing_an_unlisted_partition_names_the_setting_the_partitions_and_the_command():
    limits = SubmitLimits(unknown_partitions=("nosuchpart",), site_partitions=("batch", "debug"),
                          partition_setting="slurm.partition")
    batch = ScriptedBatch(limits, accepts=0)
    with pytest.raises(BatchSystemError) as refused:
        submit_managers(batch, "s\n", workdir="/w", requested=1, settings={"slurm.partition": "nosuchpart"},
                        workspace="ci:walk")
    assert str(refused.value) == (
        "scripted: sbatch failed (exit 1): sbatch: error: QOSMaxSubmitJobPerUserLimit; slurm.partition names "
        "partition nosuchpart, which the scheduler does not list (its partitions: batch, debug); set "
        "slurm.partition to one of them ('httk workflow workspace settings set ci:walk slurm.partition NAME')")
    # A refusal with the partition known to the site is left as the scheduler worded it.
    with pytest.raises(BatchSystemError) as plain:
        submit_managers(ScriptedBatch(SubmitLimits(site_partitions=("batch",)), accepts=0), "s\n", workdir="/w",
                        requested=1, settings={}, workspace="ci:walk")
    assert str(plain.value).endswith("QOSMaxSubmitJobPerUserLimit")
