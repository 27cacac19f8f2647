"""ProcessSupervisor against real processes: exit classes, process groups, watches, checkers, report."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from httk.workflow import codec, supervision
from httk.workflow.supervision import ProcessSupervisor
from runner_support import pid_alive

PY = sys.executable

CHECKER = textwrap.dedent(
    """
    import json, sys
    mode = sys.argv[1]
    def emit(**fields):
        fields.setdefault("format", "httk-workflow-checker-result")
        fields.setdefault("format_version", 1)
        print(json.dumps(fields), flush=True)
    for raw in sys.stdin:
        event = json.loads(raw)
        assert event["format"] == "httk-workflow-checker-event" and event["format_version"] == 1
        with open("events.jsonl", "a") as log:
            log.write(raw)
        if mode == "malformed":
            print("this is not json", flush=True)
        elif mode == "version":
            emit(format_version=2, action="continue")
        elif mode == "crash":
            raise SystemExit("checker crashed")
        elif "ERROR" in event["line"]:
            diagnosis = {"source": event["source"], "line": event["line"]}
            emit(action="stop", reason="error line", diagnosis=diagnosis)
        elif "WARN" in event["line"]:
            emit(action="continue", reason="warning seen", diagnosis={"line": event["line"]})
        else:
            emit(action="continue")
    """
)


@pytest.fixture
def checker(tmp_path: Path):
    script = tmp_path / "checker.py"
    script.write_text(CHECKER)

    def argv(mode: str = "errors") -> list[str]:
        return [PY, str(script), mode]

    return argv


def gone(pid_file: Path) -> bool:
    """The process whose pid ``pid_file`` holds is gone, or only a zombie (which PID 1 may not reap here)."""
    return not pid_alive(int(pid_file.read_text()))


def run_group_past_timeout(tmp_path: Path, shell_prefix: str, *, timeout: float, kill_grace: float):
    """Supervise a shell that starts a grandchild (pid in ``grandchild.pid``) and outlives ``timeout``."""
    return ProcessSupervisor(
        ["sh", "-c", f"{shell_prefix}sleep 30 & echo $! > grandchild.pid; sleep 30"],
        cwd=tmp_path,
        timeout=timeout,
        kill_grace=kill_grace,
    ).run()


def events(tmp_path: Path) -> list[dict]:
    path = tmp_path / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_success_streams_output_and_writes_the_report(tmp_path):
    result = ProcessSupervisor(
        [PY, "-c", "import sys; print('hello'); print('oops', file=sys.stderr)"],
        cwd=tmp_path,
        stdout_path=tmp_path / "logs" / "out",
        stderr_path=tmp_path / "logs" / "err",
    ).run()
    assert (result.status, result.exit_class, result.returncode, result.stopped_by) == (
        "succeeded",
        0,
        0,
        None,
    )
    assert not result.timed_out
    assert (tmp_path / "logs" / "out").read_text() == "hello\n"
    assert (tmp_path / "logs" / "err").read_text() == "oops\n"
    data = (tmp_path / "process-report.json").read_bytes()
    report = json.loads(data)
    assert data == codec.encode(report)
    assert report == result.report
    assert report["format"] == "httk-workflow-process-report"
    assert report["format_version"] == 1
    assert report["argv"] == [PY, "-c", "import sys; print('hello'); print('oops', file=sys.stderr)"]
    assert report["cwd"] == str(tmp_path)
    assert report["started_at"] <= report["ended_at"]
    assert report["duration"] == result.duration >= 0
    assert (report["status"], report["exit_class"], report["errors"], report["stop"]) == (
        "succeeded",
        0,
        [],
        None,
    )


def test_nonzero_exit_is_class_22(tmp_path):
    result = ProcessSupervisor([PY, "-c", "raise SystemExit(3)"], cwd=tmp_path, report_path=tmp_path / "r.json").run()
    assert (result.status, result.exit_class, result.returncode) == ("failed", 22, 3)
    assert json.loads((tmp_path / "r.json").read_text())["exit_class"] == 22


def test_timeout_terminates_the_whole_group(tmp_path):
    started = time.monotonic()
    result = run_group_past_timeout(tmp_path, "", timeout=0.5, kill_grace=1.0)
    assert time.monotonic() - started < 5
    assert (result.status, result.exit_class, result.stopped_by, result.timed_out) == (
        "timeout",
        124,
        "timeout",
        True,
    )
    assert result.returncode is not None and result.returncode < 0
    assert gone(tmp_path / "grandchild.pid")
    assert result.report["stop"]["by"] == "timeout"


def test_a_group_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    started = time.monotonic()
    result = run_group_past_timeout(tmp_path, "trap '' TERM; ", timeout=0.3, kill_grace=0.5)
    elapsed = time.monotonic() - started
    assert result.exit_class == 124
    assert 0.8 <= elapsed < 5
    assert gone(tmp_path / "grandchild.pid")


def test_processes_left_behind_by_a_successful_program_are_terminated(tmp_path):
    result = ProcessSupervisor(
        ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > stray.pid"], cwd=tmp_path, kill_grace=1.0
    ).run()
    assert (result.status, result.exit_class) == ("succeeded", 0)
    assert result.report["stray_processes_terminated"] is True
    assert gone(tmp_path / "stray.pid")


def test_inactivity_stops_a_silent_program(tmp_path):
    result = ProcessSupervisor(
        ["sh", "-c", "echo started; sleep 30"],
        cwd=tmp_path,
        inactivity_timeout=0.5,
        stdout_path=tmp_path / "out",
    ).run()
    assert (result.status, result.exit_class, result.stopped_by) == ("stopped", 125, "inactivity")
    assert not result.timed_out
    assert (tmp_path / "out").read_text() == "started\n"


def test_steady_output_is_not_inactivity(tmp_path):
    program = "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(0.1)\n"
    result = ProcessSupervisor([PY, "-c", program], cwd=tmp_path, inactivity_timeout=0.6).run()
    assert (result.status, result.exit_class) == ("succeeded", 0)


def test_output_without_a_path_reaches_our_own_streams(tmp_path, capfd):
    result = ProcessSupervisor(["sh", "-c", "echo to-out; echo to-err >&2"], cwd=tmp_path, inactivity_timeout=5).run()
    assert result.exit_class == 0
    captured = capfd.readouterr()
    assert "to-out" in captured.out and "to-err" in captured.err


def test_checker_stop_is_class_125_with_its_diagnosis(tmp_path, checker):
    program = (
        "import time\n"
        "for line in ('fine', 'WARN soft', 'an ERROR here'):\n"
        "    print(line, flush=True)\n"
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    result = ProcessSupervisor([PY, "-c", program], cwd=tmp_path, checkers=[checker()], timeout=20).run()
    assert time.monotonic() - started < 10
    assert (result.status, result.exit_class, result.stopped_by) == (
        "stopped",
        125,
        "checker:" + Path(PY).name,
    )
    stop = result.report["stop"]
    assert stop["reason"] == "error line"
    assert stop["diagnosis"] == {"source": "stdout", "line": "an ERROR here"}
    (entry,) = result.report["checkers"]
    assert entry["returncode"] == 0
    assert [r["action"] for r in entry["results"]] == ["continue", "stop"]
    assert entry["results"][0]["diagnosis"] == {"line": "WARN soft"}
    assert entry["continued"] == 1
    seen = events(tmp_path)
    assert [e["line"] for e in seen][:3] == ["fine", "WARN soft", "an ERROR here"]
    assert all(e["source"] == "stdout" and isinstance(e["time"], float) for e in seen)
    assert json.loads((tmp_path / "process-report.json").read_text())["stop"] == stop


def test_a_verdict_on_the_last_lines_still_classifies_the_run(tmp_path, checker):
    result = ProcessSupervisor(["sh", "-c", "echo ERROR at the end"], cwd=tmp_path, checkers=[checker()]).run()
    assert result.returncode == 0
    assert (result.status, result.exit_class, result.report["stop"]["reason"]) == (
        "stopped",
        125,
        "error line",
    )


def test_stderr_lines_reach_the_checker(tmp_path, checker):
    result = ProcessSupervisor(
        ["sh", "-c", "echo ERROR on stderr >&2; sleep 30"],
        cwd=tmp_path,
        checkers=[checker()],
        stderr_path=tmp_path / "err",
    ).run()
    assert result.exit_class == 125
    assert result.report["stop"]["diagnosis"]["source"] == "stderr"


@pytest.mark.parametrize(
    ("mode", "message"),
    [("malformed", "not JSON"), ("version", "version 1"), ("crash", "exited with status 1")],
)
def test_a_broken_checker_stops_the_run_and_is_recorded(tmp_path, checker, mode, message):
    started = time.monotonic()
    result = ProcessSupervisor(
        ["sh", "-c", "echo hello; echo again; echo third; sleep 30"], cwd=tmp_path, checkers=[checker(mode)]
    ).run()
    assert time.monotonic() - started < 10
    assert (result.status, result.exit_class) == ("stopped", 125)
    assert result.stopped_by is not None and result.stopped_by.startswith("checker:")
    (error,) = result.report["errors"]
    assert error["source"] == result.stopped_by
    assert message in error["message"]


def test_followed_file_lines_reach_the_checker(tmp_path, checker):
    (tmp_path / "OUTCAR").write_text("old ERROR before the run\n")
    program = (
        "import time\n"
        "time.sleep(0.3)\n"
        "with open('OUTCAR', 'a') as f:\n"
        "    f.write('step 1\\n'); f.flush(); time.sleep(0.3); f.write('ERROR in step 2\\n')\n"
        "time.sleep(30)\n"
    )
    result = ProcessSupervisor(
        [PY, "-c", program], cwd=tmp_path, follow=["OUTCAR", "later.log"], checkers=[checker()], timeout=20
    ).run()
    assert (result.exit_class, result.report["stop"]["diagnosis"]) == (
        125,
        {"source": "OUTCAR", "line": "ERROR in step 2"},
    )
    assert [e["line"] for e in events(tmp_path) if e["source"] == "OUTCAR"][:2] == [
        "step 1",
        "ERROR in step 2",
    ]
    assert result.report["followed"] == ["OUTCAR", "later.log"]


def test_a_followed_file_created_later_is_read_from_its_start(tmp_path, checker):
    program = "with open('later.log', 'w') as f:\n    f.write('one\\ntwo without newline')\n"
    result = ProcessSupervisor([PY, "-c", program], cwd=tmp_path, follow=["later.log"], checkers=[checker()]).run()
    assert result.exit_class == 0
    assert [(e["source"], e["line"]) for e in events(tmp_path)] == [
        ("later.log", "one"),
        ("later.log", "two without newline"),
    ]


def test_followed_file_output_counts_as_activity(tmp_path):
    program = (
        "import time\n"
        "with open('log', 'a') as f:\n"
        "    for i in range(8):\n"
        "        f.write(f'{i}\\n'); f.flush(); time.sleep(0.1)\n"
    )
    result = ProcessSupervisor([PY, "-c", program], cwd=tmp_path, follow=["log"], inactivity_timeout=0.6).run()
    assert result.exit_class == 0


def test_argument_strings_are_refused(tmp_path):
    with pytest.raises(TypeError):
        ProcessSupervisor("echo hello", cwd=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ProcessSupervisor(["true"], cwd=tmp_path, checkers=["grep ERROR"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        ProcessSupervisor([], cwd=tmp_path)


def test_a_program_that_cannot_start_raises_after_reporting(tmp_path, checker):
    with pytest.raises(FileNotFoundError):
        ProcessSupervisor([str(tmp_path / "missing")], cwd=tmp_path, checkers=[checker()]).run()
    report = json.loads((tmp_path / "process-report.json").read_text())
    assert (report["status"], report["exit_class"], report["returncode"]) == ("failed", 125, None)
    assert "could not start" in report["errors"][0]["message"]


def test_a_checker_that_cannot_start_prevents_the_run(tmp_path):
    with pytest.raises(FileNotFoundError):
        ProcessSupervisor(["sh", "-c", "touch ran"], cwd=tmp_path, checkers=[[str(tmp_path / "no-such-checker")]]).run()
    assert not (tmp_path / "ran").exists()
    assert json.loads((tmp_path / "process-report.json").read_text())["exit_class"] == 125


def test_checkers_sharing_an_executable_are_named_apart(tmp_path, checker):
    result = ProcessSupervisor(["true"], cwd=tmp_path, checkers=[checker(), checker()]).run()
    names = [entry["name"] for entry in result.report["checkers"]]
    assert names == [f"{Path(PY).name}#1", f"{Path(PY).name}#2"]
    assert result.exit_class == 0


def test_a_stuck_checker_is_an_error_and_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(supervision, "CHECKER_CLOSE_TIMEOUT", 0.5)
    stuck = ["sh", "-c", "sleep 30 & echo $! > checker.pid; wait"]
    started = time.monotonic()
    result = ProcessSupervisor(["sh", "-c", "sleep 0.2; echo done"], cwd=tmp_path, checkers=[stuck]).run()
    assert time.monotonic() - started < 5
    assert (result.status, result.exit_class, result.stopped_by) == ("stopped", 125, "checker:sh")
    assert "did not finish" in result.report["errors"][0]["message"]
    assert gone(tmp_path / "checker.pid")
