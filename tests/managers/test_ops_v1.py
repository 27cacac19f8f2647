"""Converted httk v1 tasks: ``v1 convert`` and the packaged v1 runner, driven by real managers.

The tasks are v1 task directories as the v1 taskmanager found them
(``ht.task.<taskset>.<id>.<step>.<restarts>.<owner>.<priority>.<status>``) whose
``ht_steps`` are written the way httk 1.2.0's task templates are: they source
the historic ``$HTTK_DIR/Execution/tasks/ht_tasks_api.sh``, call
``HT_TASK_INIT "$@"``, branch on ``$STEP`` and end each step through an atomic
section (docs/v1_compatibility.md lists what is kept).
"""

from __future__ import annotations

import bz2
import json
from pathlib import Path
from typing import Any

from httk.workflow.operations.collect import collect

HEADER = """#!/bin/bash
# httk-test-task ({what})
# 1.0
. "$HTTK_DIR"/Execution/tasks/ht_tasks_api.sh

HT_TASK_INIT "$@"
echo "== ht_steps, step: $STEP"
"""

#: Two relaxation rounds kept in ht.vars, a run log, then a cleanup that finishes the task.
RELAX = HEADER.format(what="relax until two rounds agree") + """
if [ "$STEP" == "start" ]; then
    cp ../POSCAR POSCAR
    HT_TASK_ATOMIC_SECTION_START
    HT_TASK_ATOMIC_RUNLOG_HEADLINE "START INPUT"
    HT_TASK_ATOMIC_RUNLOG_APPEND ../POSCAR
    HT_TASK_STORE_VAR RELAXSTEP 1
    HT_TASK_ATOMIC_SECTION_END_NEXT relax
fi

if [ "$STEP" == "relax" ]; then
    ENERGY=$(HT_FCALC "-10.5 * $RELAXSTEP")
    HT_TASK_ATOMIC_SECTION_START
    echo "$ENERGY" > energy.$RELAXSTEP
    HT_TASK_ATOMIC_RUNLOG_NOTE "ENERGY: $ENERGY"
    if HT_FTEST "$RELAXSTEP < 2"; then
        HT_TASK_STORE_VAR RELAXSTEP $((RELAXSTEP+1))
        HT_TASK_ATOMIC_SECTION_END_NEXT relax
    fi
    HT_TASK_ATOMIC_SECTION_END_NEXT cleanup
fi

if [ "$STEP" == "cleanup" ]; then
    rm -f POSCAR
    HT_TASK_CLEANUP
    HT_TASK_FINISHED
fi
"""

BROKEN = HEADER.format(what="always broken") + """
if [ "$STEP" == "start" ]; then
    HT_TASK_SET_PRIORITY 5
    HT_TASK_ATOMIC_SECTION_START
    HT_TASK_ATOMIC_SECTION_END_NEXT check
fi
if [ "$STEP" == "check" ]; then
    HT_TASK_BROKEN
fi
if [ "$STEP" == "freeze" ]; then
    echo frozen > frozen
    exit 0
fi
"""

VASP = HEADER.format(what="uses the v1 VASP tools") + """
. "$HTTK_DIR"/Execution/tasks/vasp/vasptools.sh
VASP_PREPARE_CALC
"""

#: A parent that creates two subtasks (each with its own ht_steps), waits for them, and sums their results.
PARENT = HEADER.format(what="a parent of two subtasks") + """
if [ "$STEP" == "start" ]; then
    make_subtask() { cp ../../sub_steps ht_steps; echo "$2" > input; }
    printf 'a 3\\nb 4\\n' | HT_TASK_CREATE make_subtask ./ start any 3
    HT_TASK_ATOMIC_SECTION_START
    HT_TASK_ATOMIC_SECTION_END_SUBTASKS collect
fi
if [ "$STEP" == "collect" ]; then
    TOTAL=0
    for RESULT in ht.task.any.*.finished/ht.run.*/square; do
        TOTAL=$((TOTAL + $(cat "$RESULT")))
    done
    echo "$TOTAL" > total
    HT_TASK_FINISHED
fi
"""
SUB = HEADER.format(what="one subtask") + """
if [ "$STEP" == "start" ]; then
    VALUE=$(cat ../input)
    echo $((VALUE * VALUE)) > square
    HT_TASK_FINISHED
fi
"""


