"""The bridge co-process of httk_workflow_main: one interpreter per attempt, calls that behave as processes.

Every runner here runs under a counting interpreter (``HTTK_WORKFLOW_PYTHON`` is a
wrapper that logs its pid and arguments, then execs Python), so a test can tell the
co-process from one-shot bridge processes. Where a call's observable effect matters
(stdout, stderr, status, the bytes on disk), the same runner also runs with
``HTTK_WORKFLOW_SHELL_COPROCESS=0`` (every call its own interpreter) and the two
are compared. Spec 002 (the parity table, exit-code discipline).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shell_support import LIB, TIMEOUT, bash_env

COPROCESS = "--serve"


class Counted:
    """A ``HTTK_WORKFLOW_PYTHON`` that records every interpreter start (pid, then the bridge arguments)."""

    def __init__(self, directory: Path) -> None:
        self.log = directory / "starts.log"
        self.python = directory / "python"
        self.python.write_text(f'#!/bin/sh\necho "$$ $*" >> "{self.log}"\nexec "{sys.executable}" "$@"\n')
        self.python.chmod(0o755)

    def starts(self) -> list[tuple[int, str]]:
        if not self.log.exists():
            return []
        rows = [line.split(" ", 1) for line in self.log.read_text().splitlines()]
        return [(int(pid), args) for pid, args in rows]

    def server_pids(self) -> list[int]:
        return [pid for pid, args in self.starts() if args.endswith(COPROCESS)]

    def reset(self) -> None:
        self.log.unlink(missing_ok=True)


@pytest.fixture
def counted(tmp_path: Path) -> Counted:
    """The test's counting ``HTTK_WORKFLOW_PYTHON`` (its start log is empty)."""
    return Counted(tmp_path)


def step_start(*lines: str) -> str:
    """A ``step_start`` handler running ``lines`` (one command each), then ``httk_workflow_succeed``."""
    return "step_start() {\n" + "".join(f"    {line}\n" for line in (*lines, "httk_workflow_succeed")) + "}"


def run_runner(runners, counted: Counted, body: str, *, coprocess: bool = True, **kwargs):
    env = {"HTTK_WORKFLOW_PYTHON": str(counted.python), **kwargs.pop("env", {})}
    if not coprocess:
        env["HTTK_WORKFLOW_SHELL_COPROCESS"] = "0"
    return runners.bash(body, env=env, **kwargs)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited, waiting up to the test timeout (it exits at end of file, not at once)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_one_interpreter_answers_every_call_of_an_attempt(make_attempt, runners, counted):
    attempt = make_attempt("start")
    body = step_start(
        "httk_workflow_state_set k '{\"a\": 1}'",
        "value=$(httk_workflow_state_get k)",
        'echo "value=$value step=$(httk_workflow_context step)"',
        "httk_workflow_runlog_note noted",
    )
    result = run_runner(runners, counted, body)
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'value={"a":1} step=start\n'
    assert [args for _pid, args in counted.starts()] == ["-m httk.workflow.shell_bridge --serve"]
    assert attempt.outcome()["action"] == "succeed"
    (server,) = counted.server_pids()
    assert not alive(server)  # ended and reaped before the runner exited: the manager finds the group empty

    counted.reset()
    attempt = make_attempt("start")
    result = run_runner(runners, counted, body, coprocess=False)
    assert result.returncode == 0 and result.stdout == 'value={"a":1} step=start\n'
    assert counted.server_pids() == [] and len(counted.starts()) == 6  # begin, four calls, succeed


BEHAVIOUR = r"""
step_start() {
    local status
    export HTTK_DEMO_LEVEL=3
    mkdir -p sub && cd sub
    printf 'hello\n' > note.txt
    httk_compress --remove note.txt
    ls
    echo "setting=$(httk_workflow_setting demo.level)"
    httk_workflow_input missing || echo "absent=$?"
    httk_workflow_state_set k 'not json' || echo "refused=$?"
    status=0; out=$(httk_workflow_input big) || status=$?; echo "big=${#out} status=$status"
    httk_workflow_input nul > nul.out && echo "nul=$?"
    httk_calc '2*x' x=21
    httk_template_render <(printf '{{ a }}') '{"a": "via a process substitution"}' -
    httk_workflow_succeed
}
"""


