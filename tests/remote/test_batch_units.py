"""Batch systems without a scheduler: argv builders, pure parsers, script composition, the base class flow.

A composed script is executed by ``sh`` only with a harmless httk_command; LocalBatchSystem also
starts, probes and cancels one real detached process.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from remote_support import RecordingTransport, wait_until

from httk.workflow.adapters.batch import local, slurm
from httk.workflow.adapters.batch.local import LocalBatchSystem
from httk.workflow.adapters.batch.pbs import PbsBatchSystem
from httk.workflow.adapters.batch.slurm import SlurmBatchSystem, parse_sbatch, parse_squeue
from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.operations.forwarding import RemoteSession
from httk.workflow.operations.remotes import Remote, Template
from httk.workflow.ports import BatchCommandMissing, BatchJobStatus, BatchSystemError, CommandResult

WS = "/scratch/rar/my runs"
# compose_script is pure: no command runs through these transports.
SLURM = SlurmBatchSystem(RecordingTransport())
LOCAL = LocalBatchSystem(RecordingTransport())
slurm_script = SLURM.compose_script
local_script = LOCAL.compose_script


def directive(setting: str, value: object) -> str:
    """The ``#SBATCH`` option ``setting`` becomes with ``value``."""
    return {each.setting: each for each in slurm.DIRECTIVES}[setting].line(value)


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
    assert system.parse_status(refused, ["5"]) == {"5": SlurmBatchSystem.forgotten}
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
        "slurm.qos": "long",
        "manager.workers": 8,
        "vasp.command": "srun -n 32 vasp_std",
    }
    script = SLURM.compose_script(WS, settings, ["--pool", "gpu"], ["/opt/httk venv/bin/httk"])
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=httk-my_runs",
        "#SBATCH --output=slurm-%j.out",
        "#SBATCH --account=proj-1",
        "#SBATCH --partition=batch",
        "#SBATCH --reservation=maint",
        "#SBATCH --qos=long",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --nodes=1",
        "#SBATCH --cpus-per-task=8",
    ]
    command = lines[-1]
    assert command.startswith("exec ")
    assert shlex.split(command[len("exec "):]) == [
        "/opt/httk venv/bin/httk", "workflow", "run", WS, "--workers", "8", "--pool", "gpu",
    ]


def test_workers_come_from_the_option_then_the_setting_then_one():
    def workers(settings, given=None):
        argv = shlex.split(SLURM.compose_script("/w", settings, [], ["httk"], workers=given).splitlines()[-1])
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
        SLURM.compose_script("/w", {setting: value}, [], ["httk"])


def test_accepted_directive_spellings():
    assert directive("slurm.time_limit", 90) == "--time=90"
    assert directive("slurm.time_limit", "02:00:00") == "--time=02:00:00"
    assert directive("slurm.time_limit", "UNLIMITED") == "--time=UNLIMITED"
    assert directive("slurm.nodes", "1-4") == "--nodes=1-4"
    assert directive("slurm.partition", "short,long") == "--partition=short,long"


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


def test_a_declared_command_the_shell_cannot_find_reads_like_remote_check():
    # What dash prints for 'exec qsub' without PBS: the raw text is not the message.
    missing = CommandResult(127, "", "qsub: 1: exec: qsub: not found\n")
    system = PbsBatchSystem(RecordingTransport(CommandResult(0, "", ""), missing))
    with pytest.raises(BatchCommandMissing) as raised:
        system.submit("x", workdir="/w")
    assert str(raised.value) == ("batch system pbs: qsub is not installed on the remote; install PBS or "
                                 "choose another template")
    with pytest.raises(BatchCommandMissing, match="squeue is not installed on the remote; install Slurm"):
        SlurmBatchSystem(RecordingTransport(CommandResult(127, "", "sh: squeue: not found\n"))).status(["7"])


def test_a_remote_session_names_the_remote_and_its_check_for_a_missing_command():
    template = Template("ssh-pbs", "ssh", "ssh", "pbs", {})
    session = RemoteSession(Remote("pi", template, {}), RecordingTransport(), batch=None)  # type: ignore[arg-type]
    with pytest.raises(BatchCommandMissing) as raised, session:
        raise BatchCommandMissing("batch system pbs: qsub is not installed on the remote; install PBS or "
                                  "choose another template")
    assert str(raised.value) == ("remote pi: batch system pbs: qsub is not installed on the remote; install PBS "
                                 "or choose another template (remote check pi)")