def make_task(root: Path, name: str, steps: str, **files: str) -> Path:
    task = root / "v1" / name
    task.mkdir(parents=True)
    (task / "ht_steps").write_text(steps)
    (task / "ht_steps").chmod(0o755)
    (task / "ht.config").write_text("[main]\ndescription = a test task\n")
    for file, text in files.items():
        (task / file).write_text(text)
    return task


def convert(ops: Any, task: Path, *extra: str) -> dict[str, Any]:
    return json.loads(ops.httk("v1", "convert", str(task), "--workspace", str(ops.root), "--json", *extra).stdout)


def workdir(ops: Any, job: str) -> Path:
    return Path(ops.handle.layout.persistent_workdir(job))


def test_a_converted_v1_task_runs_to_completion_under_manager_run_pool_taskset(ops):
    task = make_task(ops.tmp, "ht.task.any.sio2.start.0.unclaimed.2.waitstart", RELAX, POSCAR="Si O\n1.0\n")
    converted = convert(ops, task)
    job = converted["job_id"]
    assert converted["workflow_realization"] == "httk-v1" and converted["pool"] == "taskset"
    assert converted["step"] == "start" and converted["priority"] == 1  # v1 priority 2 of 1..5
    assert converted["runner"]["path"] == "compat/httk-v1"
    # A manager of the default pool leaves it alone.
    idle = ops.run()
    assert ops.kind(job) == "submitted" or ops.kind(job) == "ready"
    assert "need pool taskset" in idle.stdout
    ops.httk("manager", "run", str(ops.root), "--pool", "taskset", timeout=120)
    assert ops.kind(job) == "succeeded"
    steps = [entry["step"] for entry in ops.log(job) if entry.get("event") == "launch"]
    assert steps == ["start", "relax", "relax", "cleanup"]
    tree = workdir(ops, job)
    [run] = [path for path in tree.iterdir() if path.name.startswith("ht.run.")]
    assert run.name != "ht.run.current" and len(run.name) == len("ht.run.2026-01-01_00.00.00")
    assert (run / "energy.1").read_text().strip() == "-10.5" and (run / "energy.2").read_text().strip() == "-21"
    runlog = (run / "ht.RUNLOG").read_text()
    assert "START INPUT" in runlog and "ENERGY: -21" in runlog and "Si O" in runlog
    assert "== ht_steps, step: cleanup" in bz2.decompress((run / "ht.taskmgr.stdout.bz2").read_bytes()).decode()
    assert not (tree / "ht.taskmgr.stdout").exists() and not (run / "ht.vars").exists()
    shown = ops.httk("job", "show", str(ops.root), job).stdout
    assert "realization      httk-v1" in shown
    [collected] = [item for item in collect(ops.handle) if item.job_id == job]
    assert collected.workflow_realization == "httk-v1" and collected.workdir == str(tree)


def test_broken_and_stopped_v1_exits_fail_the_job_with_the_v1_reason(ops):
    broken = convert(ops, make_task(ops.tmp, "ht.task.any.bad.start.0.unclaimed.3.waitstart", BROKEN))["job_id"]
    vasp = convert(ops, make_task(ops.tmp, "ht.task.any.vasp.start.0.unclaimed.3.waitstart", VASP))["job_id"]
    why = ops.httk("job", "why", str(ops.root), broken).stdout
    assert "realization: httk-v1" in why and "--pool taskset" in why
    ops.httk("manager", "run", str(ops.root), "--pool", "taskset", timeout=120)
    failure = ops.frame(broken).failure
    assert ops.kind(broken) == "failed" and failure.code == "v1_broken" and not failure.retryable
    # HT_TASK_SET_PRIORITY 5 lowered the job's priority before the broken step (v1 5 -> job -2).
    assert ops.marker(broken).priority == -2
    assert "Task gave 'broken' as return code." in (workdir(ops, broken) / "ht.reason").read_text()
    # As the v1 taskmanager does, a broken task's ht_steps is called once more with the step freeze.
    assert (workdir(ops, broken) / "ht.run.current" / "frozen").read_text().strip() == "frozen"
    failure = ops.frame(vasp).failure
    assert failure.code == "v1_stopped" and "64" in failure.message
    assert any("vasptools.sh (the v1 VASP tools) is not provided" in line for line in failure.details["output"])


