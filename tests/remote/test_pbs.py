"""PBS Pro / OpenPBS: argv builders, the ``#PBS`` script, and the parsers on recorded real output.

The samples in tests/data/pbs/ are published output of real PBS servers; its README says
where each comes from. Outputs described but not published as samples (an unknown id) are
built here from those descriptions, and say so.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from remote_support import RecordingTransport

from httk.workflow.adapters.batch import pbs
from httk.workflow.adapters.batch.pbs import PbsBatchSystem, parse_qstat, parse_qsub
from httk.workflow.ports import BatchJobStatus, BatchSystemError, CommandResult

DATA = Path(__file__).resolve().parents[1] / "data" / "pbs"
PBS = PbsBatchSystem(RecordingTransport())


def sample(name: str) -> str:
    return (DATA / name).read_text()


def ok(stdout: str, stderr: str = "", code: int = 0) -> CommandResult:
    return CommandResult(code, stdout, stderr)


def test_qsub_prints_the_whole_job_id():
    assert parse_qsub(sample("qsub-openpbs-23.06.out")) == "1.pbs"
    assert parse_qsub(sample("qsub-pbspro-2022.0-alcf.out")) == "2152.edtb-01.mcp.alcf.anl.gov"
    for bad in ("", "qsub: Unknown queue\n", "1.pbs\n2.pbs\n", "12; rm -rf /\n"):
        with pytest.raises(BatchSystemError, match="pbs: qsub printed .*not a job id"):
            parse_qsub(bad)


def test_a_running_job_on_openpbs_and_on_pbs_pro():
    assert parse_qstat(ok(sample("qstat-running-openpbs-23.06.json")), ["1.pbs"]) == {
        "1.pbs": BatchJobStatus("RUNNING", finished=False)
    }
    job = "12860476.meta-pbs.metacentrum.cz"
    assert parse_qstat(ok(sample("qstat-running-pbspro-19.0-metacentrum.json")), [job]) == {
        job: BatchJobStatus("RUNNING", finished=False)
    }


def test_finished_jobs_succeed_on_exit_status_zero_and_running_ones_do_not_finish():
    got = parse_qstat(ok(sample("qstat-finished-and-running-openpbs-23.06.json")), ["1004.pbs", "1006.pbs"])
    assert got == {
        "1004.pbs": BatchJobStatus("FINISHED", finished=True, succeeded=True),
        "1006.pbs": BatchJobStatus("RUNNING", finished=False),
    }


def test_an_id_qstat_no_longer_knows_is_unknown_and_finished():
    # Built from the documented shape (README): the known job's JSON on stdout, one line per unknown
    # id on stderr, exit 153 (PBSE_UNKJOBID 15001 modulo 256).
    result = ok(sample("qstat-running-openpbs-23.06.json"), "qstat: Unknown Job Id 7.pbs\n", 153)
    assert parse_qstat(result, ["1.pbs", "7.pbs"]) == {
        "1.pbs": BatchJobStatus("RUNNING", finished=False),
        "7.pbs": BatchJobStatus("UNKNOWN", finished=True, succeeded=None),
    }
    only_unknown = ok("", "qstat: Unknown Job Id 7.pbs\n", 153)
    assert parse_qstat(only_unknown, ["7.pbs"])["7.pbs"] == PbsBatchSystem.forgotten
    # No Jobs member at all: nothing matched (README).
    empty = ok('{"timestamp":1788909619,"pbs_version":"2024.1.2.20241017100211","pbs_server":"gadi-pbs-01"}')
    assert parse_qstat(empty, ["7.gadi-pbs"])["7.gadi-pbs"].state == "UNKNOWN"


def test_the_sequence_number_finds_a_job_under_a_longer_server_name():
    assert parse_qstat(ok(sample("qstat-running-openpbs-23.06.json")), ["1"])["1"].state == "RUNNING"


def test_a_killed_job_has_not_succeeded():
    # Exit_status 265 = 256 + SIGKILL, what qdel leaves (README); the sample's job, finished that way.
    text = sample("qstat-finished-and-running-openpbs-23.06.json").replace('"Exit_status":0', '"Exit_status":265', 1)
    assert parse_qstat(ok(text), ["1004.pbs"])["1004.pbs"] == BatchJobStatus("FINISHED", True, False)


@pytest.mark.parametrize(
    "result",
    [
        ok("", "qstat: cannot connect to server pbs (errno=111)\n", 2),
        ok(sample("qstat-running-openpbs-23.06.json"), "qstat: Unknown Job Id 7.pbs\nqstat: bad thing\n", 153),
        ok("", "", 1),
    ],
)
def test_any_other_qstat_failure_is_one_line_naming_it(result):
    with pytest.raises(BatchSystemError, match=r"^pbs: qstat failed \(exit \d+\): qstat: "
                                                r"|^pbs: qstat failed \(exit 1\): no output"):
        parse_qstat(result, ["1.pbs"])


def test_output_that_is_not_json_is_refused():
    with pytest.raises(BatchSystemError, match="pbs: qstat -F json printed no JSON"):
        parse_qstat(ok("Job Id: 1.pbs\n    job_state = R\n"), ["1.pbs"])
    with pytest.raises(BatchSystemError, match="no 'Jobs' object"):
        parse_qstat(ok('{"Jobs": []}'), ["1.pbs"])


def test_argv_builders():
    assert PBS.submit_argv("/w/b") == ["sh", "-c", 'cd "$1" || exit 1; exec qsub', "qsub", "/w/b"]
    assert PBS.status_argv(["1.pbs", "2.pbs"]) == ["qstat", "-f", "-F", "json", "-x", "1.pbs", "2.pbs"]
    assert PBS.cancel_argv(["1.pbs"]) == ["qdel", "1.pbs"]
    for good in ("1", "1.pbs", "2152.edtb-01.mcp.alcf.anl.gov", "123[].pbs", "123[7].pbs"):
        assert PBS.check_ids([good]) == [good]
    with pytest.raises(BatchSystemError, match="is not a pbs job id"):
        PBS.check_ids(["1.pbs; qdel all"])


def test_the_script_carries_pbs_directives_from_the_settings():
    settings = {
        "pbs.queue": "R1234", "pbs.account": "proj-1", "pbs.walltime": "02:00:00",
        "pbs.select": "2:ncpus=8:mem=4gb+1:ncpus=1", "pbs.place": "scatter:excl", "pbs.project": None,
        "slurm.partition": "ignored", "manager.workers": 4,
    }  # fmt: skip
    lines = PBS.compose_script("/scratch/my runs", settings, ["--idle"], ["/opt/h t/httk"]).splitlines()
    assert lines[:8] == [
        "#!/bin/sh",
        "#PBS -N httk-my_runs",
        "#PBS -j oe",
        "#PBS -q R1234",
        "#PBS -A proj-1",
        "#PBS -l walltime=02:00:00",
        "#PBS -l select=2:ncpus=8:mem=4gb+1:ncpus=1",
        "#PBS -l place=scatter:excl",
    ]
    assert shlex.split(lines[-1]) == [
        "exec", "/opt/h t/httk", "workflow", "run", "/scratch/my runs", "--workers", "4", "--idle",
    ]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("pbs.queue", "workq\n#PBS -u root"),
        ("pbs.walltime", "two hours"),
        ("pbs.walltime", 0),
        ("pbs.select", "2:ncpus=8 -W x"),
        ("pbs.place", "Scatter"),
        ("pbs.account", 7),
    ],
)
def test_a_value_that_could_break_a_directive_is_refused_at_set_and_at_run_alike(setting, value):
    with pytest.raises(BatchSystemError, match=f"setting {setting} must be") as at_set:
        PbsBatchSystem.check_setting(setting, value)
    with pytest.raises(BatchSystemError) as at_run:
        PBS.compose_script("/ws", {setting: value}, [], ["httk"])
    assert str(at_set.value) == str(at_run.value)


def test_an_unknown_pbs_setting_is_refused_with_the_list():
    with pytest.raises(BatchSystemError, match=r"unknown PBS setting 'pbs.queu'; the pbs\.\* settings are the batch "
                                               r"directives pbs.account, pbs.place, pbs.project, pbs.queue, "
                                               r"pbs.select, pbs.walltime"):
        PbsBatchSystem.check_setting("pbs.queu", "x")
    assert [each.setting for each in pbs.DIRECTIVES] == [
        "pbs.queue", "pbs.account", "pbs.project", "pbs.walltime", "pbs.select", "pbs.place",
    ]


def test_raw_control_characters_in_string_values_are_read():
    # Some PBS versions write a raw tab/newline inside Variable_List or Submit_arguments strings,
    # which strict JSON refuses; the sample's Variable_List, with a raw tab put into one value.
    text = sample("qstat-running-openpbs-23.06.json")
    assert '"PBS_O_HOME":"' in text
    text = text.replace('"PBS_O_HOME":"', '"PBS_O_HOME":"\t', 1)
    assert parse_qstat(ok(text), ["1.pbs"])["1.pbs"] == BatchJobStatus("RUNNING", finished=False)


def test_a_moved_job_is_finished_from_this_servers_view_with_an_unknown_outcome():
    # job_state M: "moved to another server" (PBS Professional Reference Guide, "Job States");
    # this server keeps only the history, so the job will not run here again.
    text = sample("qstat-running-openpbs-23.06.json").replace('"job_state":"R"', '"job_state":"M"', 1)
    assert parse_qstat(ok(text), ["1.pbs"])["1.pbs"] == BatchJobStatus("MOVED", finished=True, succeeded=None)


def test_a_job_id_naming_a_server_matches_only_that_server():
    text = sample("qstat-running-openpbs-23.06.json")  # job 1.pbs
    assert parse_qstat(ok(text), ["1.pbs.example.org"])["1.pbs.example.org"].state == "RUNNING"
    longer = text.replace('"1.pbs":', '"1.pbs.example.org":', 1)
    assert parse_qstat(ok(longer), ["1.pbs"])["1.pbs"].state == "RUNNING"
    # The same sequence number on another server is another job: not this one's status.
    assert parse_qstat(ok(text), ["1.other"])["1.other"] == PbsBatchSystem.forgotten
    assert parse_qstat(ok(text), ["1.pb"])["1.pb"] == PbsBatchSystem.forgotten
