"""The preloaded Python launcher against real processes: every runner it forks behaves as ``python entry.py``.

Each case runs one entry file twice, through the zygote and through a control with
the preload off (a fresh interpreter), and compares what a runner or a manager can
observe: exit status, both logs, argv, ``sys.path[0]``, cwd, environment, umask,
descriptors, process group and parent.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import signal
import sys
import textwrap
import time
from importlib import resources
from pathlib import Path

import pytest

from httk.workflow.adapters import process_groups
from httk.workflow.adapters.process import GATE_CLOSED_STATUS, LocalProcessControl

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
       "HTTK_WORKFLOW_JOB_ID": "job-1", "ODD NAME": "x y"}

PROBE = """
import json, os, resource, signal, sys
fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
report = {
    "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "env": dict(os.environ),
    "umask": os.umask(0o22), "pgid_is_pid": os.getpgrp() == os.getpid(), "ppid": os.getppid(),
    "sid": os.getsid(0), "fds": fds[:3], "extra_fds": len(fds) - 4, "name": __name__, "file": __file__,
    "globals": sorted(globals()), "orig_argv": sys.orig_argv[1:],
    "sigint": repr(signal.getsignal(signal.SIGINT)), "sigpipe": repr(signal.getsignal(signal.SIGPIPE)),
    "sigterm": repr(signal.getsignal(signal.SIGTERM)),
    "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
    "cmdline": open("/proc/self/cmdline", "rb").read().decode(),
    "environ": open("/proc/self/environ", "rb").read().decode(),
    "stdio": [[type(s.buffer).__name__, s.buffer.__sizeof__(), getattr(s.buffer, "raw", s.buffer).name, s.mode,
               s.encoding, s.errors, s.line_buffering, s.write_through, s is getattr(sys, "__" + n + "__")]
              for n, s in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr))],
}
print(json.dumps(report))
"""

CASES = {
    "ok": "print('hello')\n",
    "system_exit_3": "import sys\nprint('out')\nsys.exit(3)\n",
    "system_exit_none": "raise SystemExit(None)\n",
    "system_exit_message": "raise SystemExit('refused: because')\n",
    "system_exit_big": "raise SystemExit(2**40)\n",
    "uncaught": "def f():\n    raise ValueError('boom')\nprint('before')\nf()\n",
    "chained": "try:\n    1/0\nexcept ZeroDivisionError:\n    raise KeyError('k')\n",
    "syntax_error": "def (:\n",
    "keyboard_interrupt": "raise KeyboardInterrupt\n",
    "atexit_and_buffered": (
        "import atexit, sys\natexit.register(lambda: print('at exit'))\n"
        "sys.stdout.write('no newline')\n"
    ),
    "thread_joined": (
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
    ),
    "sdk_import": "from httk.workflow import Runner\nprint(Runner.__name__)\n",
    "signal_self": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
    # How the runner ends (the zygote ends it without tearing down what it preloaded): as the interpreter does.
    "del_at_exit": "class A:\n    def __del__(self):\n        print('deleted')\na = A()\n",
    "del_sees_globals": "import os\nclass A:\n    def __del__(self):\n        print('del', os, A)\na = A()\n",
    "stdout_flush_fails": "import sys\nsys.stdout = open('/dev/full', 'w')\nprint('lost')\n",
    "system_exit_huge": "raise SystemExit(2**70)\n",
    "system_exit_negative": "raise SystemExit(-1)\n",
    "excepthook_fails": (
        "import sys\ndef hook(*args):\n    raise ValueError('hook')\nsys.excepthook = hook\nraise KeyError('k')\n"
    ),
    "daemon_thread": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('done')\n"
    ),
    "atexit_raises": "import atexit\ndef boom():\n    raise RuntimeError('at exit')\natexit.register(boom)\n",
    'hook_sysexit': "import sys\nsys.excepthook = lambda *a: sys.exit(5)\nraise ValueError('x')\n",
    'hook_deleted': "import sys\ndel sys.excepthook\nraise ValueError('x')\n",
    'stderr_deleted_exit_msg': "import sys\ndel sys.stderr\nsys.exit('msg')\n",
    "sigint_in_del": (
        'import os, signal\n'
        'class A:\n'
        '    def __del__(self):\n'
        '        os.kill(os.getpid(), signal.SIGINT)\n'
        "        print('after', flush=True)\n"
        'a = A()\n'
    ),
    "sigterm_handler_in_del": (
        'import os, signal, sys\n'
        'signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n'
        'class A:\n'
        '    def __del__(self):\n'
        '        os.kill(os.getpid(), signal.SIGTERM)\n'
        "        print('after', flush=True)\n"
        'a = A()\n'
    ),
    "builtins_del": (
        'import builtins\n'
        'class A:\n'
        "    def __del__(self): print('del builtins obj')\n"
        'builtins.keep = A()\n'
    ),
    "stdout_tee_del": (
        'import sys\n'
        'class Tee:\n'
        '    def __init__(self, s): self.s=s; self.buf=[]\n'
        '    def write(self, t): self.buf.append(t)\n'
        '    def flush(self): pass\n'
        "    def __del__(self): self.s.write('DEL:'+''.join(self.buf)); self.s.flush()\n"
        'sys.stdout = Tee(sys.stdout)\n'
        "print('hi')\n"
    ),
    "daemon_uses_globals": (
        'import threading, time\n'
        'def helper(): return 1\n'
        'def work():\n'
        '    while True:\n'
        '        helper()\n'
        '        time.sleep(0)\n'
        'threading.Thread(target=work, daemon=True).start()\n'
        'class Slow:\n'
        '    def __del__(self): time.sleep(0.2)\n'
        'z = Slow()\n'
        'time.sleep(0.05)\n'
    ),
    "fork_child_returns": (
        'import os, atexit\n'
        "atexit.register(lambda: print('atexit', 'child' if os.getpid()!=parent else 'parent'))\n"
        'parent=os.getpid()\n'
        "print('buffered', end='')\n"
        'pid=os.fork()\n'
        "if pid: print(' status', os.waitstatus_to_exitcode(os.waitpid(pid,0)[1]))\n"
        'else:\n'
        '    import sys; sys.exit(4)\n'
    ),
    'atexit_systemexit': "import atexit, sys\natexit.register(lambda: sys.exit(9))\nprint('x')\n",
    "thread_sysexit": (
        'import sys, threading\n'
        "t=threading.Thread(target=lambda: sys.exit(3)); t.start(); t.join(); print('main')\n"
    ),
    "del_in_exc_tb": (
        'class A:\n'
        "    def __del__(self): print('del local')\n"
        'def f():\n'
        '    a = A()\n'
        "    raise ValueError('v')\n"
        'f()\n'
    ),
}


@pytest.fixture
def preloaded(tmp_path):
    control = LocalProcessControl()
    yield control
    control.close()


def run(control: LocalProcessControl, where: Path, source: str, env: dict[str, str] = ENV,
        args: tuple[str, ...] = ()) -> tuple[int | None, str, str]:
    runner = where / "runner"
    work = where / "work"
    runner.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (runner / "run.py").write_text(textwrap.dedent(source))
    process = control.launch([sys.executable, str(runner / "run.py"), *args], cwd=str(work), env=env,
                             stdout_path=str(where / "out.log"), stderr_path=str(where / "err.log"))
    process.release()
    code = process.wait(60)
    process.close()
    return code, (where / "out.log").read_text(), (where / "err.log").read_text()


def normalized(text: str, where: Path) -> str:
    return re.sub(r" at 0x[0-9a-f]+>", " at ADDRESS>", text.replace(str(where), "WHERE"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_exit_status_and_logs_are_those_of_a_fresh_interpreter(case, preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    fresh = LocalProcessControl(python_preload=False)
    code, out, err = run(preloaded, tmp_path / "zygote", CASES[case])
    expected_code, expected_out, expected_err = run(fresh, tmp_path / "fresh", CASES[case])
    assert preloaded.python_preload is not None and preloaded.python_preload.zygote_pid is not None
    assert "python preload not used" not in caplog.text
    assert code == expected_code
    assert normalized(out, tmp_path / "zygote") == normalized(expected_out, tmp_path / "fresh")
    assert normalized(err, tmp_path / "zygote") == normalized(expected_err, tmp_path / "fresh")


def test_the_listed_statuses_hold(preloaded, tmp_path):
    assert run(preloaded, tmp_path / "a", CASES["ok"])[0] == 0
    assert run(preloaded, tmp_path / "b", CASES["system_exit_3"])[0] == 3
    code, _, err = run(preloaded, tmp_path / "c", CASES["uncaught"])
    assert code == 1
    assert err.startswith("Traceback (most recent call last):\n")
    assert "python_zygote" not in err and "ValueError: boom" in err
    assert run(preloaded, tmp_path / "d", CASES["keyboard_interrupt"])[0] == -signal.SIGINT


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_process_and_environment_are_those_of_a_fresh_interpreter(preloaded, tmp_path, unbuffered):
    env = dict(ENV, PYTHONUNBUFFERED="1") if unbuffered else ENV
    fresh = LocalProcessControl(python_preload=False)
    old = os.umask(0o027)
    try:
        # The zygote starts with this attempt's environment; the next attempt must see only its own.
        assert run(preloaded, tmp_path / "warm", CASES["ok"], env=dict(env, FIRST_ONLY="1"))[0] == 0
        zygote = run(preloaded, tmp_path / "zygote", PROBE, env=env, args=("x", "--y"))
        spawned = run(fresh, tmp_path / "fresh", PROBE, env=env, args=("x", "--y"))
    finally:
        os.umask(old)
    assert zygote[0] == spawned[0] == 0, (zygote, spawned)
    seen, expected = (json.loads(normalized(result[1], tmp_path / name))
                      for result, name in ((zygote, "zygote"), (spawned, "fresh")))
    assert seen == expected
    # os.environ replaced, nothing of the zygote's kept; what the interpreter's start adds (PEP 538) as fresh.
    assert {key: value for key, value in seen["env"].items() if key != "LC_CTYPE"} == env
    assert seen["argv"] == ["WHERE/runner/run.py", "x", "--y"] and seen["path0"] == "WHERE/runner"
    assert seen["cwd"] == "WHERE/work" and seen["umask"] == 0o027 and seen["extra_fds"] == 0
    assert seen["pgid_is_pid"] and seen["ppid"] == os.getpid() and seen["sid"] == os.getsid(0)


def test_an_abandoned_gate_exits_125_and_the_runner_never_runs(preloaded, tmp_path):
    run(preloaded, tmp_path / "warm", CASES["ok"])  # the zygote is up
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "run.py").write_text("open('ran', 'w').close()\n")
    process = preloaded.launch([sys.executable, str(tmp_path / "runner" / "run.py")], cwd=str(tmp_path), env=ENV,
                               stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    assert process.identity.pid != preloaded.python_preload.zygote_pid
    assert process.wait(0.3) is None  # held at the gate, as the manager's child
    assert process_groups.read_stat(process.identity.pid)[1] == os.getpid()
    assert process.identity.start_ticks == process_groups.read_stat(process.identity.pid)[3]
    assert process.identity.pgid == process.identity.pid
    assert preloaded.is_alive(process.identity) is True
    process.abandon()
    assert process.wait(10) == GATE_CLOSED_STATUS
    assert not (tmp_path / "ran").exists()
    assert preloaded.is_alive(process.identity) is False


def test_a_group_signal_stops_a_preloaded_runner_and_its_children(preloaded, tmp_path):
    source = """
    import subprocess, time
    subprocess.Popen(["sleep", "60"])
    open("started", "w").close()
    time.sleep(60)
    """
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "run.py").write_text(textwrap.dedent(source))
    process = preloaded.launch([sys.executable, str(tmp_path / "runner" / "run.py")], cwd=str(tmp_path), env=ENV,
                               stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    process.release()
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert preloaded.group_alive(process.identity.pgid)
    assert preloaded.terminate_group(process.identity.pgid)
    assert process.wait(10) == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while preloaded.group_alive(process.identity.pgid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not preloaded.group_alive(process.identity.pgid)


def test_a_different_pythonpath_falls_back_to_a_fresh_interpreter(preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    assert run(preloaded, tmp_path / "warm", CASES["ok"])[0] == 0
    elsewhere = tmp_path / "lib"
    elsewhere.mkdir()
    (elsewhere / "marker_module.py").write_text("VALUE = 'from PYTHONPATH'\n")
    env = dict(ENV, PYTHONPATH=f"{elsewhere}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep))
    code, out, _ = run(preloaded, tmp_path / "other", "import marker_module, sys\nprint(marker_module.VALUE)\n",
                       env=env)
    assert (code, out) == (0, "from PYTHONPATH\n")
    assert "python preload not used" in caplog.text and "PYTHONPATH" in caplog.text


def test_a_runner_module_shadowing_a_preloaded_one_falls_back(preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    assert run(preloaded, tmp_path / "warm", CASES["ok"])[0] == 0
    where = tmp_path / "shadow"
    (where / "runner").mkdir(parents=True)
    (where / "runner" / "attr.py").write_text("VALUE = 'the runner attr'\n")
    code, out, _ = run(preloaded, where, "import attr\nprint(attr.VALUE)\n")
    assert (code, out) == (0, "the runner attr\n")
    assert "shadows preloaded modules: attr" in caplog.text


def test_changed_resource_limits_fall_back_to_a_fresh_interpreter(preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    assert run(preloaded, tmp_path / "warm", CASES["ok"])[0] == 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512) - 1, hard))
    try:
        code, out, _ = run(preloaded, tmp_path / "lowered",
                           "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (code, out) == (0, f"{min(soft, 512) - 1}\n")
    assert "resource limits changed since the zygote started" in caplog.text


def test_another_interpreter_is_spawned(preloaded, tmp_path):
    (tmp_path / "run.py").write_text("print('hi')\n")
    process = preloaded.launch([os.path.realpath(sys.executable) + "-nonexistent", str(tmp_path / "run.py")],
                               cwd=str(tmp_path), env=ENV, stdout_path=str(tmp_path / "out.log"),
                               stderr_path=str(tmp_path / "err.log"))
    process.release()
    assert process.wait(10) == GATE_CLOSED_STATUS
    assert preloaded.python_preload is None or preloaded.python_preload.zygote_pid is None


def test_the_off_switch_never_starts_a_zygote(tmp_path):
    control = LocalProcessControl(python_preload=False)
    assert run(control, tmp_path, CASES["ok"]) == (0, "hello\n", "")
    assert control.python_preload is None


THREAD_PROBE = """
import ctypes, os, signal, threading
signal.pthread_kill(threading.main_thread().ident, 0)  # ESRCH when the C library keeps another thread's id
libc = ctypes.CDLL(None, use_errno=True)
libc.pthread_self.restype = ctypes.c_ulong
mask = (ctypes.c_ulong * 16)()
mask[0] = 1  # CPU 0 only, through pthread_self() as OpenMP binding does
assert libc.pthread_setaffinity_np(ctypes.c_ulong(libc.pthread_self()), ctypes.sizeof(mask), mask) == 0
print(sorted(os.sched_getaffinity(0)))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to see a binding move")
def test_a_preloaded_runner_s_thread_calls_act_on_the_runner_not_the_zygote(preloaded, tmp_path):
    assert run(preloaded, tmp_path / "warm", CASES["ok"])[0] == 0
    zygote = preloaded.python_preload.zygote_pid
    before = os.sched_getaffinity(zygote)
    code, out, err = run(preloaded, tmp_path / "probe", THREAD_PROBE)
    assert (code, out, err) == (0, "[0]\n", "")
    assert os.sched_getaffinity(zygote) == before  # the binding went to the runner, and later runners are free


