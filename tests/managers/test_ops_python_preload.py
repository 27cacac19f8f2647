"""Python-SDK runners under real managers, forked from the preloaded interpreter (docs/task_manager.md).

The runner tells whether it was preloaded by looking for ``cattrs`` in ``sys.modules``
before its first import: a fresh ``python run.py`` has not imported it yet.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from runner_support import SUCCEED

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")

RUNNER = """import os, sys, time
PRELOADED = "cattrs" in sys.modules
from httk.workflow import Runner

run = Runner("ops")


@run.step
def main(a):
    (a.workdir / "preloaded").write_text(str(PRELOADED))
    (a.workdir / "ppid").write_text(str(os.getppid()))
    (a.workdir / "started").touch()
    deadline = time.monotonic() + 60
    while {wait} and not (a.workdir / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    a.succeed()


raise SystemExit(run.main())
"""


def python_job(ops, *, wait: bool = False) -> str:
    return ops.job(RUNNER.format(wait=wait), runner_path="run.py")


def zygotes(ops) -> list[int]:
    """Live zygotes started for this test's managers (their environment names this test's XDG home)."""
    needle = f"XDG_DATA_HOME={ops.tmp / 'xdg'}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if b"python_zygote" in cmdline and needle in environ.split(b"\0"):
            found.append(int(name))
    return found


def test_python_runners_are_forked_preloaded_and_the_zygote_stops_with_the_manager(ops):
    jobs = [python_job(ops) for _ in range(3)]
    manager = ops.run("--workers", "2")
    for job in jobs:
        assert ops.kind(job) == "succeeded"
        assert (ops.workdir(job) / "preloaded").read_text() == "True"
        assert int((ops.workdir(job) / "ppid").read_text()) == manager.pid  # the manager's own child
        assert ops.frame(job).total_attempts == 1
    ops.wait_until(lambda: not zygotes(ops), 10, "the zygote to stop with its manager")


def test_the_off_switch_runs_a_fresh_interpreter(ops):
    ops.env["HTTK_WORKFLOW_PYTHON_PRELOAD"] = "0"
    job = python_job(ops)
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "preloaded").read_text() == "False"


def test_the_managers_pythonpath_reaches_the_preloaded_runner(ops, tmp_path):
    # The zygote starts with the attempt's start-up variables, so sys.path is a fresh interpreter's.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "ops_helper.py").write_text("VALUE = 'from PYTHONPATH'\n")
    ops.env["PYTHONPATH"] = f"{tmp_path / 'elsewhere'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    use = "import ops_helper\n    (a.workdir / 'helper').write_text(ops_helper.VALUE)\n    a.succeed()"
    body = RUNNER.format(wait=False).replace("a.succeed()", use)
    job = ops.job(body, runner_path="run.py")
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "preloaded").read_text() == "True"
    assert (ops.workdir(job) / "helper").read_text() == "from PYTHONPATH"


def test_cancel_kills_the_group_of_a_preloaded_runner(ops):
    job = python_job(ops, wait=True)
    manager = ops.start("--idle")
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    assert (ops.workdir(job) / "preloaded").read_text() == "True"
    process = ops.frame(job).process
    ops.request(job, "cancel")
    ops.wait_kind(job, "cancelled", timeout=30)
    assert not ops.group_members(process.pgid)
    manager.signal(signal.SIGTERM)
    assert manager.wait(20) == 0, manager.stderr


def test_a_preloaded_runner_outlives_its_killed_manager_and_the_next_one_adopts_it(ops, tmp_path):
    job = python_job(ops, wait=True)
    first_id, process = ops.orphan(job)
    assert (ops.workdir(job) / "preloaded").read_text() == "True"
    assert ops.pid_alive(process.pid)
    ops.wait_until(lambda: not zygotes(ops), 10, "the zygote to die with its manager")
    assert ops.pid_alive(process.pid)  # the runner did not
    ops.wait_until(lambda: ops.heartbeat_age(first_id) > 1.2, 10, "manager 1's lease to expire")

    second = ops.start("--idle", "--lease-seconds", "1", "--workers", "2")
    log = Path(ops.handle.layout.managers) / second.manager_id / "log"
    ops.wait_until(lambda: log.exists() and "process is alive" in log.read_text(), 30, "the adoption decision")
    frame = ops.frame(job)
    assert ops.kind(job) == "running" and frame.process == process and frame.total_attempts == 1

    (ops.workdir(job) / "go").touch()
    ops.wait_kind(job, "succeeded", timeout=30)
    frame = ops.frame(job)
    assert frame.total_attempts == 1 and frame.takeover.rule == "outcome_published"
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0, second.stderr


# -- Bash runners: the bridge their library would start, started preloaded ------------------------------------

BASH_RUNNER = r"""#!/usr/bin/env bash
set -euo pipefail
printf '%s\n' "${HTTK_WORKFLOW_BRIDGE-unset}" > given
source "$HTTK_WORKFLOW_SHELL_LIB"
{before}
httk_workflow_runner ops main
step_main() {
    printf '%s\n' "${HTTK_WORKFLOW_BRIDGE-unset}" > after
    printf '%s %s %s\n' "$$" "${_HTTK_SERVE_PID:-none}" "${_HTTK_SERVE_OWN:-none}" > serve
    if [[ -n ${_HTTK_SERVE_PID:-} ]]; then
        tr '\0' ' ' < "/proc/$_HTTK_SERVE_PID/cmdline" > bridge.cmdline
        read -r -a stat < "/proc/$_HTTK_SERVE_PID/stat"
        printf '%s %s\n' "${stat[3]}" "${stat[4]}" > bridge.parent_and_group
    fi
    httk_workflow_state_set answer 42
    mkdir -p sub && cd sub
    httk_workflow_state_get answer > ../answer
    cd ..
    # A served call moved the bridge into the caller's directory; a one-shot call leaves it where it was.
    [[ -z ${_HTTK_SERVE_PID:-} ]] || readlink "/proc/$_HTTK_SERVE_PID/cwd" > bridge.cwd
    printf '%s\n' "${_HTTK_SERVE_LOCK:+token}" > lock
    touch started
    for _ in $(seq 1 600); do [[ {wait} == 0 || -e go ]] && break; sleep 0.1; done
    httk_workflow_succeed
}
httk_workflow_main "$@"
"""


def bash_job(ops, *, wait: bool = False, before: str = "") -> str:
    body = BASH_RUNNER.replace("{wait}", "1" if wait else "0").replace("{before}", before)
    return ops.job(body, runner_path="run.bash")


def bridges(ops) -> list[int]:
    """Live bridge servers of this test's runners (their environment names this test's XDG home)."""
    needle = f"XDG_DATA_HOME={ops.tmp / 'xdg'}".encode()
    found = []
    for name in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if b"shell_bridge\0--serve" in cmdline and needle in environ.split(b"\0") and ops.pid_alive(int(name)):
            found.append(int(name))
    return found


def served(ops, job: str) -> bool:
    """Whether the job's calls were answered by its bridge (not one-shot) and the bridge was pre-started."""
    work = ops.workdir(job)
    own = (work / "serve").read_text().split()[2]
    moved = (work / "bridge.cwd").exists() and (work / "bridge.cwd").read_text().strip() == str(work / "sub")
    return own == "0" and moved and (work / "lock").read_text() == "token\n"


