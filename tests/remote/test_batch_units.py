"""Batch systems without a scheduler: argv builders, pure parsers, script composition, the base class flow."""

from __future__ import annotations

import shlex

import pytest
from remote_support import RecordingTransport

from httk.workflow.adapters.batch import local, slurm
from httk.workflow.adapters.batch.local import LocalBatchSystem
from httk.workflow.adapters.batch.slurm import SlurmBatchSystem
from httk.workflow.ports import BatchJobStatus, BatchSystemError, CommandResult

WS = "/scratch/rar/my runs"


def test_sbatch_parsable_output():
    assert slurm.parse_sbatch("1234\n") == "1234"
    assert slurm.parse_sbatch("\n77;cluster-a\n") == "77"
    for bad in ("", "Submitted batch job 12\n", "sbatch: error: x\n"):
        with pytest.raises(BatchSystemError, match="not a job id"):
            slurm.parse_sbatch(bad)


def test_squeue_states_and_forgotten_ids():
    text = "11 PENDING\n12 RUNNING\n13 COMPLETED\n14 FAILED\n15 CANCELLED by 0\n16 TIMEOUT\n17 COMPLETING\n"
    ids = [str(n) for n in range(11, 19)]
    states = slurm.parse_squeue(text, ids)
    assert states["11"] == BatchJobStatus("PENDING", finished=False)
    assert states["12"] == BatchJobStatus("RUNNING", finished=False)
    assert states["13"] == BatchJobStatus("COMPLETED", finished=True, succeeded=True)
    assert states["14"] == BatchJobStatus("FAILED", finished=True, succeeded=False)
    assert states["15"] == BatchJobStatus("CANCELLED", finished=True, succeeded=False)
    assert states["16"].succeeded is False
    assert states["17"] == BatchJobStatus("COMPLETING", finished=False)
    assert states["18"] == BatchJobStatus("UNKNOWN", finished=True, succeeded=None)


def test_squeue_refusing_only_forgotten_ids_is_unknown_not_an_error():
    system = SlurmBatchSystem(RecordingTransport())
    refused = CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
    assert system.parse_status(refused, ["5"]) == {"5": slurm.UNKNOWN}
    with pytest.raises(BatchSystemError, match="squeue failed"):
        system.parse_status(CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"), ["5"])


def test_slurm_argv_builders():
    system = SlurmBatchSystem(RecordingTransport())
    assert system.submit_argv("/w/b") == ["sbatch", "--parsable", "--chdir=/w/b"]
    assert system.status_argv(["1", "2"]) == ["squeue", "-h", "-t", "all", "-j", "1,2", "-o", "%i %T"]
    assert system.cancel_argv(["1", "2"]) == ["scancel", "1", "2"]


def test_slurm_script_carries_directives_from_settings():
    settings = {
        "slurm.account": "proj-1",
        "slurm.partition": "batch",
        "slurm.time_limit": "1-00:00:00",
        "slurm.nodes": 1,
        "slurm.cpus_per_task": 8,
        "slurm.reservation": "maint",
        "slurm.qos": "ignored: only the six directives are the adapter's",
        "manager.workers": 8,
        "vasp.command": "srun -n 32 vasp_std",
    }
    script = slurm.compose_script(WS, settings, ["--pool", "gpu"], ["/opt/httk venv/bin/httk"])
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=httk-my_runs",
        "#SBATCH --output=slurm-%j.out",
        "#SBATCH --account=proj-1",
        "#SBATCH --partition=batch",
        "#SBATCH --reservation=maint",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --nodes=1",
        "#SBATCH --cpus-per-task=8",
    ]
    assert "qos" not in script
    command = lines[-1]
    assert command.startswith("exec ")
    assert shlex.split(command[len("exec "):]) == [
        "/opt/httk venv/bin/httk", "workflow", "run", WS, "--workers", "8", "--pool", "gpu",
    ]