def test_the_output_file_names_of_a_workdir_give_the_recorded_job_ids():
    names = ["slurm-17.out", "slurm-9.out", "slurm-20_3.out", "notes.txt", "slurm-x.out", "local-5.out"]
    assert SLURM.job_ids_in(names) == ["9", "17", "20_3"]
    assert LOCAL.job_ids_in(names) == ["5"]
    # local: the script copy local-PID.START.sh carries the start time the output name lacks.
    assert LOCAL.job_ids_in(["local-5.out", "local-5.77.sh", "local-12.out", "local-3.4.sh", "local-9.sh"]) == [
        "3.4", "5.77", "9", "12"]
    # PBS names its output after the job name, not the id: it cannot say.
    assert PbsBatchSystem(RecordingTransport()).job_ids_in(names) is None


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
    script = LOCAL.compose_script(WS, {"slurm.partition": "batch", "manager.workers": 3}, ["--idle"], ["httk"])
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and "#SBATCH" not in script
    assert lines[2] == 'exec >"local-$$.out" 2>&1'
    assert shlex.split(lines[3]) == ["exec", "httk", "workflow", "run", WS, "--workers", "3", "--idle", "</dev/null"]


# -- quoting and injection: composed scripts run by sh, hostile settings, parser edge cases ----------
# A harmless "httk" that prints each argument it gets in brackets.
ECHO = ["printf", "[%s]"]


def run_script(script: str, cwd: Path) -> str:
    done = subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=5, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sbatch_directives(script: str) -> list[str]:
    """The lines sbatch reads as directives: every ``#SBATCH`` line before the first command."""
    directives = []
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            directives.append(line)
        elif line.strip() and not line.startswith("#"):
            break
    return directives


# -- the manager command line: every word quoted -------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/scratch/with space/ws", "/s/it's", '/s/"dq"', "/s/$(touch INJECTED)", "/s/`touch INJECTED`",
        "/s/;touch INJECTED", "/s/*", "/s/ü",
    ],
)
def test_slurm_manager_line_quotes_workspace_path_and_args(tmp_path: Path, path: str) -> None:
    args = ["--drain-timeout", "$(touch INJECTED)", "it's"]
    script = slurm_script(path, {}, args, ECHO, workers=3)
    out = run_script(script, tmp_path)
    assert out == "".join(f"[{w}]" for w in ["workflow", "run", path, "--workers", "3", *args])
    assert not (tmp_path / "INJECTED").exists()


def test_httk_command_words_are_quoted_not_expanded(tmp_path: Path) -> None:
    script = slurm_script("/ws", {}, [], ["printf", "[%s]", "$(touch INJECTED)"], workers=1)
    assert run_script(script, tmp_path).startswith("[$(touch INJECTED)]")
    assert not (tmp_path / "INJECTED").exists()


def test_local_script_quotes_path_with_spaces(tmp_path: Path) -> None:
    script = local_script("/a b/$(touch INJECTED)", {}, [], ECHO, workers=2)
    run_script(script, tmp_path)
    outputs = list(tmp_path.glob("local-*.out"))
    assert len(outputs) == 1
    assert outputs[0].read_text() == "[workflow][run][/a b/$(touch INJECTED)][--workers][2]"
    assert not (tmp_path / "INJECTED").exists()


def test_slurm_newline_in_workspace_path_cannot_inject_lines(tmp_path: Path) -> None:
    path = "/s/ws\n#SBATCH --uid=0\ntouch INJECTED\n#"
    with pytest.raises(BatchSystemError, match="control character"):
        slurm_script(path, {"slurm.partition": "batch"}, [], ECHO, workers=1)


def test_local_newline_in_workspace_path_cannot_inject_commands(tmp_path: Path) -> None:
    with pytest.raises(BatchSystemError, match="control character"):
        local_script("/s/ws\ntouch INJECTED\n#", {}, [], ECHO, workers=1)


