"""The one-line progress of long commands: drawn on a terminal (a real pseudo-terminal here), absent when piped."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from httk.workflow.cli.progress import Rate, StatusLine, enabled, progress
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.workspace import Workspace

HTTK = str(Path(sys.executable).parent / "httk")
SUCCEED = r"""d="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.$$"; mkdir -p "$d"
printf '{"format":"httk-workflow-outcome","format_version":1,"action":"succeed"}\n' > "$d/outcome.json"
sleep 0.3; mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"
"""


@pytest.fixture
def env(tmp_path):
    values = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg"),
              "XDG_CONFIG_HOME": str(tmp_path / "config"), "TERM": "xterm", "LC_ALL": "C.UTF-8"}
    values.pop("HTTK_WORKFLOW_WORKSPACE", None)
    return values


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace.init(tmp_path / "ws", durable=False)
    for index in range(3):
        payload = tmp_path / "payloads" / f"job{index}"
        prepare_job_payload(payload, JobSpec(name=f"job{index}", workflow="ops", runner_path="run.sh"), durable=False)
        (payload / "run.sh").write_text(SUCCEED)
        workspace.submit(payload, "p")
    return tmp_path / "ws"


def on_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal (120 columns) and stdout on a pipe: (status, stdout, terminal)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    stdout = child.stdout.read().decode() if child.stdout else ""
    return child.wait(60), stdout, b"".join(chunks).decode(errors="replace")


def test_gc_fsck_collect_and_report_draw_a_line_on_a_terminal_and_clear_it(tmp_path, ws, env):
    commands = ((["workspace", "gc"], "gc: "), (["workspace", "fsck"], "fsck: "), (["collect"], "collect: "),
                (["workspace", "report", "--out", str(tmp_path / "site")], "reading the journal: "))
    for command, label in commands:
        status, stdout, terminal = on_terminal([HTTK, "workflow", *command, str(ws)], env)
        assert status == 0, terminal
        assert label in terminal and terminal.endswith("\r")  # drawn, then cleared
        assert label not in stdout  # the command's own output is untouched


def test_transfer_shows_its_phases_on_one_line(tmp_path, ws, env):
    Workspace.init(tmp_path / "there", durable=False)
    subprocess.run([HTTK, "workflow", "run", str(ws)], capture_output=True, env=env, timeout=120, check=True)
    status, stdout, terminal = on_terminal([HTTK, "workflow", "transfer", str(ws), str(tmp_path / "there")], env)
    assert status == 0, terminal
    assert stdout.startswith("transferred 3 jobs") and "transfer, t-" in terminal
    assert ": send 3 jobs" in terminal and ": retire 3 jobs" in terminal
    back = subprocess.run([HTTK, "workflow", "transfer", str(tmp_path / "there"), str(ws), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert back.returncode == 0 and back.stderr == ""


def test_nothing_extra_when_piped_or_json(ws, env):
    for command in (["workspace", "gc"], ["workspace", "fsck"], ["workspace", "diff", "--since", "1d"]):
        done = subprocess.run([HTTK, "workflow", *command, str(ws)], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    status, stdout, terminal = on_terminal([HTTK, "workflow", "workspace", "gc", str(ws), "--json"], env)
    assert status == 0 and stdout.startswith("{") and terminal == ""


def test_manager_run_shows_a_live_status_line(ws, env):
    status, stdout, terminal = on_terminal([HTTK, "workflow", "run", str(ws), "--workers", "2"], env)
    assert status == 0, terminal
    assert "running " in terminal and "ready " in terminal and "jobs/min" in terminal
    assert "succeeded 3" in terminal or "succeeded 2" in terminal  # the last redraw may precede the last commit
    # The banner and the summary stay on stdout, each a whole line.
    lines = stdout.splitlines()
    assert lines[0].startswith("httk-workflow manager m-") and "3 succeeded" in lines[-1]
    piped = subprocess.run([HTTK, "workflow", "workspace", "status", str(ws), "--json"], capture_output=True,
                           text=True, env=env, check=True)
    assert '"succeeded":3' in piped.stdout


def test_manager_run_piped_prints_no_status_line(tmp_path, ws, env):
    done = subprocess.run([HTTK, "workflow", "run", str(ws)], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0 and "jobs/min" not in done.stderr and "\r" not in done.stderr


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal_and_never_for_json(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    piped, terminal = io.StringIO(), FakeTerminal()
    assert not enabled(stream=piped) and enabled(stream=terminal) and not enabled(as_json=True, stream=terminal)
    with progress("work", total=3, stream=piped) as bar:
        bar.update(3)
        assert not bar.drawn
    assert piped.getvalue() == ""
    with progress("work", total=3, unit="job", stream=terminal) as bar:
        bar.update(2)
        assert bar.drawn
    assert "work" in terminal.getvalue() and "job" in terminal.getvalue()
    monkeypatch.setenv("TERM", "dumb")
    assert not enabled(stream=terminal)


def test_status_line_shows_events_and_ends(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    terminal = FakeTerminal()
    line = StatusLine("transfer", stream=terminal)
    line.show("t-1: send 3 jobs")
    line.end()
    assert "transfer, t-1: send 3 jobs" in terminal.getvalue()
    quiet = FakeTerminal()
    StatusLine("transfer", as_json=True, stream=quiet).show("x")
    assert quiet.getvalue() == ""


def test_rate_is_per_minute_over_the_window():
    rate = Rate(window_seconds=60)
    assert rate.observe(0, now=0.0) == 0.0
    assert rate.observe(10, now=30.0) == pytest.approx(20.0)
    # The oldest sample left the window: the rate is over the last stretch only, in which nothing finished.
    assert rate.observe(10, now=200.0) == 0.0


def test_manager_run_with_json_logs_keeps_the_console_json(ws, env):
    status, stdout, terminal = on_terminal([HTTK, "workflow", "run", str(ws), "--json-logs"], env)
    assert status == 0 and "jobs/min" not in terminal and "\r" not in terminal
