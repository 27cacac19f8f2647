"""The Slurm submit-limit parsers on recorded real output (tests/data/slurm, see its README), and the reading flow.

``read_submit_limits`` is driven through a RecordingTransport that answers with the
recorded files, in the order the commands are run.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from remote_support import RecordingTransport

from httk.workflow.adapters.batch import slurm_limits
from httk.workflow.adapters.batch.slurm import SlurmBatchSystem
from httk.workflow.adapters.batch.slurm_limits import (
    limits_from_reports,
    parse_duration,
    parse_parsable,
    parse_partitions,
    parse_queued,
    read_submit_limits,
)
from httk.workflow.domain.submit_limits import allowed_submissions
from httk.workflow.ports import CommandResult

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def test_slurm_time_formats():
    assert parse_duration("30") == 1800  # minutes
    assert parse_duration("30:15") == 1815  # minutes:seconds
    assert parse_duration("00:30:00") == 1800
    assert parse_duration("2-12") == (2 * 24 + 12) * 3600
    assert parse_duration("2-12:30") == ((2 * 24 + 12) * 60 + 30) * 60
    assert parse_duration("2-12:00:00") == (2 * 24 + 12) * 3600
    for unlimited in ("UNLIMITED", "INFINITE", "", "NONE"):
        assert parse_duration(unlimited) is None
    with pytest.raises(ValueError, match="not a Slurm time"):
        parse_duration("soon")


def test_partition_states_and_max_time_as_scontrol_printed_them():
    up = parse_partitions(sample("scontrol-partition-up-maxtime.txt"))
    assert [(p.name, p.state, p.default, p.max_time_seconds, p.qos) for p in up] == [
        ("httk-rec", "UP", False, 1800, "")
    ]
    for state in ("drain", "inactive", "down"):
        (partition,) = parse_partitions(sample(f"scontrol-partition-{state}.txt"))
        assert partition.state == state.upper()
    batch, rec = parse_partitions(sample("scontrol-partitions-two.txt"))
    assert (batch.name, batch.default, batch.max_time_seconds, batch.state) == ("batch", True, None, "UP")
    assert (rec.name, rec.default, rec.max_time_seconds, rec.state) == ("httk-rec", False, 60 * 3600, "DRAIN")
    assert parse_partitions(sample("scontrol-partition-missing.txt")) == []


def test_queued_jobs_count_every_array_task():
    assert parse_queued(sample("squeue-r-queued.txt")) == 6  # 93, 92_1..92_3, 91, 90
    # Without -r the pending array is one line, 92_[1-3]: still three tasks.
    assert parse_queued(sample("squeue-compressed-array.txt")) == 6
    assert parse_queued("") == 0
    assert parse_queued("7_[1-5,9,20-21%4]\n") == 8


def test_association_rows_of_the_published_savio_output():
    rows = parse_parsable(sample("sacctmgr-assoc-savio-published.txt"))
    assert len(rows) == 13
    assert rows[4]["account"] == "co_stat" and rows[4]["partition"] == "savio2"
    assert rows[4]["qos"] == "savio_lowprio,stat_normal" and rows[4]["defqos"] == "stat_normal"
    assert rows[4]["maxsubmit"] == "" and rows[4]["grptresrunmins"] == ""  # the closing '|' adds no column
    chosen = slurm_limits.applicable_associations(rows, "fc_paciorek", ["savio2"])
    assert [(r["account"], r["partition"]) for r in chosen] == [("fc_paciorek", "savio2")]
    assert slurm_limits.job_qos(chosen[0]) == "savio_normal"


def test_published_qos_limits_apply_to_the_association_default_qos():
    qos = parse_parsable(sample("sacctmgr-qos-tara-published.txt"))
    assert {row["name"]: row["maxsubmitpu"] for row in qos}["proj0102"] == "0"
    batch = parse_partitions(sample("scontrol-partitions-two.txt"))
    # An association (account and Def QOS as tara's projects have them) whose QOS is proj0104: MaxJobsPA=100.
    assoc = parse_parsable("Account|Partition|QOS|Def QOS|MaxSubmit|MaxJobs|MaxWall|GrpSubmit|GrpJobs\n"
                           "proj0104||proj0104|proj0104||||||\n"
                           "proj0102||proj0102|proj0102||||||\n")
    open_one = limits_from_reports(partitions=batch, wanted=[], queued=95, associations=assoc, account="proj0104",
                                   qos_rows=qos, job_wall=None)
    assert (open_one.max_submit, open_one.max_jobs, open_one.max_jobs_source) == (
        None, 100, "QOS proj0104's MaxJobsPerAccount")
    assert (open_one.partition, open_one.partition_state) == ("batch", "UP")
    allowance = allowed_submissions(10, open_one)
    assert allowance.count == 10 and "at most 100 run at once" in allowance.reason
    # proj0102 admits no job per user: nothing is submitted, and the reason names the QOS.
    closed = limits_from_reports(partitions=batch, wanted=[], queued=0, associations=assoc, account="proj0102",
                                 qos_rows=qos, job_wall=None)
    refused = allowed_submissions(3, closed)
    assert refused.count == 0
    assert refused.reason == "QOS proj0102's MaxSubmitJobsPerUser is 0 and 0 of your jobs are already queued"


def test_association_max_submit_minus_queued():
    rows = parse_parsable("Account|Partition|QOS|Def QOS|MaxSubmit|MaxJobs|MaxWall|GrpSubmit|GrpJobs\n"
                          "chem||normal||100|20|1-00:00:00||\n"
                          "chem|debug|normal||4||00:30:00||\n"
                          "bio||normal||7||||\n")
    partitions = parse_partitions(sample("scontrol-partitions-two.txt"))
    limits = limits_from_reports(partitions=partitions, wanted=["batch"], queued=97, associations=rows,
                                 account="chem", qos_rows=[], job_wall=3600)
    assert (limits.max_submit, limits.max_wall_seconds) == (100, 86400)
    assert limits.max_submit_source == "the association's MaxSubmitJobs (account chem)"
    allowance = allowed_submissions(10, limits)
    assert allowance.count == 3
    assert allowance.reason.startswith("the association's MaxSubmitJobs (account chem) is 100 and 97 of your jobs")
    # No account known: every account's rows count, and the smallest limit wins.
    unknown = limits_from_reports(partitions=partitions, wanted=["batch"], queued=0, associations=rows, account="",
                                  qos_rows=[], job_wall=None)
    assert unknown.max_submit == 7


def test_a_partition_the_site_does_not_list_is_recorded_with_the_sites_partitions():
    partitions = parse_partitions(sample("scontrol-partitions-two.txt"))
    names = tuple(p.name for p in partitions)
    limits = limits_from_reports(partitions=partitions, wanted=["nosuchpart"], queued=0, associations=None,
                                 account="", qos_rows=None, job_wall=None)
    assert (limits.unknown_partitions, limits.site_partitions) == (("nosuchpart",), names)
    assert limits.partition_setting == "slurm.partition"
    # Not a refusal by itself (a hidden partition is not listed either): sbatch decides.
    assert allowed_submissions(1, limits).count == 1
    known = limits_from_reports(partitions=partitions, wanted=[names[0]], queued=0, associations=None,
                                account="", qos_rows=None, job_wall=None)
    assert known.unknown_partitions == ()
    unread = limits_from_reports(partitions=[], wanted=["nosuchpart"], queued=0, associations=None,
                                 account="", qos_rows=None, job_wall=None)
    assert (unread.unknown_partitions, unread.site_partitions) == ((), ())


def test_a_drained_partition_admits_nothing_and_a_too_long_time_limit_neither():
    partitions = parse_partitions(sample("scontrol-partitions-two.txt"))
    drained = limits_from_reports(partitions=partitions, wanted=["httk-rec"], queued=0, associations=None,
                                  account="", qos_rows=None, job_wall=None)
    assert allowed_submissions(5, drained).reason == "partition httk-rec is DRAIN: it accepts no new jobs"
    # Both partitions: batch is UP and takes the jobs.
    either = limits_from_reports(partitions=partitions, wanted=["httk-rec", "batch"], queued=0, associations=None,
                                 account="", qos_rows=None, job_wall=None)
    assert allowed_submissions(5, either).count == 5
    (short,) = parse_partitions(sample("scontrol-partition-up-maxtime.txt"))
    too_long = limits_from_reports(partitions=[short], wanted=["httk-rec"], queued=0, associations=None,
                                   account="", qos_rows=None, job_wall=3600)
    refused = allowed_submissions(2, too_long)
    assert refused.count == 0
    assert refused.reason == ("the time limit 01:00:00 exceeds partition httk-rec's MaxTime 00:30:00: "
                              "the jobs would be queued and never start")


def recorded(name: str, code: int = 0, *, stderr: str = "") -> CommandResult:
    text = sample(name) if name else ""
    return CommandResult(code, "" if name.endswith(".stderr") else text, text if name.endswith(".stderr") else stderr)


def test_reading_a_site_without_accounting(tmp_path):
    transport = RecordingTransport(
        CommandResult(0, "httktest\n", ""),
        recorded("scontrol-partitions-two.txt"),
        recorded("squeue-r-queued.txt"),
        recorded("sacctmgr-no-accounting.stderr", 1),
    )
    limits = read_submit_limits(transport, {"slurm.time_limit": 10}, timeout=5)
    assert [argv for argv, _ in transport.calls] == [
        ["id", "-un"],
        ["scontrol", "show", "partition", "--oneliner"],
        ["squeue", "-h", "-r", "-u", "httktest", "-o", "%i"],
        ["sacctmgr", "--parsable2", "show", "assoc", "user=httktest", f"format={slurm_limits.ASSOC_FORMAT}"],
    ]
    assert (limits.partition, limits.partition_state, limits.queued, limits.max_submit) == ("batch", "UP", 6, None)
    assert limits.job_wall_seconds == 600 and limits.max_wall_seconds is None
    assert limits.notes == ("the site keeps no accounting (sacctmgr: no slurmdbd), so no association or QOS limits",)
    allowance = allowed_submissions(4, limits)
    assert (allowance.count, allowance.reason) == (4, "no submit limit reported; " + limits.notes[0])


def test_reading_a_site_with_accounting_asks_the_default_account_and_the_qos():
    assoc = ("Account|Partition|QOS|Def QOS|MaxSubmit|MaxJobs|MaxWall|GrpSubmit|GrpJobs\n"
             "chem||normal,long|||||||\n"
             "bio||normal||1||||\n")
    transport = RecordingTransport(
        CommandResult(0, "rar\n", ""),
        recorded("scontrol-partitions-two.txt"),
        CommandResult(0, "", ""),
        CommandResult(0, assoc, ""),
        CommandResult(0, "Def Acct\nchem\n", ""),
        CommandResult(0, "Name|MaxSubmitPU|MaxSubmitPA|MaxJobsPU|MaxJobsPA|MaxWall\nnormal|50||10||2-00:00:00\n", ""),
    )
    system = SlurmBatchSystem(transport, timeout=5)
    limits = system.submit_limits({})
    assert transport.calls[4][0] == ["sacctmgr", "--parsable2", "show", "user", "name=rar", "format=DefaultAccount"]
    assert (limits.max_submit, limits.max_submit_source) == (50, "QOS normal's MaxSubmitJobsPerUser")
    assert (limits.max_jobs, limits.max_wall_seconds) == (10, 2 * 86400)
    assert allowed_submissions(60, limits).count == 50


def test_unreadable_reports_become_notes_never_errors():
    transport = RecordingTransport(
        CommandResult(0, "rar\n", ""),
        CommandResult(127, "", "sh: scontrol: not found\n"),
        CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"),
        CommandResult(1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n"),
    )
    limits = read_submit_limits(transport, {"slurm.partition": "batch"}, timeout=5)
    assert limits.notes == (
        "partition state not read (scontrol: not found)",
        "queued jobs not counted (squeue: slurm_load_jobs error: Unable to contact slurm controller)",
        "association limits not read (sacctmgr: sacctmgr: error: Problem talking to the database: "
        "Connection refused)",
    )
    assert limits.partition == "batch" and limits.partition_state == ""
    assert allowed_submissions(2, limits).count == 2


ASSOC_CHEM = ("Account|Partition|QOS|Def QOS|MaxSubmit|MaxJobs|MaxWall|GrpSubmit|GrpJobs\n"
              "chem||normal,long|normal||||||\n")
QOS_HEADER = "Name|MaxSubmitPU|MaxSubmitPA|MaxJobsPU|MaxJobsPA|MaxWall\n"


def lines(count: int, first: int = 100) -> str:
    return "".join(f"{first + n}\n" for n in range(count))


def test_a_per_account_qos_limit_counts_the_accounts_jobs_not_only_yours():
    # QOS normal admits 10 jobs per account; 2 are this user's, 9 the account's (7 of its other users).
    transport = RecordingTransport(
        CommandResult(0, "rar\n", ""),
        recorded("scontrol-partitions-two.txt"),
        CommandResult(0, lines(2), ""),
        CommandResult(0, ASSOC_CHEM, ""),
        CommandResult(0, QOS_HEADER + "normal||10|||\n", ""),
        CommandResult(0, "Account|User|Partition|GrpSubmit|GrpJobs\nchem||||\nchem|rar|||\n", ""),
        CommandResult(0, lines(9), ""),
    )
    limits = read_submit_limits(transport, {"slurm.account": "chem"}, timeout=5)
    assert [argv for argv, _ in transport.calls][5:] == [
        ["sacctmgr", "--parsable2", "show", "assoc", "account=chem", f"format={slurm_limits.ACCOUNT_FORMAT}"],
        ["squeue", "-h", "-r", "-A", "chem", "-o", "%i"],
    ]
    assert (limits.max_submit, limits.account_max_submit, limits.account_queued) == (None, 10, 9)
    allowance = allowed_submissions(5, limits)
    assert allowance.count == 1
    assert allowance.reason == ("QOS normal's MaxSubmitJobsPerAccount is 10 and 9 of account chem's jobs "
                                "are already queued")


def test_the_account_associations_grp_submit_is_read_and_held_against_the_accounts_jobs():
    # sacctmgr show assoc user=rar lists only the user's rows; the account's own row carries GrpSubmit=20.
    account_rows = parse_parsable("Account|User|Partition|GrpSubmit|GrpJobs\nchem|||20|\nchem|rar||50|\n"
                                  "chem||gpu|3|\n")
    limits = limits_from_reports(partitions=parse_partitions(sample("scontrol-partitions-two.txt")), wanted=[],
                                 queued=4, associations=parse_parsable(ASSOC_CHEM), account="chem", qos_rows=[],
                                 account_rows=account_rows, job_wall=None)
    # The user's own row (50) is no account limit; gpu's row counts too: the smaller one, 3, applies.
    assert (limits.account_max_submit, limits.account_max_submit_source) == (
        3, "the account's GrpSubmitJobs (account chem, partition gpu)")
    counted = allowed_submissions(5, attrs.evolve(limits, account_queued=2))
    assert (counted.count, counted.reason) == (1, "the account's GrpSubmitJobs (account chem, partition gpu) is 3 "
                                                  "and 2 of account chem's jobs are already queued")
    # Not counted (squeue -A failed): the user's own 4 stand in, and the reason says the rest were not counted.
    uncounted = allowed_submissions(5, limits)
    assert uncounted.count == 0 and "the other jobs of account chem were not counted" in uncounted.reason


def test_a_requested_qos_is_the_one_whose_limits_apply():
    qos = parse_parsable(QOS_HEADER + "normal|50||||\nlong|5||||\n")
    common = dict(partitions=parse_partitions(sample("scontrol-partitions-two.txt")), wanted=[], queued=0,
                  associations=parse_parsable(ASSOC_CHEM), account="chem", qos_rows=qos, job_wall=None)
    assert limits_from_reports(**common).max_submit == 50  # the association's default, normal
    asked = limits_from_reports(**common, qos="long")
    assert (asked.max_submit, asked.max_submit_source) == (5, "QOS long's MaxSubmitJobsPerUser")
    transport = RecordingTransport(CommandResult(0, "rar\n", ""), recorded("scontrol-partitions-two.txt"),
                                   CommandResult(0, "", ""), CommandResult(0, ASSOC_CHEM, ""),
                                   CommandResult(0, QOS_HEADER + "normal|50||||\nlong|5||||\n", ""))
    read = read_submit_limits(transport, {"slurm.account": "chem", "slurm.qos": "long"}, timeout=5)
    assert read.max_submit == 5
