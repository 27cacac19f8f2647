"""Running programs from a step, and the runtime utilities, through real attempts.

Spec 001 "Data and workdir changes" (``a.run``, ``ProcessSupervisor``); spec 002
rows Attempt.run, supervision.ProcessSupervisor and runtime_utils.*.
"""

from __future__ import annotations

import bz2
import json
import os
import sys

#: A checker is named after the basename of its argv[0]; runners here start it with the manager's interpreter.
PYTHON_NAME = os.path.basename(sys.executable)
CHECKER_NAME = f"checker:{PYTHON_NAME}"

RUN_TIMEOUT = """
import time

run = Runner("e2e")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@run.step
def main(a):
    # The grandchild is started in the background by a shell; only the process group reaches it.
    script = "sleep 60 & echo $! > grandchild.pid; echo started > started.txt; wait"
    started = time.monotonic()
    result = a.run(["sh", "-c", script], timeout=1.0)
    elapsed = time.monotonic() - started
    grandchild = int((a.workdir / "grandchild.pid").read_text(encoding="utf-8"))
    ok = a.run(["sh", "-c", "pwd > where.txt; exit 3"])
    save(a, {
        "timed_out": result.timed_out,
        "returncode": result.returncode,
        "argv": list(result.argv),
        "elapsed": elapsed,
        "grandchild_alive": alive(grandchild),
        "second": [ok.returncode, ok.timed_out],
        "where": (a.workdir / "where.txt").read_text(encoding="utf-8").strip(),
        "refused": _refused(a),
    })
    a.succeed() if result.timed_out else a.fail("no_timeout", "the command was not timed out")


def _refused(a):
    try:
        a.run("sleep 1")
    except TypeError as error:
        return str(error)
    return None
"""


def test_run_timeout_terminates_the_whole_process_group(harness) -> None:
    ref = harness.publish(RUN_TIMEOUT)
    job = harness.submit(ref)
    harness.finish(job, "succeeded")
    report = harness.report(job)
    assert report["timed_out"] is True and report["returncode"] != 0
    assert report["argv"][0] == "sh"
    assert 1.0 <= report["elapsed"] < 10.0
    assert report["grandchild_alive"] is False
    assert report["second"] == [3, False]
    assert report["where"] == str(harness.workdir(job))  # commands run in the workdir
    assert "argument array" in report["refused"]


CHECKER = r"""
import json
import sys

for line in sys.stdin:
    event = json.loads(line)
    assert event["format"] == "httk-workflow-checker-event" and event["format_version"] == 1
    if "FATAL" in event["line"]:
        result = {"action": "stop", "reason": "fatal error in output", "diagnosis": {"source": event["source"]}}
    else:
        result = {"action": "continue"}
    print(json.dumps({"format": "httk-workflow-checker-result", "format_version": 1, **result}), flush=True)
"""

SUPERVISED = """
from httk.workflow.supervision import ProcessSupervisor

run = Runner("e2e")

CHECKER = {checker!r}
PROGRAM = (
    "import sys, time\\n"
    "print('starting', flush=True)\\n"
    "print('FATAL: ZBRENT bracketing', flush=True)\\n"
    "time.sleep(60)\\n"
)


@run.step
def main(a):
    (a.workdir / "checker.py").write_text(CHECKER, encoding="utf-8")
    stopped = ProcessSupervisor(
        [sys.executable, "-c", PROGRAM],
        cwd=a.workdir,
        timeout=30,
        checkers=[[sys.executable, "checker.py"]],
        stdout_path="program.out",
        kill_grace=1.0,
    ).run()
    timed = ProcessSupervisor(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=a.workdir,
        timeout=0.5,
        report_path="timeout-report.json",
        kill_grace=1.0,
    ).run()
    clean = ProcessSupervisor(
        [sys.executable, "-c", "print('fine')"], cwd=a.workdir, report_path="clean-report.json",
        stdout_path="clean.out",
    ).run()
    save(a, {{
        "stopped": [stopped.status, stopped.exit_class, stopped.stopped_by, stopped.timed_out],
        "timed": [timed.status, timed.exit_class, timed.timed_out],
        "clean": [clean.status, clean.exit_class, clean.returncode],
    }})
    if stopped.exit_class == 125:
        a.fail("checker_stopped", stopped.report["stop"]["reason"], details=stopped.report["stop"]["diagnosis"])
    else:
        a.succeed()
"""