def _zombie_children() -> set[int]:
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        pids.update(int(pid) for pid in (task / "children").read_text().split())
    out = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            out.add(pid)
    return out


def test_a_runner_forked_for_a_request_given_up_on_is_reaped(preloaded, tmp_path, monkeypatch):
    from httk.workflow.adapters import python_preload

    # Every answer comes "late": the zygote forks, the launch spawns instead and closes the first gate.
    monkeypatch.setattr(python_preload, "ANSWER_TIMEOUT", 0.0)
    before = _zombie_children()
    for name in ("a", "b", "c"):
        assert run(preloaded, tmp_path / name, CASES["ok"]) == (0, "hello\n", "")
    deadline = time.monotonic() + 5
    while _zombie_children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
        preloaded.close()  # reaps what has exited since
    assert _zombie_children() - before == set()


def test_a_crashed_zygote_is_restarted_once(preloaded, tmp_path):
    assert run(preloaded, tmp_path / "a", CASES["ok"])[0] == 0
    preload = preloaded.python_preload
    first = preload.zygote_pid
    os.kill(first, signal.SIGKILL)
    # The launch that finds it lost spawns fresh; the next starts a new zygote.
    assert run(preloaded, tmp_path / "b", CASES["ok"]) == (0, "hello\n", "")
    assert run(preloaded, tmp_path / "c", CASES["ok"]) == (0, "hello\n", "")
    second = preload.zygote_pid
    assert second is not None and second != first
    os.kill(second, signal.SIGKILL)
    assert run(preloaded, tmp_path / "d", CASES["ok"]) == (0, "hello\n", "")
    assert run(preloaded, tmp_path / "e", CASES["ok"]) == (0, "hello\n", "")
    assert preload.zygote_pid is None  # given up: every later launch spawns


