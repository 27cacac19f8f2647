"""Concurrent writers of one attempt lose no update: the draft and the job state are read-modify-written
under the attempt's lock (adapters/attempt_lock.py).

The audit case: a Bash handler runs ``httk_workflow_spawn ... &`` six times and then
``wait``, and three ``httk_workflow_state_set`` in the background; without the lock one
child was lost (its payload left orphaned in the draft) and one state key too. Both
languages go through the same ``OutcomeDraft``/``JobState`` code, so the Python side is
exercised with real processes (fork) that continue the draft the way the bridge does.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from httk.workflow import Attempt, ChildSpec
from httk.workflow.adapters.attempt_lock import LOCK_DIRECTORY_PREFIX, AttemptLock
from httk.workflow.shell_attempt import resume_draft

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "shell" / "httk-workflow.sh"
STEPS = frozenset({"start", "kid"})
WRITERS = 8


def _children_of(ready_or_draft: Path) -> tuple[list[str], list[str]]:
    """The labels spawn.json lists and the payload directories present, both sorted."""
    listed = json.loads((ready_or_draft / "children" / "spawn.json").read_bytes())["children"]
    jobs = ready_or_draft / "children" / "jobs"
    return sorted(child["label"] for child in listed), sorted(path.name.split("--")[0] for path in jobs.iterdir())


def test_bash_spawns_and_state_sets_in_the_background_are_all_kept(make_attempt, tmp_path):
    attempt = make_attempt("start")
    script = tmp_path / "par.sh"
    script.write_text(
        'source "$HTTK_WORKFLOW_SHELL_LIB"\n'
        "httk_workflow_runner demo start kid\n"
        "step_start() {\n"
        "    local i\n"
        "    for i in 0 1 2 3 4 5; do httk_workflow_spawn --label c$i --step kid >/dev/null & done\n"
        "    wait\n"
        "    httk_workflow_state_set a 1 & httk_workflow_state_set b 2 & httk_workflow_state_set c 3 & wait\n"
        "    httk_workflow_gather kid --when all_terminal\n"
        "}\n"
        "step_kid() { httk_workflow_succeed; }\n"
        'httk_workflow_main "$@"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "HTTK_WORKFLOW_SHELL_LIB": str(LIB), "HTTK_WORKFLOW_PYTHON": sys.executable}
    result = subprocess.run(["bash", str(script)], env=env, cwd=os.environ["HTTK_WORKFLOW_WORKDIR"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    labels = [f"c{index}" for index in range(6)]
    assert _children_of(attempt.ready) == (labels, labels)  # none lost, none orphaned
    assert sorted(attempt.outcome()["join"]["children"]) == labels
    state = json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes())
    assert state == {"a": 1, "b": 2, "c": 3}
    assert attempt.drafts() == []


def _spawn_one(index: int, start: multiprocessing.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    attempt = Attempt.initialize(steps=STEPS)
    resume_draft(attempt)  # what every bridge call does: continue the draft on disk
    start.wait()
    attempt.spawn(ChildSpec(step="kid", inputs={"index": index}), label=f"c{index}")


def _set_one(index: int, start: multiprocessing.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    attempt = Attempt.initialize(steps=STEPS)
    start.wait()
    if index % 2:
        attempt.state.set(f"k{index}", index)
    else:
        attempt.state.merge({f"k{index}": index, f"m{index}": True})


def _run_all(target, count: int) -> None:
    context = multiprocessing.get_context("fork")
    start = context.Barrier(count)
    processes = [context.Process(target=target, args=(index, start)) for index in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0


def test_concurrent_processes_continuing_one_draft_keep_every_child(make_attempt):
    attempt = make_attempt("start")
    _run_all(_spawn_one, WRITERS)
    [draft] = attempt.drafts()  # one draft, not one per process
    labels = sorted(f"c{index}" for index in range(WRITERS))
    assert _children_of(draft) == (labels, labels)
    # The process that publishes lists every child in its join, read under the lock at publication.
    last = Attempt.initialize(steps=STEPS)
    resume_draft(last)
    last.gather("kid", when="all_terminal")
    assert sorted(attempt.outcome()["join"]["children"]) == labels
    assert _children_of(attempt.ready) == (labels, labels)


def test_concurrent_state_writers_keep_every_key(make_attempt):
    attempt = make_attempt("start")
    _run_all(_set_one, WRITERS)
    expected = {f"k{index}": index for index in range(WRITERS)}
    expected.update({f"m{index}": True for index in range(0, WRITERS, 2)})
    assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == expected
    assert not (attempt.control / "attempt.lock").exists()  # host-local, never in the workspace (spec 000)


def test_a_label_another_process_took_meanwhile_is_refused(make_attempt):
    make_attempt("start")
    first, second = Attempt.initialize(steps=STEPS), Attempt.initialize(steps=STEPS)
    resume_draft(first)
    resume_draft(second)  # both saw an empty draft
    first.spawn(ChildSpec(step="kid"), label="same")
    with pytest.raises(ValueError, match="already used"):
        second.spawn(ChildSpec(step="kid"), label="same")


def test_the_lock_is_reentrant_and_excludes_another_holder(tmp_path):
    lock = AttemptLock(tmp_path / "attempt.lock")
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n"
    )

    def other_can_lock() -> bool:
        code = subprocess.run([sys.executable, "-c", probe, lock.path], timeout=30).returncode
        assert code in (0, 3)
        return code == 0

    with lock.held():
        with lock.held():
            assert not other_can_lock()
        assert not other_can_lock()  # still held by the outer block
    assert other_can_lock()


def test_the_lock_file_is_host_local_and_never_under_the_workspace(make_attempt, tmp_path, tmp_path_factory,
                                                                    monkeypatch):
    attempt = make_attempt("start")
    runtime = tmp_path_factory.mktemp("runtime")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    lock = AttemptLock.for_control(attempt.control)
    directory = runtime / f"{LOCK_DIRECTORY_PREFIX}{os.getuid()}"
    assert Path(lock.path).parent == directory
    assert Path(lock.path).name == hashlib.sha256(os.path.abspath(attempt.control).encode()).hexdigest() + ".lock"
    with lock.held():
        assert Path(lock.path).is_file()
        assert not list(tmp_path.rglob("*.lock"))  # nothing lockable in the workspace
    assert (directory.stat().st_mode & 0o777) == 0o700
    assert not Path(lock.path).exists()  # the releasing holder removes it: none pile up per attempt
    Attempt.initialize(steps=STEPS).state.set("k", 1)  # the SDK's own lock is the same host-local one
    assert not (attempt.control / "attempt.lock").exists()


def test_a_lock_directory_that_is_not_our_own_is_ignored(tmp_path, tmp_path_factory, monkeypatch):
    runtime = tmp_path_factory.mktemp("runtime")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (runtime / f"{LOCK_DIRECTORY_PREFIX}{os.getuid()}").symlink_to(elsewhere)  # planted by someone else
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    lock = AttemptLock.for_control(tmp_path / "control")
    assert Path(lock.path).parent == Path(tempfile.gettempdir()) / f"{LOCK_DIRECTORY_PREFIX}{os.getuid()}"
    with lock.held():
        assert not list(elsewhere.iterdir())


def test_a_child_forked_while_another_thread_holds_the_lock_does_not_deadlock(tmp_path):
    lock = AttemptLock(tmp_path / "attempt.lock")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock.held():
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: the holding thread does not exist here
        try:
            with lock.held():
                os._exit(0)
        finally:
            os._exit(1)
    release.set()  # the parent lets go of the flock; the child must then get it
    thread.join(30)
    deadline = time.monotonic() + 30
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if status[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child deadlocked on the lock it inherited held")
    assert os.waitstatus_to_exitcode(status[1]) == 0