# -- #SBATCH directives from slurm.* settings ----------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("slurm.partition", "batch\n#SBATCH --uid=0"),
        ("slurm.partition", "batch --uid=0"),
        ("slurm.partition", "batch\r"),
        ("slurm.partition", "$(id)"),
        ("slurm.partition", "a'b"),
        ("slurm.partition", ""),
        ("slurm.partition", 7),
        ("slurm.account", "acc;x"),
        ("slurm.account", "acc\n"),
        ("slurm.reservation", "r\tx"),
        ("slurm.qos", "normal,long"),
        ("slurm.qos", "normal\n#SBATCH --uid=0"),
        ("slurm.qos", 7),
        ("slurm.time_limit", "1:00:00\n#SBATCH --uid=0"),
        ("slurm.time_limit", "1:00:00 --uid=0"),
        ("slurm.time_limit", 0),
        ("slurm.time_limit", True),
        ("slurm.time_limit", 1.5),
        ("slurm.nodes", "0"),
        ("slurm.nodes", "1-2\n"),
        ("slurm.nodes", -1),
        ("slurm.cpus_per_task", "4"),
        ("slurm.cpus_per_task", 0),
        ("slurm.cpus_per_task", True),
    ],
)
def test_directive_values_that_could_break_a_line_are_refused_naming_the_setting(setting: str, value: object) -> None:
    with pytest.raises(BatchSystemError, match=f"setting {setting} must") as caught:
        slurm_script("/ws", {setting: value}, [], ["httk"], workers=1)
    assert "\n" not in str(caught.value)


def test_good_directives_in_fixed_order_and_none_skipped() -> None:
    settings = {
        "slurm.cpus_per_task": 4, "slurm.nodes": "1-2", "slurm.time_limit": "1-02:00:00", "slurm.reservation": None,
        "slurm.partition": "batch,debug", "slurm.account": "proj@x.y+z", "slurm.qos": None, "manager.workers": 5,
    }
    script = slurm_script("/scratch/my ws!", settings, [], ["httk"])
    assert sbatch_directives(script) == [
        "#SBATCH --job-name=httk-my_ws_",
        "#SBATCH --output=slurm-%j.out",
        "#SBATCH --account=proj@x.y+z",
        "#SBATCH --partition=batch,debug",
        "#SBATCH --time=1-02:00:00",
        "#SBATCH --nodes=1-2",
        "#SBATCH --cpus-per-task=4",
    ]
    assert script.splitlines()[-1] == "exec httk workflow run '/scratch/my ws!' --workers 5"


@pytest.mark.parametrize("workers", [0, -1, True, "4", 2.0])
def test_bad_manager_workers_setting_is_refused(workers: object) -> None:
    with pytest.raises(BatchSystemError, match="manager.workers must be a positive integer"):
        slurm_script("/ws", {"manager.workers": workers}, [], ["httk"])


def test_empty_httk_command_is_refused() -> None:
    with pytest.raises(BatchSystemError, match="httk_command is empty"):
        slurm_script("/ws", {}, [], [], workers=1)


# -- sbatch and squeue parsers ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stdout", "job_id"), [("42\n", "42"), ("\n\n42;cluster\n", "42"), ("  42  \n", "42")]
)
def test_parse_sbatch_reads_parsable_ids(stdout: str, job_id: str) -> None:
    assert parse_sbatch(stdout) == job_id


@pytest.mark.parametrize(
    "stdout",
    ["", "\n", "Submitted batch job 42\n", "sbatch: error: Batch job submission failed: Invalid account\n",
     "sbatch: error: x\n42\n", "42_1\n", "-42\n"],
)
def test_parse_sbatch_refuses_anything_but_an_id_in_one_line(stdout: str) -> None:
    with pytest.raises(BatchSystemError) as caught:
        parse_sbatch(stdout)
    assert "\n" not in str(caught.value)


def test_submit_failure_is_one_line_with_sbatch_error() -> None:
    transport = RecordingTransport(
        CommandResult(0, "", ""),
        CommandResult(1, "", "\nsbatch: error: Batch job submission failed: Invalid partition name specified\n"),
    )
    with pytest.raises(BatchSystemError) as caught:
        SlurmBatchSystem(transport).submit("#!/bin/sh\n", workdir="/a b/.httk-workflow/batch")
    assert str(caught.value) == (
        "slurm: sbatch failed (exit 1): sbatch: error: Batch job submission failed: Invalid partition name specified"
    )
    assert transport.calls[0][0] == ["mkdir", "-p", "--", "/a b/.httk-workflow/batch"]
    assert transport.calls[1][0] == ["sbatch", "--parsable", "--chdir=/a b/.httk-workflow/batch"]
    assert transport.calls[1][1] == "#!/bin/sh\n"