def test_process_supervisor_with_a_checker_writes_process_report(harness) -> None:
    ref = harness.publish(SUPERVISED.format(checker=CHECKER))
    job = harness.submit(ref, maximum_attempts_per_activation=1)
    show = harness.finish(job, "failed")
    assert show["failure"] == {
        "code": "checker_stopped",
        "message": "fatal error in output",
        "details": {"source": "stdout"},
        "retryable": False,
    }
    report = harness.report(job)
    assert report["stopped"] == ["stopped", 125, CHECKER_NAME, False]
    assert report["timed"] == ["timeout", 124, True]
    assert report["clean"] == ["succeeded", 0, 0]
    workdir = harness.workdir(job)
    process = json.loads((workdir / "process-report.json").read_text(encoding="utf-8"))
    assert process["format"] == "httk-workflow-process-report" and process["format_version"] == 1
    assert process["exit_class"] == 125 and process["stopped_by"] == CHECKER_NAME
    assert process["stop"]["reason"] == "fatal error in output"
    [checker] = process["checkers"]
    assert checker["name"] == PYTHON_NAME and checker["results"][0]["action"] == "stop"
    assert checker["continued"] >= 1  # the "starting" line
    assert "FATAL: ZBRENT bracketing" in (workdir / "program.out").read_text(encoding="utf-8")
    timeout = json.loads((workdir / "timeout-report.json").read_text(encoding="utf-8"))
    assert timeout["status"] == "timeout" and timeout["exit_class"] == 124
    assert (workdir / "clean.out").read_text(encoding="utf-8") == "fine\n"


UTILITIES = """
from httk.workflow import runtime_utils

run = Runner("e2e")


@run.step
def main(a):
    value = runtime_utils.evaluate_expression("ceil(encut * 1.3) + 2 ** n", {"encut": 400, "n": 3})
    try:
        runtime_utils.evaluate_expression("__import__('os')")
        refused = None
    except ValueError as error:
        refused = str(error)
    rendered = runtime_utils.render_template(
        "INCAR.template", {"encut": 520, "system": {"name": "Si"}, "magmom": [1, 2]}, "INCAR"
    )
    compressed = runtime_utils.compress_files(["OUTCAR", "vasprun.xml"], method="bz2", remove=True)
    restored = runtime_utils.decompress_files(["vasprun.xml.bz2"], remove=False)
    save(a, {
        "value": value,
        "refused": refused,
        "rendered": rendered,
        "compressed": [p.name for p in compressed],
        "restored": [p.name for p in restored],
    })
    a.succeed()
"""


def test_runtime_utils_from_a_runner(harness) -> None:
    ref = harness.publish(UTILITIES)
    job = harness.submit(
        ref,
        files={
            "INCAR.template": "SYSTEM = {{ system.name }}\nENCUT = {{ encut }}\nMAGMOM = {{ magmom.1 }}\n",
            "OUTCAR": "outcar text\n" * 50,
            "vasprun.xml": "<xml/>\n",
        },
    )
    harness.finish(job, "succeeded")
    report = harness.report(job)
    assert report["value"] == 528  # ceil(520.0) + 8
    assert report["refused"]
    assert report["rendered"] == "SYSTEM = Si\nENCUT = 520\nMAGMOM = 2\n"
    assert report["compressed"] == ["OUTCAR.bz2", "vasprun.xml.bz2"]
    assert report["restored"] == ["vasprun.xml"]
    workdir = harness.workdir(job)
    assert (workdir / "INCAR").read_text(encoding="utf-8") == report["rendered"]
    assert not (workdir / "OUTCAR").exists()
    assert bz2.decompress((workdir / "OUTCAR.bz2").read_bytes()) == b"outcar text\n" * 50
    assert (workdir / "vasprun.xml").read_text(encoding="utf-8") == "<xml/>\n"
    assert (workdir / "vasprun.xml.bz2").exists()