def test_a_call_behaves_as_its_own_process_would(make_attempt, runners, tmp_path):
    """Environment, working directory, umask, stdout, stderr and statuses: the same with and without."""
    from attempt_support import workspace_spec

    spec = workspace_spec(inputs={"big": "x" * 100000, "nul": "a\u0000b"})
    seen = []
    for coprocess in (True, False):
        attempt = make_attempt("start", spec=spec)
        counted = Counted(tmp_path)
        counted.reset()
        scratch = tmp_path / f"tmp-{coprocess}"
        scratch.mkdir()
        result = run_runner(runners, counted, BEHAVIOUR, coprocess=coprocess, env={"TMPDIR": str(scratch)})
        assert result.returncode == 0, result.stderr
        assert bool(counted.server_pids()) is coprocess
        sub = attempt.workdir / "sub"
        seen.append((result.stdout, result.stderr, (sub / "nul.out").read_bytes(), attempt.outcome()["action"]))
        # No spilled output and no lock FIFO left behind; the attempt lock's per-user directory
        # (adapters/attempt_lock.py, without XDG_RUNTIME_DIR) stays, but holds no lock file.
        left = [path for path in scratch.iterdir() if not path.name.startswith("httk-workflow-locks-")]
        assert left == [] and all(not any(path.iterdir()) for path in scratch.iterdir()), list(scratch.rglob("*"))
    assert seen[0] == seen[1]
    stdout, stderr, nul, _action = seen[0]
    assert stdout.splitlines() == [
        "note.txt.gz",
        "setting=3",
        "absent=1",
        "refused=2",
        "big=100000 status=0",
        "nul=0",
        "42",
        "via a process substitution",
    ]
    assert "httk_workflow_state_set: state value for 'k'" in stderr
    assert nul == b"a\x00b\n"


def test_a_failing_call_under_errexit_still_names_the_callers_line(make_attempt, runners, counted):
    attempt = make_attempt("start")
    body = step_start("value=$(httk_workflow_input missing)")
    result = run_runner(runners, counted, body)
    assert result.returncode == 1
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"]) == (4, "value=$(httk_workflow_input missing)")
    assert not attempt.ready.exists()
    assert len(counted.starts()) == 1  # the error breadcrumb went through the co-process too

    attempt = make_attempt("start")
    body = step_start("httk_workflow_state_set k nope")
    result = run_runner(runners, counted, body)
    assert result.returncode == 2 and "httk_workflow_state_set" in result.stderr
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"]) == (4, "httk_workflow_state_set k nope")


def test_concurrent_calls_each_get_their_own_answer(make_attempt, runners, counted):
    """Background jobs and pipelines call at once: one holds the token, the others run one-shot."""
    from attempt_support import workspace_spec

    attempt = make_attempt("start", spec=workspace_spec(inputs={f"k{i}": f"value-{i}" for i in range(8)}))
    body = step_start(
        "local i",
        'for i in 0 1 2 3 4 5 6 7; do httk_workflow_input "k$i" > "out$i" & done',
        "wait",
        "httk_workflow_input k1 | { httk_workflow_input k2; cat; } > piped",
    )
    result = run_runner(runners, counted, body)
    assert result.returncode == 0, result.stderr
    for index in range(8):
        assert (attempt.workdir / f"out{index}").read_text() == f"value-{index}\n"
    assert (attempt.workdir / "piped").read_text() == "value-2\nvalue-1\n"
    assert attempt.outcome()["action"] == "succeed"
    assert len(counted.server_pids()) == 1


