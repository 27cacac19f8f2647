"""Submitting N managers through the BatchSystem port: as many as the limits admit, stopping at a refusal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from httk.workflow.adapters.batch.local import LocalBatchSystem
from httk.workflow.adapters.batch.slurm import SlurmBatchSystem
from httk.workflow.domain.submit_limits import SubmitLimits
from httk.workflow.operations.manager_submission import (
    SubmitLimitError,
    cancel_command,
    serving_managers,
    serving_note,
    submit_managers,
)
from httk.workflow.ports import BatchJobStatus, BatchSystemError, CommandResult


class RecordingTransport:
    """A transport that runs nothing (the adapters only spell their commands here)."""

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        raise AssertionError(f"nothing is run here: {argv}")


class ScriptedBatch:
    """A BatchSystem double: fixed limits, numbered job ids, and a scheduler refusal after ``accepts`` jobs."""

    name = "scripted"
    job_ids_are_pids = False

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


# -- managers already serving the workspace: named, never refused --------------------------------
def test_queued_and_running_jobs_and_live_managers_are_named_with_how_to_cancel_them():
    slurm = SlurmBatchSystem(RecordingTransport())
    jobs = {"11": BatchJobStatus("COMPLETED", finished=True, succeeded=True),
            "12": BatchJobStatus("RUNNING", finished=False), "13": BatchJobStatus("PENDING", finished=False)}
    registered = [{"manager_id": "m-live", "live": True, "host": "node7", "pid": 4242},
                  {"manager_id": "m-stale", "live": False, "host": "node8", "pid": 99}]
    found = serving_managers(slurm, jobs, registered, remote="kappa")
    assert [(m.source, m.id, m.state, m.cancel, m.where) for m in found] == [
        ("batch", "12", "RUNNING", "scancel 12", "kappa"), ("batch", "13", "PENDING", "scancel 13", "kappa"),
        ("registered", "m-live", "live", "kill -TERM 4242", "node7")]
    assert serving_note(slurm, found, "kappa:runs", "kappa") == (
        "kappa:runs is already served by slurm job 12 (RUNNING), slurm job 13 (PENDING), manager m-live (live on "
        "node7); submitting another all the same (many managers may serve one workspace); to cancel: "
        "'scancel 12 13' on kappa and 'kill -TERM 4242' on node7")
    assert found[0].as_json() == {"source": "batch", "id": "12", "state": "RUNNING", "cancel": "scancel 12",
                                  "where": "kappa"}
    # Nothing queued and nothing live: nothing to say.
    assert serving_managers(slurm, {"11": jobs["11"]}, registered[1:], remote="kappa") == []


def test_a_local_job_is_its_live_manager_and_is_named_once_with_a_kill():
    local = LocalBatchSystem(RecordingTransport())
    found = serving_managers(local, {"4242.987": BatchJobStatus("RUNNING", finished=False)},
                             [{"manager_id": "m-a", "live": True, "host": "login1", "pid": 4242}], remote="here")
    assert [(m.source, m.id, m.cancel) for m in found] == [("batch", "4242.987", "kill -TERM 4242")]
    assert serving_note(local, found, "here:runs", "here").endswith("to cancel: 'kill -TERM 4242' on here")


def test_a_scheduler_job_whose_id_equals_a_live_managers_pid_does_not_hide_that_manager():
    """Slurm ids and pids are both small integers: under a scheduler an equal number is a coincidence."""
    slurm = SlurmBatchSystem(RecordingTransport())
    found = serving_managers(slurm, {"4242": BatchJobStatus("RUNNING", finished=False)},
                             [{"manager_id": "m-live", "live": True, "host": "node7", "pid": 4242}], remote="kappa")
    assert [(m.source, m.id, m.cancel, m.where) for m in found] == [
        ("batch", "4242", "scancel 4242", "kappa"), ("registered", "m-live", "kill -TERM 4242", "node7")]


class ShellCancelBatch(ScriptedBatch):
    """A plug-in scheduler whose cancel is a shell program over its own job ids, which are not pids."""

    name = "shelly"

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["sh", "-c", 'shelly-cancel "$@"', "shelly", *job_ids]


def test_a_shell_cancel_is_spelled_as_the_batch_system_gives_it_unless_its_job_ids_are_pids():
    batch = ShellCancelBatch(SubmitLimits())
    command = cancel_command(batch, ["77"])
    assert command == "sh -c 'shelly-cancel \"$@\"' shelly 77" and "kill" not in command
    found = serving_managers(batch, {"77": BatchJobStatus("RUNNING", finished=False)},
                             [{"manager_id": "m-77", "live": True, "host": "n1", "pid": 77}], remote="r")
    assert [(m.source, m.id) for m in found] == [("batch", "77"), ("registered", "m-77")]
    assert LocalBatchSystem.job_ids_are_pids and not SlurmBatchSystem.job_ids_are_pids


def test_a_batch_system_that_spells_no_cancel_is_named_without_a_command():
    assert cancel_command(ScriptedBatch(SubmitLimits()), ["7"]) is None
    found = serving_managers(ScriptedBatch(SubmitLimits()), {"7": BatchJobStatus("RUNNING", finished=False)}, [],
                             remote="r")
    assert serving_note(ScriptedBatch(SubmitLimits()), found, "r:ws", "r").endswith("to cancel: cancel scripted "
                                                                                   "job(s) 7 on r")
