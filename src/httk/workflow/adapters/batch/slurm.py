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

from ...ports import BatchJobStatus, BatchSystemError, CommandResult
from .base import CommandLineBatchSystem, manager_command, resolve_workers

#: ``slurm.*`` setting → sbatch option, in the order the directives are written.
DIRECTIVES: tuple[tuple[str, str], ...] = (
    ("slurm.account", "--account"),
    ("slurm.partition", "--partition"),
    ("slurm.reservation", "--reservation"),
    ("slurm.time_limit", "--time"),
    ("slurm.nodes", "--nodes"),
    ("slurm.cpus_per_task", "--cpus-per-task"),
)
_NAME = re.compile(r"[A-Za-z0-9_.+@-]+(,[A-Za-z0-9_.+@-]+)*")
_TIME = re.compile(r"[0-9]+(-[0-9]+)?(:[0-9]+){0,2}|UNLIMITED|INFINITE", re.IGNORECASE)
_NODES = re.compile(r"[1-9][0-9]*(-[1-9][0-9]*)?")

#: Scheduler states after which the job never runs again, and whether they mean success.
FINISHED_STATES: dict[str, bool] = {
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
UNKNOWN = BatchJobStatus("UNKNOWN", finished=True, succeeded=None)


class SlurmBatchSystem(CommandLineBatchSystem):
    """Slurm through its command-line clients."""

    name = "slurm"
    commands = ("sbatch", "squeue", "scancel")
    id_pattern = re.compile(r"[0-9]+(_[0-9]+)?")

    @classmethod
    def check_setting(cls, name: str, value: Any) -> None:
        check_setting(name, value)

    def compose_script(
        self,
        workspace_path: str,
        settings: Mapping[str, Any],
        manager_args: Sequence[str],
        httk_command: Sequence[str],
        *,
        workers: int | None = None,
    ) -> str:
        return compose_script(workspace_path, settings, manager_args, httk_command, workers=workers)

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
                return {job_id: UNKNOWN for job_id in job_ids}
            raise BatchSystemError(f"slurm: squeue failed (exit {result.returncode}): {result.stderr.strip()}")
        return parse_squeue(result.stdout, job_ids)

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["scancel", *job_ids]


def compose_script(
    workspace_path: str,
    settings: Mapping[str, Any],
    manager_args: Sequence[str],
    httk_command: Sequence[str],
    *,
    workers: int | None = None,
) -> str:
    """The ``#SBATCH`` script that runs ``httk workflow run WORKSPACE --workers N`` (pure)."""
    count = resolve_workers(settings, workers)
    base = workspace_path.rstrip("/").rsplit("/", 1)[-1] or "workspace"
    job_name = "httk-" + re.sub(r"[^A-Za-z0-9._-]", "_", base)
    lines = ["#!/bin/sh", f"#SBATCH --job-name={job_name}", "#SBATCH --output=slurm-%j.out"]
    for setting, option in DIRECTIVES:
        if setting in settings and settings[setting] is not None:
            lines.append(f"#SBATCH {option}={directive_value(setting, settings[setting])}")
    lines.append("# One httk-workflow task manager, from the workspace's slurm.* and manager.* settings.")
    # exec: scancel's SIGTERM reaches the manager itself, which then drains.
    lines.append("exec " + manager_command(workspace_path, manager_args, httk_command, count))
    return "\n".join(lines) + "\n"


def check_setting(name: str, value: Any) -> None:
    """Refuse a ``slurm.*`` setting that is not a directive, or a value its directive cannot carry.

    ``None`` (JSON null) is accepted: ``compose_script`` writes no directive for it.
    """
    known = [setting for setting, _ in DIRECTIVES]
    if name not in known:
        raise BatchSystemError(
            f"unknown Slurm setting {name!r}; the slurm.* settings are the batch directives {', '.join(sorted(known))}"
        )
    if value is not None:
        directive_value(name, value)


def directive_value(setting: str, value: Any) -> str:
    """A setting's value as it may appear in its directive; one-line error otherwise."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    if setting == "slurm.cpus_per_task":
        if integer and value >= 1:
            return str(value)
        raise BatchSystemError(f"setting {setting} must be a positive integer, not {value!r}")
    if setting == "slurm.nodes":
        if integer and value >= 1:
            return str(value)
        if isinstance(value, str) and _NODES.fullmatch(value):
            return value
        raise BatchSystemError(f"setting {setting} must be a positive integer or a range like '1-4', not {value!r}")
    if setting == "slurm.time_limit":
        if integer and value >= 1:
            return str(value)  # minutes
        if isinstance(value, str) and _TIME.fullmatch(value):
            return value
        raise BatchSystemError(
            f"setting {setting} must be minutes or [D-]HH:MM:SS as Slurm spells it, not {value!r}"
        )
    if isinstance(value, str) and _NAME.fullmatch(value):
        return value
    raise BatchSystemError(f"setting {setting} must be a Slurm name ([A-Za-z0-9_.+@-], comma-separated), not {value!r}")


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
        if state in FINISHED_STATES:
            status = BatchJobStatus(state, finished=True, succeeded=FINISHED_STATES[state])
        else:
            status = BatchJobStatus(state, finished=False)
        seen[job_id] = status
        # An array job is listed by its tasks ("37_[1-3]", "37_2"): the array is unfinished while any task is.
        array = job_id.split("_", 1)[0]
        if array != job_id:
            known = seen.get(array)
            if known is None or (known.finished and not status.finished):
                seen[array] = status
    return {job_id: seen.get(job_id, UNKNOWN) for job_id in job_ids}