def test_the_handlers_own_jobs_and_wait_do_not_see_the_coprocess(make_attempt, runners, counted):
    attempt = make_attempt("start")
    body = step_start("sleep 0.1 &", "wait", "jobs")
    result = run_runner(runners, counted, body)
    assert result.returncode == 0 and result.stdout == "", result.stderr
    assert attempt.outcome()["action"] == "succeed"


def test_a_program_left_running_does_not_keep_the_coprocess(make_attempt, runners, counted):
    """The library's descriptors are close-on-exec: a leftover program holds no end of the channel."""
    make_attempt("start")
    body = step_start("sleep 30 >/dev/null 2>&1 &", "echo $! > sleeper")
    result = run_runner(runners, counted, body)
    assert result.returncode == 0, result.stderr
    sleeper = int((Path(os.environ["HTTK_WORKFLOW_WORKDIR"]) / "sleeper").read_text())
    try:
        (server,) = counted.server_pids()
        assert not alive(server)
    finally:
        os.kill(sleeper, signal.SIGKILL)


def test_a_runner_killed_mid_step_leaves_no_coprocess(make_attempt, runners, counted):
    attempt = make_attempt("start")
    script = runners.directory / "killed.sh"
    script.write_text(
        'source "$HTTK_WORKFLOW_SHELL_LIB"\nhttk_workflow_runner demo start\n'
        "step_start() {\n    httk_workflow_state_set started true\n    touch running\n    sleep 60\n}\n"
        'httk_workflow_main "$@"\n'
    )
    env = bash_env(HTTK_WORKFLOW_PYTHON=str(counted.python))
    for how in ("group", "runner"):
        counted.reset()
        process = subprocess.Popen(["bash", str(script)], env=env, cwd=attempt.workdir, start_new_session=True)
        running = attempt.workdir / "running"
        deadline = time.monotonic() + TIMEOUT
        while not running.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.exists()
        running.unlink()
        (server,) = counted.server_pids()
        if how == "group":
            os.killpg(process.pid, signal.SIGKILL)  # the manager's timeout and cancel
            process.wait()
            assert gone(server)
        else:
            # Only the runner's own process: its handler (a subshell) still holds the channel, and may
            # still call, so the co-process serves until that subshell ends too.
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            os.killpg(process.pid, signal.SIGTERM)
            assert gone(server)


def test_without_a_coprocess_every_call_starts_an_interpreter(make_attempt, runners, counted):
    """``HTTK_WORKFLOW_SHELL_COPROCESS=0`` and a library used outside httk_workflow_main are one-shot."""
    attempt = make_attempt("start")
    result = run_runner(runners, counted, "step_start() { httk_workflow_succeed; }", coprocess=False)
    assert result.returncode == 0 and attempt.outcome()["action"] == "succeed"
    assert [args for _pid, args in counted.starts()] == [
        "-m httk.workflow.shell_bridge begin",
        "-m httk.workflow.shell_bridge succeed",
    ]
    counted.reset()
    outside = runners.directory / "outside.sh"
    outside.write_text('source "$HTTK_WORKFLOW_SHELL_LIB"\nhttk_calc 1+2\n')
    done = subprocess.run(
        ["bash", str(outside)],
        env=bash_env(HTTK_WORKFLOW_PYTHON=str(counted.python)),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.stdout == "3\n" and [args for _pid, args in counted.starts()] == [
        "-m httk.workflow.shell_bridge calc 1+2"
    ]


def test_a_coprocess_that_dies_makes_the_next_calls_one_shot(make_attempt, runners, counted):
    attempt = make_attempt("start")
    body = step_start(
        "httk_workflow_state_set before 1",
        'kill -9 "$_HTTK_SERVE_PID"',
        'while kill -0 "$_HTTK_SERVE_PID" 2>/dev/null; do sleep 0.05; done',
        "httk_workflow_state_set after 2",
    )
    result = run_runner(runners, counted, body)
    assert result.returncode == 0, result.stderr
    assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"after": 2, "before": 1}
    assert attempt.outcome()["action"] == "succeed"
    assert [args.split()[-1] for _pid, args in counted.starts()] == ["--serve", "2", "succeed"]