def test_a_bash_runner_gets_its_bridge_pre_started_in_the_runners_group(ops):
    job = bash_job(ops)
    manager = ops.run()
    assert ops.kind(job) == "succeeded", ops.log(job)
    work = ops.workdir(job)
    runner, bridge, _own = (work / "serve").read_text().split()
    assert served(ops, job)
    assert (work / "given").read_text().startswith(f"{runner}:")
    assert (work / "after").read_text() == "unset\n"  # never passed on to what the runner starts
    assert "-m httk.workflow.shell_bridge --serve" in (work / "bridge.cmdline").read_text()
    assert (work / "bridge.parent_and_group").read_text().split() == [runner, runner]
    assert (work / "answer").read_text() == "42\n"
    assert not ops.pid_alive(int(bridge))
    assert "lives on" not in manager.stderr


def test_sourcing_the_library_again_keeps_the_pre_started_bridge(ops):
    job = bash_job(ops, before='source "$HTTK_WORKFLOW_SHELL_LIB"')
    ops.run()
    assert ops.kind(job) == "succeeded", ops.log(job)
    assert served(ops, job)


def test_a_start_up_setting_changed_before_main_makes_the_calls_one_shot(ops):
    # As from a co-process started at main: the pre-started bridge was not started this way.
    job = bash_job(ops, before="export PYTHONIOENCODING=latin-1")
    ops.run()
    assert ops.kind(job) == "succeeded", ops.log(job)
    assert not served(ops, job)
    assert (ops.workdir(job) / "answer").read_text() == "42\n"


@pytest.mark.parametrize(("name", "own"), [("HTTK_WORKFLOW_PYTHON_PRELOAD", "1"),
                                           ("HTTK_WORKFLOW_SHELL_COPROCESS", "none")])
def test_the_off_switches_leave_the_bridge_to_the_library(ops, name, own):
    ops.env[name] = "0"
    job = bash_job(ops)
    ops.run()
    assert ops.kind(job) == "succeeded", ops.log(job)
    assert (ops.workdir(job) / "given").read_text() == "unset\n"
    assert (ops.workdir(job) / "serve").read_text().split()[2] == own
    assert (ops.workdir(job) / "answer").read_text() == "42\n"


@pytest.mark.parametrize("ending", ["false  # set -e: the runner fails before main",
                                    "httk_workflow_main unexpected  # main refuses at once"])
def test_a_runner_ending_before_it_used_its_bridge_leaves_no_stray(ops, ending):
    job = bash_job(ops, before=f"httk_workflow_runner ops main\n{ending}")
    manager = ops.run()
    assert ops.kind(job) == "failed"
    assert (ops.workdir(job) / "given").read_text() != "unset\n"
    assert "lives on" not in manager.stderr
    assert not bridges(ops)


def test_a_real_stray_is_still_killed_and_named(ops):
    job = ops.job('sleep 60 & echo $! > "$HTTK_WORKFLOW_WORKDIR/stray"\n' + SUCCEED)
    manager = ops.run()
    assert ops.kind(job) == "succeeded"
    assert "runner exited but its process group" in manager.stderr
    assert not ops.pid_alive(int((ops.workdir(job) / "stray").read_text()))


def test_cancel_kills_a_bash_runner_and_its_pre_started_bridge(ops):
    job = bash_job(ops, wait=True)
    manager = ops.start("--idle")
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    assert served(ops, job)
    bridge = int((ops.workdir(job) / "serve").read_text().split()[1])
    process = ops.frame(job).process
    ops.request(job, "cancel")
    ops.wait_kind(job, "cancelled", timeout=30)
    assert not ops.group_members(process.pgid)
    assert not ops.pid_alive(bridge)
    manager.signal(signal.SIGTERM)
    assert manager.wait(20) == 0, manager.stderr
