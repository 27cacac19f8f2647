"""The packaged httk v1 runner: one attempt runs one v1 step of an unchanged ``ht_steps``.

The job's persistent workdir is the v1 task directory (the converted payload is
the task's files plus ``job.json``), so ``ht_steps`` finds everything where v1 put
it: the step runs as ``../ht_steps STEP`` in ``<task>/ht.run.current`` (an
``ht_run`` program without ``ht_steps`` runs as ``./ht_run STEP`` in the task),
with ``HTTK_DIR`` naming the runner's own copy of the historic
``Execution/tasks/`` files — thin redirects to the compatibility implementation
in ``lib/`` — and the v1 taskmanager's variables (``HT_TASK_TOP_DIR``,
``HT_TASK_STEP``, ``HT_TASK_RUN_NAME``, ``HT_TASK_CURRENT_DIR``,
``HT_TASKMGR_TIMEOUT``). Its output is appended to ``<task>/ht.taskmgr.stdout``
and to the attempt's ``stdout.log``.

The step's exit status becomes the outcome, as the v1 taskmanager read it:
10 ``succeed`` (``ht.run.current`` becomes ``ht.run.<date>``), 2 ``advance`` to
the step in ``ht.nextstep`` (with the priority ``HT_TASK_SET_PRIORITY`` left, if
any), 3 spawn the subtasks ``HT_TASK_CREATE`` made and ``gather`` them
(``all_terminal``) before the step in ``ht.nextstep``, 4 ``fail`` ``v1_broken``,
a timeout ``fail`` ``v1_timeout`` and any other status ``fail`` ``v1_stopped``,
each after the v1 ``ht.reason`` line (and ``ht_steps freeze`` for broken and timed
out tasks). See docs/v1_compatibility.md.
"""

from __future__ import annotations

import bz2
import os
import shutil
from pathlib import Path
from typing import Any

from ..adapters.clock import SystemClock, local_time_text
from ..adapters.fs_posix import PosixFilesystem
from ..ports import Clock, Filesystem
from ..protocol import prepare_job_payload
from ..sdk import Attempt
from .v1_format import (
    BROKEN_STEP,
    DEFAULT_TIMEOUT,
    FINISHED_STEP,
    PREFIX,
    V1FormatError,
    job_priority,
    outcome_of,
    parse_task_name,
    tag_for,
    task_job_spec,
)

RUN_DIR = "ht.run.current"
LOG = "ht.taskmgr.stdout"
FREEZE_TIMEOUT = 600.0
#: Each command runs in the directory its first argument names (``Attempt.run`` starts in the workdir).
IN_DIR = 'cd "$1" && shift && exec "$@"'
#: Runs the step with its output appended to the task's log and passed on to the attempt's stdout.
TEE = 'cd "$1" && shift && set -o pipefail && "$@" 2>&1 | tee -a "$HT_TASK_TOP_DIR/ht.taskmgr.stdout"'
ATOMIC_EXEC = '. "$1" && cd "$2" && HT_TASK_ATOMIC_EXEC'
#: v1's finish names the run by its local date and time (``ht.run.2026-01-01_00.00.00``).
RUN_STAMP = "%Y-%m-%d_%H.%M.%S"