def test_a_call_right_after_the_coprocess_died_is_not_killed_by_sigpipe(make_attempt, runners, counted):
    """Runners start with SIGPIPE at its default: a write to a co-process that is gone but not yet reaped
    (``kill -0`` still answers) must fail the call with status 2, not kill the runner."""
    attempt = make_attempt("start")
    body = step_start(
        "httk_workflow_state_set before 1",
        'kill -9 "$_HTTK_SERVE_PID"',
        'httk_workflow_state_set after 2 || echo "call status $?" >&2',
    )
    result = run_runner(runners, counted, body)
    assert result.returncode == 0, result.stderr
    assert attempt.outcome()["action"] == "succeed"


def test_the_state_file_modes_match(make_attempt, runners, tmp_path):
    """Files the SDK creates get the caller's umask in both modes."""
    modes = []
    for coprocess in (True, False):
        attempt = make_attempt("start")
        counted = Counted(tmp_path)
        body = step_start("umask 027", "httk_workflow_state_set k 1")
        assert run_runner(runners, counted, body, coprocess=coprocess).returncode == 0
        modes.append(stat.S_IMODE((attempt.payload / ".httk-job" / "state.json").stat().st_mode))
    assert modes == [0o640, 0o640]


def test_a_call_that_changes_the_interpreters_settings_runs_one_shot(make_attempt, runners, counted):
    """PYTHON*, LC_* and LANG are read when an interpreter starts: such a call gets an interpreter of its own."""
    attempt = make_attempt("start")
    body = step_start("httk_workflow_state_set a 1", "PYTHONIOENCODING=latin-1 httk_workflow_state_set b 2")
    # Without LANG/LC_ALL Python coerces its own locale (PEP 538): that alone must not turn the co-process off.
    env = {"LANG": "", "LC_ALL": "", "LC_CTYPE": ""}
    result = run_runner(runners, counted, body, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"a": 1, "b": 2}
    assert [args.split()[-1] for _pid, args in counted.starts()] == ["--serve", "2"]


def test_a_traced_handler_does_not_print_the_environment(make_attempt, runners, counted):
    """Under set -x the call sends every exported variable: that part of the library is not traced."""
    attempt = make_attempt("start")
    body = step_start("set -x", "httk_workflow_state_set k 1")
    result = run_runner(runners, counted, body, env={"HTTK_DEMO_SECRET": "s3cr3t-value"})
    assert result.returncode == 0, result.stderr
    assert "httk_workflow_state_set k 1" in result.stderr and "s3cr3t-value" not in result.stderr
    assert attempt.outcome()["action"] == "succeed"


def test_stopping_a_pre_started_bridge_waits_until_it_has_left_the_group(tmp_path):
    # A stand-in bridge that closes its replies on "stop" and only then exits, 0.3 s later: the runner
    # may end only after it, or a manager would find the group still populated and kill it.
    script = tmp_path / "stop.sh"
    script.write_text(f"""source "{LIB}"
coproc FAKE {{ read -r line; exec >&- ; sleep 0.3; }}
mkfifo "{tmp_path}/lock"; exec {{_HTTK_SERVE_LOCK}}<>"{tmp_path}/lock"; printf T >&"$_HTTK_SERVE_LOCK"
exec {{_HTTK_SERVE_IN}}>&"${{FAKE[1]}}" {{_HTTK_SERVE_OUT}}<&"${{FAKE[0]}}"
_HTTK_SERVE_PID=$FAKE_PID _HTTK_SERVE_OWN=0
pid=$FAKE_PID
_httk_serve_stop
read -r stat 2>/dev/null < "/proc/$pid/stat" && [[ ${{stat##*) }} != [ZX]* ]] && echo "still running"
echo stopped
""")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=TIMEOUT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "stopped\n", "")
