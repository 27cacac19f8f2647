"""Staged data (put/remove), workdir batches and their replay, and Attempt.run (spec 001)."""

from __future__ import annotations

import json
import os
import time

import pytest

from httk.workflow import Attempt, Runner, codec
from httk.workflow.outcome import WorkdirBatch, apply_sealed_batch


def runner_with(handler) -> Runner:
    run = Runner("demo")
    run.step(name="start")(handler)
    return run


# --------------------------------------------------------------------------- put / remove


def test_put_and_remove_build_the_manifest_in_call_order(make_attempt, workspace_spec):
    attempt = make_attempt("start", spec=workspace_spec(data_mode="transactional"))

    def handler(a):
        (a.workdir / "energy.json").write_text('{"e": -1}\n', encoding="utf-8")
        (a.workdir / "bands").mkdir()
        (a.workdir / "bands" / "b1").write_text("1\n", encoding="utf-8")
        a.put(a.workdir / "energy.json", "results/energy.json")
        a.put("bands", "results//bands/")  # relative to the workdir; normalised
        a.remove("scratch", missing_ok=True)
        a.remove("old/file")
        for bad in ("/abs", "../up", "a/../../b", ""):
            with pytest.raises(ValueError, match="relative path"):
                a.put(a.workdir / "energy.json", bad)
        with pytest.raises(FileNotFoundError):
            a.put(a.workdir / "absent", "x")
        a.succeed()

    assert runner_with(handler).main([]) == 0
    manifest_path = attempt.ready / "transaction" / "manifest.json"
    manifest = json.loads(manifest_path.read_bytes())
    assert manifest_path.read_bytes() == codec.encode(manifest)
    assert manifest == {
        "format": "httk-workflow-transaction",
        "format_version": 1,
        "operations": [
            {"id": "op-0001", "op": "put", "destination": "results/energy.json", "source": "files/op-0001"},
            {"id": "op-0002", "op": "put", "destination": "results/bands", "source": "files/op-0002"},
            {"id": "op-0003", "op": "remove", "destination": "scratch", "missing_ok": True},
            {"id": "op-0004", "op": "remove", "destination": "old/file", "missing_ok": False},
        ],
    }
    files = attempt.ready / "transaction" / "files"
    assert (files / "op-0001").read_text(encoding="utf-8") == '{"e": -1}\n'
    assert (files / "op-0002" / "b1").read_text(encoding="utf-8") == "1\n"
    assert attempt.outcome()["action"] == "succeed"


def test_put_and_remove_return_the_operation_identifier(make_attempt, workspace_spec):
    make_attempt("start", spec=workspace_spec(data_mode="transactional"))
    returned = []

    def handler(a):
        (a.workdir / "f").write_text("x", encoding="utf-8")
        returned.extend([a.put("f", "a"), a.remove("b", missing_ok=True), a.put("f", "c")])
        a.succeed()

    assert runner_with(handler).main([]) == 0
    assert returned == ["op-0001", "op-0002", "op-0003"]


@pytest.mark.parametrize("bad", ["a\x00b", "results/\nenergy", "tab\there", "esc\x1b", "del\x7f"])
def test_put_and_remove_refuse_control_characters_at_the_call(make_attempt, workspace_spec, bad):
    attempt = make_attempt("start", spec=workspace_spec(data_mode="transactional"))

    def handler(a):
        (a.workdir / "f").write_text("x", encoding="utf-8")
        with pytest.raises(ValueError, match="control character"):
            a.put("f", bad)
        with pytest.raises(ValueError, match="control character"):
            a.remove(bad, missing_ok=True)
        a.succeed()

    assert runner_with(handler).main([]) == 0
    assert not (attempt.ready / "transaction").exists()  # nothing was staged


def test_put_and_remove_need_transactional_data(make_attempt):
    make_attempt("start")

    def handler(a):
        (a.workdir / "f").write_text("x", encoding="utf-8")
        with pytest.raises(RuntimeError, match="data mode 'none'"):
            a.put(a.workdir / "f", "f")
        with pytest.raises(RuntimeError, match="transactional"):
            a.remove("f")
        assert not list(a.control.glob("outcome.tmp.*"))
        a.succeed()

    assert runner_with(handler).main([]) == 0


