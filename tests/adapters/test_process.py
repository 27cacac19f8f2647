"""LocalProcessControl against real processes: the launch gate, exit statuses, groups, identity."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest

from httk.workflow.adapters.process import GATE_CLOSED_STATUS, LocalProcessControl
from httk.workflow.ports import ProcessIdentity
from runner_support import group_members

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture(params=[(True, True), (False, True), (True, False)], ids=["pidfd", "no-pidfd", "fork"])
def control(request) -> LocalProcessControl:
    # "fork": every launch takes the fork, as one that cannot be spawned does.
    use_pidfd, use_spawn = request.param
    return LocalProcessControl(use_pidfd=use_pidfd, use_spawn=use_spawn)


@pytest.fixture
def pidfd_control() -> LocalProcessControl:
    return LocalProcessControl()


def launch(control: LocalProcessControl, tmp_path: Path, argv: list[str], env: dict[str, str] = ENV):
    return control.launch(argv, cwd=str(tmp_path), env=env, stdout_path=str(tmp_path / "out.log"),
                          stderr_path=str(tmp_path / "err.log"))


def eventually(probe, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.01)
    return probe()


def test_released_gate_runs_the_program_in_cwd_with_output_captured(control, tmp_path):
    process = launch(control, tmp_path, ["sh", "-c", "echo hello; echo oops >&2; touch ran"])
    assert process.wait(0.1) is None  # held at the gate
    assert not (tmp_path / "ran").exists()
    process.release()
    process.release()  # idempotent
    assert process.wait(10) == 0
    assert (tmp_path / "ran").exists()
    assert (tmp_path / "out.log").read_text() == "hello\n"
    assert (tmp_path / "err.log").read_text() == "oops\n"
    process.close()


def test_abandoned_gate_exits_125_without_running(control, tmp_path):
    process = launch(control, tmp_path, ["touch", "ran"])
    process.abandon()
    process.release()  # too late: nothing to release
    assert process.wait(10) == GATE_CLOSED_STATUS
    assert not (tmp_path / "ran").exists()


MANAGER = textwrap.dedent(
    """
    import json, os, sys
    from httk.workflow.adapters.process import LocalProcessControl
    workdir = sys.argv[1]
    process = LocalProcessControl().launch(
        ["touch", "ran"], cwd=workdir, env={"PATH": os.environ["PATH"]},
        stdout_path=os.path.join(workdir, "out.log"), stderr_path=os.path.join(workdir, "err.log"))
    i = process.identity
    print(json.dumps([i.host, i.pid, i.start_ticks, i.pgid]), flush=True)
    os._exit(0)  # the manager dies before releasing the gate
    """
)


def test_runner_never_runs_when_the_manager_dies_before_release(pidfd_control, tmp_path):
    done = subprocess.run([sys.executable, "-c", MANAGER, str(tmp_path)], capture_output=True,
                          text=True, timeout=30, check=True)
    identity = ProcessIdentity(*json.loads(done.stdout))
    assert identity.pgid == identity.pid
    assert eventually(lambda: pidfd_control.is_alive(identity) is False)
    time.sleep(1.0)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(("script", "expected"), [("exit 3", 3), ("kill -9 $$", -9), ("exit 0", 0)])
def test_exit_status_decoding(control, tmp_path, script, expected):
    process = launch(control, tmp_path, ["sh", "-c", script])
    process.release()
    assert process.wait(10) == expected
    assert process.poll() == expected


def test_wait_times_out_then_pidfd_wakes_promptly(pidfd_control, tmp_path):
    process = launch(pidfd_control, tmp_path, ["sleep", "0.2"])
    process.release()
    assert process.wait(0.01) is None
    poller = select.poll()
    poller.register(process.fileno(), select.POLLIN)
    started = time.monotonic()
    assert poller.poll(5000)
    assert time.monotonic() - started < 1.0
    assert process.poll() == 0
    started = time.monotonic()
    assert process.wait(5) == 0
    assert time.monotonic() - started < 0.1


def test_wait_with_timeout_returns_at_exit_not_at_timeout(control, tmp_path):
    process = launch(control, tmp_path, ["sleep", "0.2"])
    process.release()
    started = time.monotonic()
    assert process.wait(10) == 0
    assert time.monotonic() - started < 1.0


def test_fileno_without_pidfd_raises(tmp_path):
    process = launch(LocalProcessControl(use_pidfd=False), tmp_path, ["true"])
    with pytest.raises(OSError):
        process.fileno()
    process.abandon()
    assert process.wait() == GATE_CLOSED_STATUS


def test_signal_group_stops_child_and_grandchild(control, tmp_path):
    process = launch(control, tmp_path, ["sh", "-c", "sleep 30 & sleep 30"])
    pgid = process.identity.pgid
    assert pgid == process.identity.pid
    assert os.getpgid(process.identity.pid) == pgid
    process.release()
    assert eventually(lambda: len(group_members(pgid)) >= 2)
    assert control.group_alive(pgid)
    assert control.signal_group(pgid, signal.SIGTERM)
    assert process.wait(10) == -signal.SIGTERM
    assert eventually(lambda: not control.group_alive(pgid))
    assert group_members(pgid) == []
    assert control.signal_group(pgid, signal.SIGTERM) in (True, False)  # zombies may linger


def test_signal_group_of_a_vanished_group_is_false(control, tmp_path):
    process = launch(control, tmp_path, ["true"])
    process.release()
    assert process.wait(10) == 0
    assert control.signal_group(process.identity.pgid, signal.SIGTERM) is False
    assert control.group_alive(process.identity.pgid) is False


def test_sigterm_kills_a_gated_child(control, tmp_path):
    process = launch(control, tmp_path, ["touch", "ran"])
    assert control.signal_group(process.identity.pgid, signal.SIGTERM)
    assert process.wait(10) == -signal.SIGTERM
    process.close()
    assert not (tmp_path / "ran").exists()


def test_refuses_to_signal_its_own_group(control):
    with pytest.raises(ValueError):
        control.signal_group(os.getpgrp(), signal.SIGTERM)
    with pytest.raises(ValueError):
        control.signal_group(0, signal.SIGTERM)


def test_is_alive_tells_live_dead_reused_and_foreign(control, tmp_path):
    process = launch(control, tmp_path, ["sleep", "30"])
    identity = process.identity
    assert identity.host == control.hostname()
    assert identity.start_ticks is not None
    assert control.is_alive(identity) is True  # alive while gated
    assert control.is_alive(attrs.evolve(identity, start_ticks=identity.start_ticks + 1)) is False
    assert control.is_alive(attrs.evolve(identity, host=identity.host + "-elsewhere")) is None
    process.release()
    assert control.signal_group(identity.pgid, signal.SIGKILL)
    # The exited child is reaped by is_alive, and its status is kept for its owner.
    assert eventually(lambda: control.is_alive(identity) is False)
    assert not Path(f"/proc/{identity.pid}").exists()
    assert process.poll() == -signal.SIGKILL


def test_exec_failure_exits_125_with_reason(control, tmp_path):
    for argv in (["no-such-program-httk"], [str(tmp_path / "missing")]):
        process = launch(control, tmp_path, argv)
        process.release()
        assert process.wait(10) == GATE_CLOSED_STATUS
        reason = (tmp_path / "err.log").read_text()
        assert argv[0] in reason and "No such file" in reason


def test_missing_cwd_exits_125_with_reason(control, tmp_path):
    process = control.launch(["true"], cwd=str(tmp_path / "gone"), env=ENV,
                             stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    process.release()
    assert process.wait(10) == GATE_CLOSED_STATUS
    assert str(tmp_path / "gone") in (tmp_path / "err.log").read_text()


def test_environment_is_exactly_the_one_given(control, tmp_path, monkeypatch):
    monkeypatch.setenv("HTTK_SHOULD_NOT_LEAK", "1")
    env = {"PATH": ENV["PATH"], "ONLY": "this value"}
    process = launch(control, tmp_path, ["env"], env=env)
    process.release()
    assert process.wait(10) == 0
    lines = (tmp_path / "out.log").read_text().splitlines()
    assert sorted(lines) == sorted(f"{key}={value}" for key, value in env.items())


def test_identity_and_basics(control):
    assert control.pid() == os.getpid()
    assert control.uid() == os.getuid()
    assert control.hostname()


def test_invalid_arguments_are_refused_before_forking(control, tmp_path):
    with pytest.raises(ValueError):
        launch(control, tmp_path, [])
    with pytest.raises(ValueError):
        launch(control, tmp_path, ["true"], env={"A=B": "x"})


def test_abandoned_gate_is_not_held_open_by_a_gated_sibling(control, tmp_path):
    first = launch(control, tmp_path, ["touch", "first"])
    second = launch(control, tmp_path, ["touch", "second"])  # forked holding first's write end
    first.abandon()
    assert first.wait(5) == GATE_CLOSED_STATUS
    second.release()
    assert second.wait(5) == 0
    assert not (tmp_path / "first").exists() and (tmp_path / "second").exists()


def test_dropping_an_unreleased_process_abandons_its_gate(control, tmp_path):
    identity = launch(control, tmp_path, ["touch", "ran"]).identity  # the object is dropped at once
    assert eventually(lambda: control.is_alive(identity) is False)  # reaped by is_alive
    assert not (tmp_path / "ran").exists()


def _gate_program(pid: int) -> bytes:
    """What the gated child is running: the gate shell (spawned) or this interpreter (forked)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]


