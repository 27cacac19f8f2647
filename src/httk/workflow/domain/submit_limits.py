"""How many managers may be submitted to a batch system: the site's limits against the request.

Pure: a batch system reads its scheduler's limits into :class:`SubmitLimits`
(Slurm: ``adapters/batch/slurm_limits``) and :func:`allowed_submissions` decides
how many of the requested managers to submit, with the reason in words. Each
submit limit it is given is held against the jobs that limit counts: a per-user
one (``MaxSubmitJobs`` of the user's association, a QOS's ``MaxSubmitJobsPerUser``)
against the user's queued jobs, a per-account one (the account association's
``GrpSubmitJobs``, a QOS's ``MaxSubmitJobsPerAccount``) against the account's.
The rule submits no more than the tightest of the limits it was told about
allows, nothing to a partition that accepts no jobs, and nothing whose time
limit exceeds the longest a job may ask for (such a job would be queued and
never start). Limits the batch system could not read (a parent account's, a
QOS's ``GrpSubmitJobs``) are not in it: ``sbatch`` still refuses past those.
Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import attrs

#: Partition states in which the scheduler refuses new jobs (Slurm's DRAIN and INACTIVE).
CLOSED_STATES = frozenset({"DRAIN", "INACTIVE"})
#: A partition state in which jobs are accepted but none starts until it is up again.
DOWN_STATE = "DOWN"


@attrs.frozen
class SubmitLimits:
    """What a scheduler reports about the jobs this user may still submit.

    ``None`` means not reported (unlimited, or the scheduler could not tell).
    ``max_submit`` is the smallest per-user submit limit (``MaxSubmitJobs`` of the
    association or its QOS), named by ``max_submit_source``; ``queued`` counts the
    user's jobs (pending and running, each array task once).
    ``account_max_submit`` is the smallest per-account one, named by
    ``account_max_submit_source``, of ``account``; ``account_queued`` counts the
    account's jobs, every user's (``None``: not counted, and then the user's own
    jobs stand in, which may be too few). ``max_wall_seconds`` is the longest time limit a job may ask for there
    (named by ``max_wall_source``), ``job_wall_seconds`` what the managers' script
    asks for. ``notes`` say what could not be read, in words.
    """

    max_submit: int | None = None
    max_submit_source: str = ""
    max_jobs: int | None = None
    max_jobs_source: str = ""
    queued: int = 0
    account: str = ""
    account_max_submit: int | None = None
    account_max_submit_source: str = ""
    account_queued: int | None = None
    partition: str = ""
    partition_state: str = ""
    max_wall_seconds: int | None = None
    max_wall_source: str = ""
    job_wall_seconds: int | None = None
    notes: tuple[str, ...] = ()
    #: Partitions the script asks for that the scheduler does not list (it refuses such a job), and
    #: every partition it does list; both empty when the partitions could not be read.
    unknown_partitions: tuple[str, ...] = ()
    site_partitions: tuple[str, ...] = ()
    #: The workspace setting that chose the partition (``slurm.partition``), for the fix.
    partition_setting: str = ""

    def as_json(self) -> dict[str, object]:
        """The limits as a JSON object (``null`` for what was not reported)."""
        return {
            "max_submit": self.max_submit,
            "max_submit_source": self.max_submit_source or None,
            "max_jobs": self.max_jobs,
            "max_jobs_source": self.max_jobs_source or None,
            "queued": self.queued,
            "account": self.account or None,
            "account_max_submit": self.account_max_submit,
            "account_max_submit_source": self.account_max_submit_source or None,
            "account_queued": self.account_queued,
            "partition": self.partition or None,
            "partition_state": self.partition_state or None,
            "max_wall_seconds": self.max_wall_seconds,
            "max_wall_source": self.max_wall_source or None,
            "job_wall_seconds": self.job_wall_seconds,
            "notes": list(self.notes),
            "unknown_partitions": list(self.unknown_partitions),
            "site_partitions": list(self.site_partitions),
        }


@attrs.frozen
class Allowance:
    """How many of ``requested`` managers to submit, why (one line of clauses), and what admits more."""

    count: int
    requested: int
    reason: str
    fix: str = ""


def allowed_submissions(requested: int, limits: SubmitLimits) -> Allowance:
    """``requested``, less where a submit limit leaves less room, or 0 where the partition or time limit refuses."""
    if requested < 1:
        raise ValueError(f"requested must be at least 1, not {requested}")
    where = f"partition {limits.partition}" if limits.partition else "the partition"
    if limits.partition_state.upper() in CLOSED_STATES:
        return Allowance(0, requested, f"{where} is {limits.partition_state.upper()}: it accepts no new jobs",
                         "choose another partition in the workspace's settings, or wait until it is UP")
    if (limits.job_wall_seconds is not None and limits.max_wall_seconds is not None
            and limits.job_wall_seconds > limits.max_wall_seconds):
        asked, most = format_duration(limits.job_wall_seconds), format_duration(limits.max_wall_seconds)
        return Allowance(0, requested, (
            f"the time limit {asked} exceeds {limits.max_wall_source or 'the limit'} {most}: "
            "the jobs would be queued and never start"
        ), "lower the time limit in the workspace's settings")
    clauses: list[str] = []
    count = requested
    tightest = _tightest(limits)
    if tightest is not None:
        cap, source, counted, whose = tightest
        count = min(requested, max(0, cap - counted))
        if count < requested:
            clauses.append(f"{source} is {cap} and {counted} of {whose} jobs are already queued")
        else:
            clauses.append(f"within {source} {cap} ({counted} already queued)")
    else:
        clauses.append("no submit limit reported")
    if limits.account_max_submit is not None and limits.account_queued is None:
        clauses.append(f"the other jobs of account {limits.account or '?'} were not counted")
    clauses.extend(limits.notes)
    if count and limits.partition_state.upper() == DOWN_STATE:
        clauses.append(f"{where} is DOWN: the managers wait in the queue until it is up")
    if count and limits.max_jobs is not None and limits.queued + count > limits.max_jobs:
        clauses.append(f"at most {limits.max_jobs} run at once ({limits.max_jobs_source or 'MaxJobs'})")
    fix = "wait until some of your queued jobs have finished" if count < requested else ""
    return Allowance(count, requested, "; ".join(clauses), fix)


def unknown_partition(limits: SubmitLimits) -> str | None:
    """Why a refused submission may be the partition's fault: it names one the scheduler does not list.

    Not a refusal by itself: a hidden partition is not listed either, and the scheduler
    decides. When it refuses, this is what the user needs: the setting and the site's partitions.
    """
    if not (limits.unknown_partitions and limits.site_partitions):
        return None
    setting = limits.partition_setting or "the partition setting"
    return (f"{setting} names partition {', '.join(limits.unknown_partitions)}, which the scheduler does not list "
            f"(its partitions: {', '.join(limits.site_partitions)}); set {setting} to one of them")


def _tightest(limits: SubmitLimits) -> tuple[int, str, int, str] | None:
    """The submit limit leaving the least room: (limit, its name, the jobs it counts, whose they are)."""
    candidates: list[tuple[int, str, int, str]] = []
    if limits.max_submit is not None:
        candidates.append((limits.max_submit, limits.max_submit_source or "MaxSubmitJobs", limits.queued, "your"))
    if limits.account_max_submit is not None:
        # Not counted: the user's own jobs are the least the account has queued.
        counted = limits.queued if limits.account_queued is None else limits.account_queued
        whose = "your" if limits.account_queued is None else f"account {limits.account or '?'}'s"
        candidates.append((limits.account_max_submit, limits.account_max_submit_source or "GrpSubmitJobs",
                           counted, whose))
    return min(candidates, key=lambda each: each[0] - each[2], default=None)


def format_duration(seconds: int) -> str:
    """``[D-]HH:MM:SS``, as Slurm spells a time limit."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{text}" if days else text