# --------------------------------------------------------------------------- workdir batches


def test_workdir_batch_applies_on_exit(make_attempt):
    attempt = make_attempt("start")

    def handler(a):
        (a.workdir / "old.txt").write_text("old", encoding="utf-8")
        (a.workdir / "gone").mkdir()
        with a.workdir_batch() as batch:
            batch.write("INCAR", "ENCUT = 520\n")
            batch.write("sub/data.bin", b"\x00\x01")
            batch.rename("old.txt", "archive/old.txt")
            batch.remove("gone")
            with pytest.raises(ValueError, match="relative path"):
                batch.write("../escape", "x")
            with pytest.raises(ValueError, match="private"):
                batch.remove(".httk-runner/runlog.jsonl")
            assert not (a.workdir / "INCAR").exists(), "nothing happens before the block ends"
        a.succeed()

    runner_with(handler).main([])
    workdir = attempt.workdir
    assert (workdir / "INCAR").read_text(encoding="utf-8") == "ENCUT = 520\n"
    assert (workdir / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert (workdir / "archive" / "old.txt").read_text(encoding="utf-8") == "old"
    assert not (workdir / "old.txt").exists() and not (workdir / "gone").exists()
    runner = workdir / ".httk-runner"
    assert list((runner / "workdir-ready").iterdir()) == []
    (applied,) = (runner / "workdir-applied").iterdir()
    ops = json.loads((applied / "ops.json").read_bytes())
    assert ops["format"] == "httk-workflow-workdir-batch" and ops["id"] == applied.name
    assert [op["op"] for op in ops["operations"]] == ["write", "write", "rename", "remove"]


def test_an_exception_inside_the_block_discards_the_batch(make_attempt):
    attempt = make_attempt("start")
    a = Attempt.initialize()
    with pytest.raises(KeyError):
        with a.workdir_batch() as batch:
            batch.write("x", "1")
            raise KeyError("boom")
    assert not (attempt.workdir / "x").exists()
    assert not (attempt.workdir / ".httk-runner" / "workdir-ready").exists()
    assert not any((attempt.workdir / ".httk-runner" / "workdir-staging").iterdir())


def test_a_sealed_unapplied_batch_is_replayed_by_the_next_initialize(make_attempt):
    attempt = make_attempt("start")
    workdir = attempt.workdir
    (workdir / "a.txt").write_text("A", encoding="utf-8")
    # The interrupted attempt: the batch was sealed, and the process died before applying it.
    batch = WorkdirBatch(workdir, durable=False, new_id=lambda: "0d2b8f3e-0000-4000-8000-000000000001")
    batch.write("b.txt", "B")
    batch.rename("a.txt", "c.txt")
    batch.write("a.txt", "new A")
    sealed = batch.seal()
    assert sealed == workdir / ".httk-runner" / "workdir-ready" / batch.id
    # An unsealed batch of the same attempt never took effect and is dropped.
    stale = WorkdirBatch(workdir, durable=False, new_id=lambda: "stale")
    stale.write("never.txt", "x")
    assert not (workdir / "b.txt").exists()

    seen = []
    runner_with(lambda a: (seen.append(sorted(p.name for p in a.workdir.iterdir())), a.succeed())).main([])
    assert seen == [[".httk-runner", "a.txt", "b.txt", "c.txt"]]
    assert (workdir / "a.txt").read_text(encoding="utf-8") == "new A"
    assert (workdir / "c.txt").read_text(encoding="utf-8") == "A"
    assert not (workdir / "never.txt").exists()
    assert (workdir / ".httk-runner" / "workdir-applied" / batch.id).is_dir()
    assert not (workdir / ".httk-runner" / "workdir-staging" / "stale").exists()


def test_replay_resumes_a_half_applied_batch_without_repeating_ops(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "a").write_text("1", encoding="utf-8")
    batch = WorkdirBatch(workdir, durable=False, new_id=lambda: "b1")
    batch.rename("a", "b")
    batch.write("a", "2")
    batch.rename("a", "c")
    sealed = batch.seal()
    assert sealed is not None
    # Simulate a crash after the first two ops took effect but before the second was recorded.
    os.replace(workdir / "a", workdir / "b")
    (workdir / "a").write_text("2", encoding="utf-8")
    (sealed / "progress.json").write_bytes(codec.encode({"applied": 1}))
    apply_sealed_batch(workdir, sealed, durable=True)
    assert {p.name: p.read_text(encoding="utf-8") for p in workdir.iterdir() if p.is_file()} == {"b": "1", "c": "2"}


def test_an_empty_batch_seals_nothing(tmp_path):
    batch = WorkdirBatch(tmp_path, durable=False, new_id=lambda: "e")
    assert batch.seal() is None
    assert not (tmp_path / ".httk-runner" / "workdir-ready").exists()


# --------------------------------------------------------------------------- run


def _live_members(pgid: int) -> list[int]:
    """Non-zombie processes of group ``pgid``, read straight from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_run_timeout_terminates_the_whole_process_group(make_attempt):
    attempt = make_attempt("start")
    a = Attempt.initialize()
    started = time.monotonic()
    result = a.run(["sh", "-c", "echo $$ > leader.pid; sleep 30 & sleep 30"], timeout=0.5)
    elapsed = time.monotonic() - started
    assert result.timed_out is True
    assert result.returncode != 0
    assert result.argv == ("sh", "-c", "echo $$ > leader.pid; sleep 30 & sleep 30")
    assert elapsed < 10 and 0.5 <= result.duration < 10
    pgid = int((attempt.workdir / "leader.pid").read_text(encoding="utf-8"))
    assert _live_members(pgid) == []


def test_run_in_the_workdir_and_refuse_shell_strings(make_attempt):
    attempt = make_attempt("start")
    a = Attempt.initialize()
    result = a.run(["sh", "-c", "pwd > here; exit 3"])
    assert (result.returncode, result.timed_out) == (3, False)
    assert (attempt.workdir / "here").read_text(encoding="utf-8").strip() == str(attempt.workdir)
    with pytest.raises(TypeError, match="argument array"):
        a.run("echo hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argv\[1\]"):
        a.run(["echo", 1])  # type: ignore[list-item]


def test_a_durable_attempt_publishes_everything(make_attempt, workspace_spec):
    from httk.workflow import ChildSpec

    attempt = make_attempt("start", spec=workspace_spec(data_mode="transactional"), durable=True)

    def handler(a):
        with a.workdir_batch() as batch:
            batch.write("f", "x")
        a.put(a.workdir / "f", "f")
        a.spawn(ChildSpec(step="start"), label="child")
        a.state["k"] = 1
        a.log.append("note", "durable")
        a.gather("start")

    assert runner_with(handler).main([]) == 0
    assert attempt.outcome()["action"] == "wait"
    assert (attempt.ready / "transaction" / "files" / "op-0001").read_text(encoding="utf-8") == "x"
    assert attempt.spawned()["children"][0]["label"] == "child"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_sigterm_to_the_runner_takes_the_command_group_down_first(make_attempt, tmp_path):
    import signal
    import subprocess
    import sys

    attempt = make_attempt("start")
    script = tmp_path / "runner.py"
    script.write_text(
        "from httk.workflow import Runner\n"
        "run = Runner('demo')\n"
        "@run.step\n"
        "def start(a):\n"
        "    a.run(['sh', '-c', 'echo $$ > leader.pid; sleep 30 & sleep 30'])\n"
        "    a.succeed()\n"
        "raise SystemExit(run.main())\n",
        encoding="utf-8",
    )
    runner = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ))
    pid_file = attempt.workdir / "leader.pid"
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text(encoding="utf-8").strip()):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=20) == -signal.SIGTERM
    assert _live_members(int(pid_file.read_text(encoding="utf-8"))) == []
    assert not attempt.ready.exists()