def test_an_ordinary_runner_is_spawned_behind_the_gate_shell(pidfd_control, tmp_path):
    process = launch(pidfd_control, tmp_path, ["sh", "-c", "touch ran"])
    # A vfork-style spawn returns once the child's exec has released the parent's memory,
    # which is a moment before the kernel has set up the new argv: /proc reads b"" then.
    assert eventually(lambda: _gate_program(process.identity.pid) == b"/bin/sh")
    assert os.getpgid(process.identity.pid) == process.identity.pid
    assert process.wait(0.2) is None and not (tmp_path / "ran").exists()
    process.release()
    assert process.wait(10) == 0 and (tmp_path / "ran").exists()


def test_a_script_without_a_shebang_is_refused_not_run_as_a_shell_script(pidfd_control, tmp_path):
    # execve refuses it (ENOEXEC); a shell would run it as a script, so it takes the fork, which reports.
    script = tmp_path / "runner"
    script.write_text("touch ran\n")
    script.chmod(0o755)
    process = launch(pidfd_control, tmp_path, [str(script)])
    assert _gate_program(process.identity.pid) != b"/bin/sh"
    process.release()
    assert process.wait(10) == GATE_CLOSED_STATUS
    assert not (tmp_path / "ran").exists()
    assert "Exec format error" in (tmp_path / "err.log").read_text()