def test_subtasks_run_as_spawned_jobs_and_come_back_finished_where_v1_put_them(ops):
    task = make_task(ops.tmp, "ht.task.any.parent.start.0.unclaimed.3.waitstart", PARENT, sub_steps=SUB)
    job = convert(ops, task)["job_id"]
    ops.httk("manager", "run", str(ops.root), "--pool", "taskset", timeout=180)
    assert ops.kind(job) == "succeeded"
    tree = workdir(ops, job)
    [run] = [path for path in tree.iterdir() if path.name.startswith("ht.run.")]
    assert (run / "total").read_text().strip() == str(3 * 3 + 4 * 4)
    finished = sorted(path.name for path in run.glob("ht.task.*"))
    assert finished == ["ht.task.any.a.start.0.unclaimed.3.finished", "ht.task.any.b.start.0.unclaimed.3.finished"]
    listing = json.loads(ops.httk("job", "list", str(ops.root), "--json").stdout)
    assert sorted(entry["kind"] for entry in listing) == ["succeeded"] * 3


def test_v1_convert_refusals_write_nothing(ops):
    good = make_task(ops.tmp, "ht.task.any.ok.start.0.unclaimed.3.waitstart", RELAX)
    done = make_task(ops.tmp, "ht.task.any.done.start.0.unclaimed.3.finished", RELAX)
    plain = make_task(ops.tmp, "not-a-task", RELAX)
    empty = ops.tmp / "v1" / "ht.task.any.empty.start.0.unclaimed.3.waitstart"
    empty.mkdir()
    (ops.tmp / "taken").mkdir()
    before = sorted(str(path.relative_to(ops.tmp)) for path in ops.tmp.rglob("*"))
    for args, needle in (
        ([str(plain)], "is not a v1 task directory name"),
        ([str(done)], "the task is finished already"),
        ([str(empty)], "has neither ht_steps nor ht_run"),
        ([str(good), "--output", str(ops.tmp / "taken")], "exists already"),
        ([str(good), "--placement", "../x"], "placement"),
        ([str(ops.tmp / "missing")], "not a directory"),
    ):
        result = ops.httk("v1", "convert", *args, "--workspace", str(ops.root), code=2)
        assert result.stderr.startswith("error: ") and needle in result.stderr, result.stderr
    assert sorted(str(path.relative_to(ops.tmp)) for path in ops.tmp.rglob("*")) == before


def test_v1_convert_output_writes_a_payload_that_job_submit_takes(ops):
    task = make_task(ops.tmp, "ht.task.any.later.relax.1.unclaimed.3.waitstep", RELAX, POSCAR="Si\n")
    payload = ops.tmp / "payload"
    converted = convert(ops, task, "--output", str(payload))
    assert converted["job_id"] is None and Path(converted["payload"]) == payload
    document = json.loads((payload / "job.json").read_text())
    assert document["initial_step"] == "relax" and document["claim"]["pool"] == "taskset"
    assert document["inputs"]["v1"] == {"taskset": "any", "taskid": "later", "step": "relax", "restarts": 1,
                                        "priority": 3, "status": "waitstep", "source": str(task)}
    assert (payload / "ht_steps").read_text() == RELAX and (payload / "POSCAR").read_text() == "Si\n"
    ops.httk("job", "submit", str(ops.root), str(payload), "--placement", "v1")


def test_v1_convert_prints_the_job_key_as_job_submit_does(ops):
    """The text output is the tag--uuid key (what 'job submit' prints), not the bare uuid."""
    task = make_task(ops.tmp, "ht.task.any.keyed.start.0.unclaimed.3.waitstart", RELAX)
    printed = ops.httk("v1", "convert", str(task), "--workspace", str(ops.root)).stdout.strip()
    listed = json.loads(ops.httk("job", "list", str(ops.root), "--json").stdout)
    keys = [job["job_key"] for job in (listed["jobs"] if isinstance(listed, dict) else listed)]
    assert keys == [printed] and "--" in printed