def test_close_stops_the_zygote_and_leaves_runners_running(tmp_path):
    control = LocalProcessControl()
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "run.py").write_text("import time\ntime.sleep(60)\n")
    process = control.launch([sys.executable, str(tmp_path / "runner" / "run.py")], cwd=str(tmp_path), env=ENV,
                             stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    process.release()
    zygote = control.python_preload.zygote_pid
    control.close()
    assert process_groups.read_stat(zygote) is None  # reaped
    assert process.wait(0.2) is None
    assert control.kill_group(process.identity.pgid)
    assert process.wait(10) == -signal.SIGKILL


# -- Bash runners: the same bash, with its bridge pre-started ---------------------------------------------------

SHELL_LIB = str(resources.files("httk.workflow") / "shell" / "httk-workflow.sh")

#: Prints what a Bash runner can observe of its own start, from bash and from a program it runs; the bridge is
#: taken when the library is sourced (the comment names httk_workflow_main, which is what qualifies a runner).
BASH_PROBE = r"""# a runner of httk_workflow_main
given=${HTTK_WORKFLOW_BRIDGE-unset}
source "$HTTK_WORKFLOW_SHELL_LIB"
read -r -a stat < /proc/$$/stat
[[ ${given%%:*} == "$$" ]] && given=this || given=${given%%:*}
printf 'given=%s\n' "$given"
printf 'bridge=%s\n' "${_HTTK_BRIDGE:+yes}"
printf 'argv=%s\n' "$0 $*"
printf 'pgid_is_pid=%s ppid=%s cwd=%s umask=%s\n' "$((stat[4] == $$))" "$PPID" "$PWD" "$(umask)"
grep -E '^Sig(Ign|Blk)' /proc/$$/status
env | LC_ALL=C sort | grep -v '^_='
ls /proc/self/fd | tr '\n' ' '; echo
"""


def run_bash(control: LocalProcessControl, where: Path, env: dict[str, str]) -> tuple[int | None, str, str]:
    (where / "work").mkdir(parents=True)
    script = where / "run.sh"
    script.write_text(BASH_PROBE)
    process = control.launch(["bash", str(script), "one", "two"], cwd=str(where / "work"), env=env,
                             stdout_path=str(where / "out.log"), stderr_path=str(where / "err.log"))
    process.release()
    code = process.wait(60)
    process.close()
    return code, normalized((where / "out.log").read_text(), where), (where / "err.log").read_text()


#: Without ``ODD NAME``, which a POSIX shell would drop: the control runner is spawned, as a manager spawns one.
BASH_ENV = {**{key: value for key, value in ENV.items() if " " not in key},
            "HTTK_WORKFLOW_PYTHON": sys.executable, "HTTK_WORKFLOW_SHELL_LIB": SHELL_LIB}


def test_a_bash_runner_with_a_pre_started_bridge_is_the_bash_a_spawn_starts(preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    fresh = LocalProcessControl(python_preload=False)
    old = os.umask(0o027)
    try:
        code, out, err = run_bash(preloaded, tmp_path / "zygote", BASH_ENV)
        expected = run_bash(fresh, tmp_path / "fresh", BASH_ENV)
    finally:
        os.umask(old)
    assert "python preload not used" not in caplog.text
    assert (code, err) == (0, "") and expected[0] == 0, (out, err, expected)
    lines, expected_lines = out.splitlines(), expected[1].splitlines()
    assert lines[:2] == ["given=this", "bridge=yes"]  # named this runner's pid, kept by the library
    assert expected_lines[:2] == ["given=unset", "bridge="]
    # A program the runner runs inherits the bridge's two pipes (Bash cannot set close-on-exec on a
    # descriptor it inherited); everything else, signal dispositions included, is the same.
    *same, inherited = lines[2:]
    *expected_same, expected_inherited = expected_lines[2:]
    assert same == expected_same
    assert expected_inherited == "0 1 2 3 " and len(inherited.split()) == 6
    assert "argv=WHERE/run.sh one two" in lines
    assert f"pgid_is_pid=1 ppid={os.getpid()} cwd=WHERE/work umask=0027" in lines


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("HTTK_WORKFLOW_SHELL_COPROCESS", "0", "asks for one interpreter per bridge call"),
    ("HTTK_WORKFLOW_PYTHON", "/usr/bin/python3-elsewhere", "its bridge is not run by this interpreter"),
    ("PYTHONHASHSEED", "7", "start-up environment differs from the zygote's: PYTHONHASHSEED"),
])
def test_a_bash_runner_whose_bridge_would_differ_is_spawned(preloaded, tmp_path, caplog, name, value, reason):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    assert run_bash(preloaded, tmp_path / "warm", BASH_ENV)[1].startswith("given=")  # the zygote is up
    code, out, _err = run_bash(preloaded, tmp_path / "other", dict(BASH_ENV, **{name: value}))
    assert code == 0 and out.startswith("given=unset\nbridge=\n")
    assert reason in caplog.text