def test_names_a_shell_would_drop_and_pwd_reach_the_runner_exactly(control, tmp_path):
    env = {"PATH": ENV["PATH"], "BASH_FUNC_module%%": "() {  true\n}", "PWD": "/somewhere/else"}
    process = launch(control, tmp_path, ["env"], env=env)
    process.release()
    assert process.wait(10) == 0
    output = (tmp_path / "out.log").read_text()
    assert sorted(output.replace("\n}", "}").splitlines()) == sorted(
        f"{key}={value}".replace("\n}", "}") for key, value in env.items())
    env = {"PATH": ENV["PATH"], "PWD": "/given", "OLDPWD": "/older"}
    (tmp_path / "out.log").unlink()
    process = launch(control, tmp_path, ["env"], env=env)
    process.release()
    assert process.wait(10) == 0
    assert sorted((tmp_path / "out.log").read_text().splitlines()) == sorted(f"{k}={v}" for k, v in env.items())


def test_an_inheritable_descriptor_of_the_manager_does_not_reach_the_runner(control, tmp_path):
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        probe = f"test -e /proc/$$/fd/{write_end} && echo leaked || echo closed"
        process = launch(control, tmp_path, ["sh", "-c", probe])
        process.release()
        assert process.wait(10) == 0
    finally:
        os.close(read_end)
        os.close(write_end)
    assert (tmp_path / "out.log").read_text() == "closed\n"