class V1Runner:
    """One attempt of a converted v1 task."""

    def __init__(self, attempt: Attempt, runner_dir: Path, *, fs: Filesystem | None = None,
                 clock: Clock | None = None) -> None:
        self.a = attempt
        # A runner process has no composition root: it builds the adapters it renames and reads time through.
        self.fs = fs if fs is not None else PosixFilesystem()
        self.clock = clock if clock is not None else SystemClock()
        self.top = attempt.workdir
        self.httk_dir = runner_dir / "httk_dir"
        self.library = runner_dir / "lib" / "ht_tasks_api.sh"

    def _run(self, argv: list[str], cwd: Path, timeout: float | None) -> Any:
        """Run ``argv`` in ``cwd`` as :meth:`Attempt.run` runs programs (its whole group ends on timeout)."""
        return self.a.run(["bash", "-c", IN_DIR, "ht-run", str(cwd), *argv], timeout=timeout)

    def _reason(self, line: str) -> None:
        with open(self.top / "ht.reason", "a", encoding="utf-8") as reason:
            reason.write(line + "\n")

    def _read(self, *candidates: Path) -> str | None:
        for path in candidates:
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace").strip()
                if text:
                    return text.splitlines()[0].strip()
        return None

    def step(self) -> None:
        a = self.a
        self._restore_subtasks()
        if (self.top / "ht_steps").is_file():
            program, rundir = ["../ht_steps"], self.top / RUN_DIR
            rundir.mkdir(exist_ok=True)
        elif (self.top / "ht_run").is_file():
            program, rundir = ["./ht_run"], self.top
        else:
            a.fail("v1_no_program", f"the task {self.top} has neither ht_steps nor ht_run")
            return
        if not os.access(self.top / program[0].split("/")[-1], os.X_OK):
            program = ["bash", *program]
        timeout = float(a.setting("httk_v1.timeout", os.environ.get("HT_TASKMGR_TIMEOUT") or DEFAULT_TIMEOUT))
        os.environ.update({
            "HTTK_DIR": str(self.httk_dir), "HT_TASK_TOP_DIR": str(self.top), "HT_TASK_STEP": a.step,
            "HT_TASK_RUN_NAME": RUN_DIR if rundir != self.top else ".", "HT_TASK_CURRENT_DIR": str(rundir),
            "HT_TASKMGR_TIMEOUT": str(int(timeout)),
        })
        # The v1 taskmanager completes interrupted atomic sections of the task and of its run before a step.
        for directory in dict.fromkeys((self.top, rundir)):
            self._run(["bash", "-c", ATOMIC_EXEC, "ht-atomic", str(self.library), str(directory)], directory, 600.0)
        step = self._read(rundir / "ht.nextstep") or a.step
        if step == FINISHED_STEP:
            self._finished(rundir)
            return
        if step == BROKEN_STEP:
            self._ended("broken", rundir, "Task gave 'broken' as return code.", "v1_broken",
                        "the task is broken (ht.nextstep says ht_broken)")
            return
        os.environ["HT_TASK_STEP"] = step
        result = self.a.run(["bash", "-c", TEE, "ht-step", str(rundir), *program, step], timeout=timeout)
        ending = outcome_of(result.returncode, result.timed_out)
        nextstep = self._read(rundir / "ht.nextstep")
        priority = self._read(rundir / "ht.priority", self.top / "ht.priority")
        job_prio = job_priority(int(priority)) if priority and priority.isascii() and priority.isdigit() else None
        if ending == "finished":
            self._finished(rundir)
        elif ending in ("next", "subtasks") and not nextstep:
            self._ended("stopped", rundir, f"Task exited {result.returncode} without an ht.nextstep.", "v1_stopped",
                        f"step {step!r} exited {result.returncode} (next step) but left no ht.nextstep")
        elif ending == "next":
            a.advance(str(nextstep), priority=job_prio)
        elif ending == "subtasks":
            self._subtasks(str(nextstep))
        elif ending == "broken":
            self._ended("broken", rundir, "Task gave 'broken' as return code.", "v1_broken",
                        f"step {step!r} declared the task broken (exit 4)")
        elif ending == "timeout":
            self._ended("timeout", rundir, "Task timed out.", "v1_timeout",
                        f"step {step!r} ran past HT_TASKMGR_TIMEOUT={int(timeout)} s")
        else:
            self._ended("stopped", rundir,
                        f"Task returned non-defined error code ({result.returncode}). This usually means "
                        "something unexpected have returned an error.", "v1_stopped",
                        f"step {step!r} exited {result.returncode}, which v1 does not define (a stopped task)")

    def _finished(self, rundir: Path) -> None:
        """v1's finish: the log moves into the run, compressed, and the run is named by its date."""
        log = self.top / LOG
        if rundir != self.top:
            if log.is_file():
                (rundir / f"{LOG}.bz2").write_bytes(bz2.compress(log.read_bytes()))
                log.unlink()
            finished = self.top / f"ht.run.{local_time_text(self.clock.now(), RUN_STAMP)}"
            try:  # one rename that never replaces: a run finished in the same second is not overwritten
                self.fs.rename(str(rundir), str(finished), durable=True)
            except OSError as error:
                raise RuntimeError(f"could not rename {rundir} to {finished.name}: {error.strerror}") from None
        self.a.succeed()

    def _ended(self, status: str, rundir: Path, reason: str, code: str, message: str) -> None:
        self._reason(reason)
        if status in ("broken", "timeout") and rundir != self.top and (self.top / "ht_steps").is_file():
            (rundir / "ht.nextstep").unlink(missing_ok=True)
            program = ["../ht_steps"] if os.access(self.top / "ht_steps", os.X_OK) else ["bash", "../ht_steps"]
            self._run([*program, "freeze"], rundir, FREEZE_TIMEOUT)
        log = self.top / LOG
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:] if log.is_file() else []
        self.a.fail(code, message, details={"v1_status": status, "reason": reason, "output": tail})

    # ------------------------------------------------------------------------------ subtasks
    def _subtasks(self, nextstep: str) -> None:
        """Spawn every waiting subtask below the task as a converted child; gather them, then run ``nextstep``."""
        a = self.a
        spawned: dict[str, str] = {}
        staging = self.top / ".httk-v1" / a.context.attempt_id
        for directory in sorted(self._waiting_subtasks()):
            name = parse_task_name(directory.name)
            label = f"{tag_for(name.taskid)[:38]}-{len(spawned):04d}"
            payload = staging / label
            shutil.copytree(directory, payload, symlinks=True)
            spec = task_job_spec(name, a.job.runner, source=str(directory.relative_to(self.top)), pool=a.job.pool)
            prepare_job_payload(payload, spec, durable=a.context.durable)
            a.spawn(payload, label=label)
            spawned[label] = str(directory.relative_to(self.top))
        if not spawned:
            a.advance(nextstep)  # v1: a task waiting on no running subtask goes straight on
            return
        a.state.merge({"v1_subtasks": spawned})
        a.gather(nextstep, when="all_terminal")

    def _waiting_subtasks(self) -> list[Path]:
        found = []
        for root, dirs, _files in os.walk(self.top):
            keep = []
            for name in dirs:
                if name.startswith("ht.tmp.") or name == ".httk-v1" or name == ".httk-runner":
                    continue
                if name.startswith(f"{PREFIX}.") and name.endswith(".waitstart"):
                    try:
                        parse_task_name(name)
                    except V1FormatError:
                        continue
                    found.append(Path(root) / name)
                    continue
                keep.append(name)
            dirs[:] = keep
        return found

    def _restore_subtasks(self) -> None:
        """After the gather: each subtask's final tree goes back where v1 made it, named by how it ended."""
        subtasks = self.a.state.get("v1_subtasks") or {}
        if not self.a.children or not subtasks:
            return
        statuses = {"succeeded": "finished", "failed": "broken", "cancelled": "stopped"}
        for child in self.a.children:
            relative = subtasks.get(child.label)
            if relative is None or child.workdir is None or not child.workdir.is_dir():
                continue
            original = self.top / relative
            name = parse_task_name(original.name)
            target = original.parent / name.with_status(statuses.get(child.kind, "stopped"))
            if not target.exists():
                shutil.copytree(child.workdir, target, symlinks=True,
                                ignore=shutil.ignore_patterns(".httk-runner"))
            if original.exists():
                shutil.rmtree(original)
        shutil.rmtree(self.top / ".httk-v1", ignore_errors=True)
        self.a.state.delete("v1_subtasks")


def main(runner_dir: Path) -> int:
    """The packaged runner's entry point (``compat/httk-v1/run.py``)."""
    attempt = Attempt.initialize()
    V1Runner(attempt, runner_dir).step()
    return 0