def test_a_bash_runner_not_calling_main_gets_no_bridge(preloaded, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "httk.workflow.manager")
    (tmp_path / "run.sh").write_text('printf "%s\\n" "${HTTK_WORKFLOW_BRIDGE-unset}"\n')
    process = preloaded.launch(["bash", str(tmp_path / "run.sh")], cwd=str(tmp_path), env=BASH_ENV,
                               stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    process.release()
    assert process.wait(30) == 0
    assert (tmp_path / "out.log").read_text() == "unset\n"
    assert "does not call httk_workflow_main" in caplog.text
    assert preloaded.python_preload is None or preloaded.python_preload.zygote_pid is None


def test_an_unused_pre_started_bridge_dies_with_its_runner(preloaded, tmp_path):
    # Sourced, never served, and a program left running holds the bridge's requests open: only its death
    # signal can end it when the runner exits.
    (tmp_path / "run.sh").write_text('# httk_workflow_main\nsource "$HTTK_WORKFLOW_SHELL_LIB"\n'
                                     'sleep 30 & echo "${_HTTK_BRIDGE##*:} $!"\n')
    process = preloaded.launch(["bash", str(tmp_path / "run.sh")], cwd=str(tmp_path), env=BASH_ENV,
                               stdout_path=str(tmp_path / "out.log"), stderr_path=str(tmp_path / "err.log"))
    process.release()
    try:
        assert process.wait(30) == 0
        bridge, holder = (int(word) for word in (tmp_path / "out.log").read_text().split())
        assert len(os.listdir(f"/proc/{holder}/fd")) > 3  # it holds the pipes
        deadline = time.monotonic() + 10
        while process_groups.read_stat(bridge) is not None and process_groups.read_stat(bridge)[0] != "Z":
            assert time.monotonic() < deadline, "the bridge outlived its runner"
            time.sleep(0.05)
    finally:
        process_groups.signal_group(process.identity.pgid, signal.SIGKILL)


def test_what_a_runner_left_open_is_flushed_at_its_exit(preloaded, tmp_path):
    # Its own modules and __main__ are cleared as the interpreter clears them: unclosed files are flushed.
    source = ("import helper\nlog = open('main.txt', 'w')\nlog.write('from main')\n"
              "helper.keep = open('helper.txt', 'w')\nhelper.keep.write('from helper')\n")
    results = {}
    for name, control in (("zygote", preloaded), ("fresh", LocalProcessControl(python_preload=False))):
        (tmp_path / name / "runner").mkdir(parents=True)
        (tmp_path / name / "runner" / "helper.py").write_text("keep = None\n")
        code, out, err = run(control, tmp_path / name, source)
        work = tmp_path / name / "work"
        results[name] = (code, out, err, (work / "main.txt").read_text(), (work / "helper.txt").read_text())
    assert results["zygote"] == results["fresh"] == (0, "", "", "from main", "from helper")


#: Runners that leave a file unclosed, held in ways the interpreter's shutdown reaches in different orders.
UNCLOSED = {
    "global_file_with_signal_handler": (
        'import signal, sys\n'
        "out = open('data.txt','w')\n"
        "out.write('payload')\n"
        'def stop(*a): sys.exit(143)\n'
        'signal.signal(signal.SIGTERM, stop)\n'
    ),
    "global_file_with_logging_filter": (
        'import logging\n'
        "out = open('data.txt','w')\n"
        "out.write('payload')\n"
        'def keep(record): return True\n'
        "logging.getLogger('x').addFilter(keep)\n"
    ),
    'global_file_plain': "out = open('data.txt','w')\nout.write('payload')\n",
    "preloaded_ref_file": (
        'import logging\n'
        "f = open('data.txt','w')\n"
        "f.write('payload')\n"
        'logging.keep = f\n'
        'del f\n'
        'import atexit\n'
    ),
}


@pytest.mark.parametrize("case", sorted(UNCLOSED))
def test_an_unclosed_file_keeps_its_data(preloaded, tmp_path, case):
    results = {}
    for name, control in (("zygote", preloaded), ("fresh", LocalProcessControl(python_preload=False))):
        code, out, err = run(control, tmp_path / name, UNCLOSED[case])
        results[name] = (code, out, err, (tmp_path / name / "work" / "data.txt").read_text())
    assert results["zygote"] == results["fresh"]
    assert results["zygote"][3] == "payload"