def test_workers_come_from_the_option_then_the_setting_then_one():
    def workers(settings, given=None):
        argv = shlex.split(slurm.compose_script("/w", settings, [], ["httk"], workers=given).splitlines()[-1])
        return argv[argv.index("--workers") + 1]

    assert workers({}) == "1"
    assert workers({"manager.workers": 4}) == "4"
    assert workers({"manager.workers": 4}, given=2) == "2"
    for bad in ({"manager.workers": 0}, {"manager.workers": "4"}, {"manager.workers": True}):
        with pytest.raises(BatchSystemError, match="manager.workers must be a positive integer"):
            workers(bad)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("slurm.partition", "batch\n#SBATCH --uid=0"),
        ("slurm.partition", "two words"),
        ("slurm.account", 7),
        ("slurm.time_limit", "tomorrow"),
        ("slurm.time_limit", 0),
        ("slurm.nodes", "lots"),
        ("slurm.cpus_per_task", 0),
        ("slurm.cpus_per_task", "8"),
        ("slurm.nodes", True),
    ],
)
def test_a_value_that_could_break_a_directive_is_refused_naming_the_setting(setting, value):
    with pytest.raises(BatchSystemError, match=f"setting {setting} must be"):
        slurm.compose_script("/w", {setting: value}, [], ["httk"])


def test_accepted_directive_spellings():
    assert slurm.directive_value("slurm.time_limit", 90) == "90"
    assert slurm.directive_value("slurm.time_limit", "02:00:00") == "02:00:00"
    assert slurm.directive_value("slurm.time_limit", "UNLIMITED") == "UNLIMITED"
    assert slurm.directive_value("slurm.nodes", "1-4") == "1-4"
    assert slurm.directive_value("slurm.partition", "short,long") == "short,long"


def test_submit_creates_the_workdir_then_sends_the_script_on_stdin():
    transport = RecordingTransport(CommandResult(0, "", ""), CommandResult(0, "42\n", ""))
    system = SlurmBatchSystem(transport)
    assert system.submit("#!/bin/sh\necho hi\n", workdir="/w/.httk-workflow/batch") == "42"
    assert transport.calls == [
        (["mkdir", "-p", "--", "/w/.httk-workflow/batch"], None),
        (["sbatch", "--parsable", "--chdir=/w/.httk-workflow/batch"], "#!/bin/sh\necho hi\n"),
    ]


def test_a_failing_command_is_one_line_naming_the_program():
    transport = RecordingTransport(CommandResult(0, "", ""), CommandResult(1, "", "sbatch: error: invalid partition\n"))
    with pytest.raises(BatchSystemError, match=r"^slurm: sbatch failed \(exit 1\): sbatch: error: invalid partition$"):
        SlurmBatchSystem(transport).submit("x", workdir="/w")


def test_ids_are_checked_before_they_reach_a_command():
    transport = RecordingTransport()
    system = SlurmBatchSystem(transport)
    assert system.status([]) == {}
    with pytest.raises(BatchSystemError, match="not a slurm job id"):
        system.cancel(["12; rm -rf ~"])
    with pytest.raises(BatchSystemError, match="not a local job id"):
        LocalBatchSystem(transport).status(["12_3"])
    assert transport.calls == []
    system.cancel(["12", "13_2"])
    assert transport.calls == [(["scancel", "12", "13_2"], None)]


def test_local_batch_builders_and_parsers():
    system = LocalBatchSystem(RecordingTransport())
    launch = system.submit_argv("/w/b")
    assert launch[:2] == ["sh", "-c"] and launch[3:] == ["httk-local-batch", "/w/b"]
    assert "setsid nohup sh -s" in launch[2]
    assert system.status_argv(["5", "6"])[3:] == ["httk-local-batch", "5", "6"]
    cancel = system.cancel_argv(["5.77"])
    assert cancel[:2] == ["sh", "-c"] and cancel[3:] == ["httk-local-batch", "5.77"] and "kill -TERM" in cancel[2]
    assert local.parse_pid("4242\n") == "4242"
    assert local.parse_pid("4242.98765\n") == "4242.98765"
    with pytest.raises(BatchSystemError, match="not a process id"):
        local.parse_pid("sh: setsid: not found\n")
    states = local.parse_probe("5 RUNNING\n6 EXITED\n", ["5", "6", "7"])
    assert states == {
        "5": BatchJobStatus("RUNNING", finished=False),
        "6": BatchJobStatus("EXITED", finished=True),
        "7": BatchJobStatus("UNKNOWN", finished=False),
    }


def test_local_script_logs_next_to_the_workdir_and_ignores_slurm_settings():
    script = local.compose_script(WS, {"slurm.partition": "batch", "manager.workers": 3}, ["--idle"], ["httk"])
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and "#SBATCH" not in script
    assert lines[2] == 'exec >"local-$$.out" 2>&1'
    assert shlex.split(lines[3]) == ["exec", "httk", "workflow", "run", WS, "--workers", "3", "--idle", "</dev/null"]
