"""SlurmBatchSystem: managers as Slurm batch jobs (sbatch, squeue, scancel).

Argv builders and pure parsers only; the transport runs them. The batch script
takes its ``#SBATCH`` directives from the workspace's ``slurm.*`` application
settings and its worker count from ``manager.workers`` unless ``--workers`` was
given; a value that could break a directive line is refused, naming the setting.
``check_setting`` applies the same rule when ``workspace settings set`` writes a
``slurm.*`` setting, and refuses a ``slurm.*`` name that is not one of the
directives (a misspelt ``slurm.partiton`` would otherwise be silently ignored);
``compose_script`` still checks every directive value, and skips other names, at
run time. Finished jobs stay visible to
``squeue -t all`` for ``MinJobAge`` only; an id squeue no longer lists is
``UNKNOWN`` and counted as finished. Spec: 000 "Application settings".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...domain.submit_limits import SubmitLimits
from ...ports import BatchJobStatus, BatchSystemError, CommandResult
from .base import Capabilities, CommandLineBatchSystem, Directive, ValueRule
from .slurm_limits import read_submit_limits

_NAME = ValueRule(
    "a Slurm name ([A-Za-z0-9_.+@-], comma-separated)", re.compile(r"[A-Za-z0-9_.+@-]+(,[A-Za-z0-9_.+@-]+)*")
)
#: ``slurm.*`` settings → sbatch options, in the order the directives are written.
DIRECTIVES: tuple[Directive, ...] = (
    Directive("slurm.account", "--account={}", _NAME),
    Directive("slurm.partition", "--partition={}", _NAME),
    Directive("slurm.reservation", "--reservation={}", _NAME),
    Directive("slurm.qos", "--qos={}", ValueRule("a Slurm QOS name ([A-Za-z0-9_.+@-])",
                                                 re.compile(r"[A-Za-z0-9_.+@-]+"))),
    Directive("slurm.time_limit", "--time={}", ValueRule(  # an integer is minutes
        "minutes or [D-]HH:MM:SS as Slurm spells it",
        re.compile(r"[0-9]+(-[0-9]+)?(:[0-9]+){0,2}|UNLIMITED|INFINITE", re.IGNORECASE), integers=True)),
    Directive("slurm.nodes", "--nodes={}", ValueRule(
        "a positive integer or a range like '1-4'", re.compile(r"[1-9][0-9]*(-[1-9][0-9]*)?"), integers=True)),
    Directive("slurm.cpus_per_task", "--cpus-per-task={}", ValueRule("a positive integer", integers=True)),
)

#: The state table: scheduler states after which the job never runs again, and whether they mean success.
FINISHED_STATES: dict[str, bool | None] = {
    "COMPLETED": True,
    "BOOT_FAIL": False,
    "CANCELLED": False,
    "DEADLINE": False,
    "FAILED": False,
    "NODE_FAIL": False,
    "OUT_OF_MEMORY": False,
    "PREEMPTED": False,
    "REVOKED": False,
    "TIMEOUT": False,
}


class SlurmBatchSystem(CommandLineBatchSystem):
    """Slurm through its command-line clients."""

    name = "slurm"
    title = "Slurm"
    description = "a manager runs as a Slurm batch job there"
    commands = ("sbatch", "squeue", "scancel")
    output_pattern = re.compile(r"slurm-([0-9]+(?:_[0-9]+)?)\.out")  # --output=slurm-%j.out
    id_pattern = re.compile(r"[0-9]+(_[0-9]+)?")
    capabilities = Capabilities(array_jobs=True, reservations=True, qos=True)
    directive_prefix = "#SBATCH"
    directives = DIRECTIVES
    finished_states = FINISHED_STATES

    def fixed_directives(self, name: str) -> list[str]:
        return [f"--job-name={name}", "--output=slurm-%j.out"]

    def submit_argv(self, workdir: str) -> list[str]:
        # No script argument: sbatch reads the script from stdin.
        return ["sbatch", "--parsable", f"--chdir={workdir}"]

    def parse_submit(self, stdout: str) -> str:
        return parse_sbatch(stdout)

    def status_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T"]

    def parse_status(self, result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        if result.returncode != 0:
            # squeue refuses a list made only of ids it has forgotten.
            if "invalid job id" in result.stderr.lower():
                return {job_id: self.forgotten for job_id in job_ids}
            raise BatchSystemError(f"slurm: squeue failed (exit {result.returncode}): {result.stderr.strip()}")
        return parse_squeue(result.stdout, job_ids)

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["scancel", *job_ids]

    def submit_limits(self, settings: Mapping[str, Any]) -> SubmitLimits:
        # sacctmgr/scontrol/squeue reports: see slurm_limits.
        return read_submit_limits(self.transport, settings, timeout=self.timeout)



def parse_sbatch(stdout: str) -> str:
    """The job id ``sbatch --parsable`` printed (``ID`` or ``ID;CLUSTER``)."""
    for line in stdout.splitlines():
        if line.strip():
            job_id = line.strip().split(";", 1)[0]
            if re.fullmatch(r"[0-9]+", job_id):
                return job_id
            break
    raise BatchSystemError(f"slurm: sbatch printed {stdout.strip()[:80]!r}, not a job id")


def parse_squeue(stdout: str, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
    """``squeue -h -o '%i %T'`` lines as statuses; an id it did not list is ``UNKNOWN``."""
    seen: dict[str, BatchJobStatus] = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        job_id, state = fields[0], fields[1].upper()
        # "CANCELLED+" or "CANCELLED by 0" in some versions: the word is what counts.
        state = re.sub(r"[^A-Z_].*$", "", state) or state
        status = SlurmBatchSystem.status_of(state)
        seen[job_id] = status
        # An array job is listed by its tasks ("37_[1-3]", "37_2"): the array is unfinished while any task is.
        array = job_id.split("_", 1)[0]
        if array != job_id:
            known = seen.get(array)
            if known is None or (known.finished and not status.finished):
                seen[array] = status
    return {job_id: seen.get(job_id, SlurmBatchSystem.forgotten) for job_id in job_ids}
