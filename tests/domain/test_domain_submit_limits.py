"""The submit-limit rule: how many of N managers a batch system's limits admit, and the reason in words."""

from __future__ import annotations

import pytest

from httk.workflow.domain.submit_limits import SubmitLimits, allowed_submissions, format_duration


def test_nothing_reported_admits_every_manager_and_says_so():
    allowance = allowed_submissions(5, SubmitLimits(notes=("local reports no submit limits",)))
    assert (allowance.count, allowance.reason, allowance.fix) == (
        5, "no submit limit reported; local reports no submit limits", "")


def test_max_submit_less_the_queued_jobs_is_never_exceeded():
    limits = SubmitLimits(max_submit=100, max_submit_source="the association's MaxSubmitJobs (account chem)",
                          queued=97)
    allowance = allowed_submissions(50000, limits)
    assert allowance.count == 3
    assert allowance.reason == "the association's MaxSubmitJobs (account chem) is 100 and 97 of your jobs are " \
                               "already queued"
    assert allowance.fix == "wait until some of your queued jobs have finished"
    assert allowed_submissions(3, limits).reason == ("within the association's MaxSubmitJobs (account chem) 100 "
                                                     "(97 already queued)")
    # More queued than the limit (it was lowered since): none, not a negative count.
    assert allowed_submissions(1, SubmitLimits(max_submit=10, queued=12)).count == 0


@pytest.mark.parametrize("state", ["DRAIN", "INACTIVE", "drain"])
def test_a_partition_that_accepts_no_job_admits_none(state):
    allowance = allowed_submissions(4, SubmitLimits(partition="batch", partition_state=state, max_submit=100))
    assert allowance.count == 0
    assert allowance.reason == f"partition batch is {state.upper()}: it accepts no new jobs"
    assert "another partition" in allowance.fix


def test_a_down_partition_queues_them_and_says_they_wait():
    allowance = allowed_submissions(2, SubmitLimits(partition="batch", partition_state="DOWN"))
    assert allowance.count == 2
    assert allowance.reason.endswith("partition batch is DOWN: the managers wait in the queue until it is up")


def test_a_time_limit_longer_than_the_longest_allowed_admits_none():
    limits = SubmitLimits(max_wall_seconds=1800, max_wall_source="partition short's MaxTime", job_wall_seconds=1801)
    allowance = allowed_submissions(1, limits)
    assert allowance.count == 0
    assert allowance.reason == ("the time limit 00:30:01 exceeds partition short's MaxTime 00:30:00: the jobs "
                                "would be queued and never start")
    assert allowed_submissions(1, SubmitLimits(max_wall_seconds=1800, job_wall_seconds=1800)).count == 1


def test_max_jobs_does_not_bound_submission_but_is_reported():
    allowance = allowed_submissions(8, SubmitLimits(max_submit=50, queued=0, max_jobs=4,
                                                    max_jobs_source="QOS normal's MaxJobsPerUser"))
    assert allowance.count == 8
    assert allowance.reason.endswith("at most 4 run at once (QOS normal's MaxJobsPerUser)")


def test_a_request_of_none_is_a_bug_not_a_limit():
    with pytest.raises(ValueError, match="at least 1"):
        allowed_submissions(0, SubmitLimits())


def test_durations_are_spelt_as_slurm_spells_them():
    assert format_duration(59) == "00:00:59"
    assert format_duration(2 * 86400 + 3723) == "2-01:02:03"


def test_a_per_account_limit_is_held_against_the_accounts_queued_jobs_and_the_tightest_wins():
    limits = SubmitLimits(max_submit=50, max_submit_source="QOS normal's MaxSubmitJobsPerUser", queued=2,
                          account="chem", account_max_submit=10,
                          account_max_submit_source="QOS normal's MaxSubmitJobsPerAccount", account_queued=9)
    allowance = allowed_submissions(5, limits)
    assert (allowance.count, allowance.reason) == (
        1, "QOS normal's MaxSubmitJobsPerAccount is 10 and 9 of account chem's jobs are already queued")
    # The per-user limit leaves less room: it is the one named.
    tighter = allowed_submissions(5, SubmitLimits(max_submit=3, queued=2, account="chem", account_max_submit=10,
                                                  account_queued=5))
    assert (tighter.count, tighter.reason) == (1, "MaxSubmitJobs is 3 and 2 of your jobs are already queued")
    assert limits.as_json()["account_queued"] == 9