def test_parse_squeue_odd_lines_and_states() -> None:
    stdout = "\n  \n7 RUNNING\n8 CANCELLED+\n9 CANCELLED by 0\n10_3 COMPLETED\ngarbage\n11 timeout\n"
    got = parse_squeue(stdout, ["7", "8", "9", "10_3", "11", "12"])
    assert (got["7"].state, got["7"].finished) == ("RUNNING", False)
    assert (got["8"].state, got["8"].succeeded) == ("CANCELLED", False)
    assert (got["9"].state, got["9"].finished) == ("CANCELLED", True)
    assert (got["10_3"].state, got["10_3"].succeeded) == ("COMPLETED", True)
    assert (got["11"].state, got["11"].finished) == ("TIMEOUT", True)
    assert (got["12"].state, got["12"].finished) == ("UNKNOWN", True)


def test_parse_squeue_array_job_listed_by_task_is_not_finished() -> None:
    # Verified against the infra Slurm: squeue -h -t all -j 37 -o '%i %T' prints '37_[1-3] PENDING'.
    got = parse_squeue("37_[1-3] PENDING\n", ["37"])
    assert got["37"].finished is False


def test_parse_status_invalid_job_id_is_unknown_other_failures_one_line() -> None:
    batch = SlurmBatchSystem(RecordingTransport())
    got = batch.parse_status(CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n"), ["5"])
    assert got["5"].state == "UNKNOWN"
    with pytest.raises(BatchSystemError, match="squeue failed"):
        batch.parse_status(CommandResult(1, "", "squeue: error: Unable to contact slurm controller\n"), ["5"])


@pytest.mark.parametrize("job_id", ["", "12 13", "12;id", "-1", "12\n13", "$(id)", "12_", "_1", "١٢"])
def test_slurm_ids_are_checked_before_any_command_runs(job_id: str) -> None:
    transport = RecordingTransport()
    with pytest.raises(BatchSystemError, match="is not a slurm job id"):
        SlurmBatchSystem(transport).status([job_id])
    with pytest.raises(BatchSystemError, match="is not a slurm job id"):
        SlurmBatchSystem(transport).cancel([job_id])
    assert transport.calls == []


def test_slurm_status_argv_joins_ids() -> None:
    transport = RecordingTransport(CommandResult(0, "1 RUNNING\n2_3 PENDING\n", ""))
    got = SlurmBatchSystem(transport).status([" 1 ", "2_3"])
    assert transport.calls[0][0] == ["squeue", "-h", "-t", "all", "-j", "1,2_3", "-o", "%i %T"]
    assert got["1"].state == "RUNNING" and got["2_3"].state == "PENDING"


# -- LocalBatchSystem ---------------------------------------------------------------------------
def test_local_cancel_refuses_pid_zero() -> None:
    transport = RecordingTransport()
    with pytest.raises(BatchSystemError):
        LocalBatchSystem(transport).cancel(["0"])
    assert transport.calls == []


def test_local_status_of_a_pid_that_is_not_a_manager_is_not_running() -> None:
    # This pytest process stands in for an unrelated process that got a finished manager's pid:
    # the job id carries the manager's start time, which this process does not have.
    job_id = f"{os.getpid()}.1"
    got = LocalBatchSystem(LocalTransport()).status([job_id])
    assert got[job_id].finished is True


def test_local_submit_status_and_cancel_a_real_detached_process(tmp_path: Path) -> None:
    batch = LocalBatchSystem(LocalTransport())
    workdir = tmp_path / "w d" / ".httk-workflow" / "batch"
    script = local_script("/ignored", {}, [], ["sh", "-c", "trap 'exit 0' TERM; sleep 30 & wait", "sh"], workers=1)
    pid = batch.submit(script, workdir=str(workdir))
    try:
        assert batch.status([pid])[pid].state == "RUNNING"
        # The detached shell opens its log when it reaches that line of the script: wait for it.
        log = workdir / f"local-{pid.split('.')[0]}.out"
        wait_until(lambda: True if log.exists() else None, 10, f"{log} appearing")
    finally:
        batch.cancel([pid])
    for _ in range(50):
        if batch.status([pid])[pid].state == "EXITED":
            break
        subprocess.run(["sleep", "0.05"], check=False)
    assert batch.status([pid])[pid].finished is True


def test_local_probe_of_a_pid_that_never_existed_is_exited() -> None:
    got = LocalBatchSystem(LocalTransport()).status(["4194304999"])
    assert got["4194304999"].state == "EXITED"
