"""The httk v1 task format, as far as a converted task needs it: names, statuses, exit codes, priorities.

A v1 task is a directory named
``ht.task.<taskset>.<taskid>.<step>.<restarts>.<owner>.<priority>.<status>``
holding an ``ht_steps`` program (or an ``ht_run`` one). The v1 taskmanager runs
``../ht_steps STEP`` inside ``<task>/ht.run.current`` and reads the step's exit
status: 10 finished, 2 go on to the step written in ``ht.nextstep``, 3 wait for
the subtasks it created then go on, 4 broken; a watchdog timeout is 99 and any
other status leaves the task *stopped*. Priorities are 1 (first) to 5 (last).
This module is pure: names and numbers in, names and numbers out.
"""

from __future__ import annotations

import re

import attrs

from ..protocol import JobSpec

PREFIX = "ht.task"
#: v1 statuses a task waits in (runnable) and the ones it ends in.
RUNNABLE = ("waitstart", "waitstep", "waitsubtasks", "running")
ENDED = ("finished", "broken", "stopped", "timeout")
EXIT_NEXT, EXIT_SUBTASKS, EXIT_BROKEN, EXIT_FINISHED, EXIT_TIMEOUT = 2, 3, 4, 10, 99
FINISHED_STEP, BROKEN_STEP = "ht_finished", "ht_broken"
DEFAULT_TASKSET, DEFAULT_STEP, DEFAULT_PRIORITY = "any", "start", 3
#: The v1 taskmanager's defaults: -t (seconds one step may run) and -a (restarts before a task is broken).
DEFAULT_TIMEOUT, DEFAULT_ATTEMPTS = 21600, 10
#: The claim pool converted tasks are served from (``manager run --pool taskset``).
POOL = "taskset"
_FIELD = re.compile(r"^[^./\x00]+$")


class V1FormatError(ValueError):
    """A directory name or task that is not a v1 task this compatibility layer can run."""


@attrs.frozen
class TaskName:
    """The fields of a v1 task directory name."""

    taskset: str
    taskid: str
    step: str
    restarts: int
    owner: str
    priority: int
    status: str

    def with_status(self, status: str, owner: str = "unclaimed") -> str:
        return ".".join((PREFIX, self.taskset, self.taskid, self.step, str(self.restarts), owner,
                         str(self.priority), status))


def parse_task_name(name: str) -> TaskName:
    """The fields of ``ht.task.<taskset>.<taskid>.<step>.<restarts>.<owner>.<priority>.<status>``."""
    parts = name.split(".")
    if len(parts) != 9 or parts[0] != "ht" or parts[1] != "task":
        raise V1FormatError(f"{name!r} is not a v1 task directory name "
                            "(ht.task.<taskset>.<taskid>.<step>.<restarts>.<owner>.<priority>.<status>)")
    taskset, taskid, step, restarts, owner, priority, status = parts[2:]
    for what, value in (("taskset", taskset), ("taskid", taskid), ("step", step), ("owner", owner)):
        if not _FIELD.match(value):
            raise V1FormatError(f"{name!r}: empty or invalid {what} field")
    if not (restarts + priority).isascii() or not restarts.isdigit() or not priority.isdigit():
        raise V1FormatError(f"{name!r}: the restarts and priority fields must be numbers")
    return TaskName(taskset, taskid, step, int(restarts), owner, int(priority), status)


def job_priority(v1_priority: int) -> int:
    """A v1 priority (1 first ... 5 last, 3 the default) as a job priority (higher first, 0 the default)."""
    return DEFAULT_PRIORITY - v1_priority


def tag_for(taskid: str) -> str:
    """A job tag from a v1 task id: lower case, tag-safe, at most 48 characters."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", taskid.lower()).strip("-._")
    slug = re.sub(r"-{2,}", "-", slug)[:48].rstrip("-._")
    return slug or "v1-task"


def outcome_of(status: int, timed_out: bool) -> str:
    """The v1 taskmanager's reading of one step's exit: ``finished``, ``next``, ``subtasks``, ``broken``,
    ``timeout`` or ``stopped`` (every status v1 does not define)."""
    if timed_out or status == EXIT_TIMEOUT:
        return "timeout"
    return {EXIT_FINISHED: "finished", EXIT_NEXT: "next", EXIT_SUBTASKS: "subtasks", EXIT_BROKEN: "broken"}.get(
        status, "stopped")


def task_job_spec(name: TaskName, runner: dict[str, str | None], *, source: str, pool: str = POOL) -> JobSpec:
    """The job.json of a converted task: the packaged v1 runner, its step, pool ``taskset``, its v1 fields."""
    return JobSpec(
        name=f"httk-v1 {name.taskid}",
        workflow="httk-v1",
        runner_source=str(runner["source"]),
        runner_path=str(runner["path"]),
        runner_sha256=runner.get("sha256"),
        initial_step=name.step,
        inputs={"v1": {"taskset": name.taskset, "taskid": name.taskid, "step": name.step,
                       "restarts": name.restarts, "priority": name.priority, "status": name.status,
                       "source": source}},
        priority=job_priority(name.priority),
        pool=pool,
        maximum_attempts_per_activation=DEFAULT_ATTEMPTS,
    )
