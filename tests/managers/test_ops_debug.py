"""``job debug`` against real managers and runners (spec 000 "The foreground debug runner").

A job another live manager holds is refused up front, naming that manager and
the fix, with nothing written; one whose manager is gone is recovered by the
takeover rules. ``--follow-children`` drives a waiting job's children depth
first, in spawn order.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

#: A Python runner of a job tree: each job appends its name to ORDER, spawns TREE[name] as prepared payloads
#: running this same file (``leaf`` at a higher priority than ``mid``), gathers them, and appends "NAME after".
TREE_RUNNER = """import shutil
from httk.workflow import JobSpec, Runner, prepare_job_payload

TREE = {"root": ["mid", "leaf"], "mid": ["c1", "c2"]}
PRIORITY = {"leaf": 10}
run = Runner("ops")


def note(line):
    with open("ORDER", "a") as handle:
        handle.write(line + "\\n")


@run.step
def main(a):
    name = a.input("name")
    note(name)
    if name not in TREE:
        a.succeed()
        return
    for kid in TREE[name]:
        spec = JobSpec(name=kid, workflow="ops", runner_path="run.py", inputs={"name": kid},
                       priority=PRIORITY.get(kid, 0))
        child = prepare_job_payload(a.workdir / kid, spec)
        shutil.copy(__file__, child / "run.py")
        a.spawn(child, label=kid)
    a.gather("after", when="all_terminal")


@run.step
def after(a):
    note(a.input("name") + " after")
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
"""


def _entries(path: Path) -> list[str]:
    return sorted(item.name for item in path.iterdir()) if path.is_dir() else []


def test_debug_refuses_a_job_a_live_manager_holds_and_writes_nothing(ops):
    job = ops.job("touch started; wait_for go\npublish '\"action\":\"succeed\"'")
    holder = ops.start("--idle")
    holder_id = holder.manager_id
    ops.wait_kind(job, "running")
    managers = Path(ops.handle.layout.managers)
    before = (_entries(managers), ops.marker(job), _entries(Path(ops.handle.layout.journal)))

    done = ops.httk("job", "debug", str(ops.root), job, code=2)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    line = lines[0]
    assert f"live manager {holder_id} (host {socket.gethostname()}, pid {holder.pid})" in line
    assert "wait for that manager" in line and f"job request {ops.root} " in line and " cancel " in line
    assert done.stdout == ""
    # No private manager directory, no transition, no journal writer.
    assert (_entries(managers), ops.marker(job), _entries(Path(ops.handle.layout.journal))) == before

    (ops.workdir(job) / "go").touch()
    ops.wait_kind(job, "succeeded")
    holder.signal(signal.SIGTERM)
    assert holder.wait(20) == 0


def test_debug_recovers_a_job_whose_manager_is_gone(ops):
    """A stale holder is no refusal: the private manager takes the job over by the ordinary rules."""
    job = ops.job("if [ -e once ]; then publish '\"action\":\"succeed\"'; exit 0; fi\n"
                  "touch once started; sleep 60")
    first = ops.start("--lease-seconds", "8")  # long enough to be fresh when debug looks
    first_id = first.manager_id
    ops.wait_kind(job, "running")
    ops.wait_until(lambda: (ops.workdir(job) / "started").exists(), 30, "the runner to start")
    process = ops.frame(job).process
    first.signal(signal.SIGKILL)
    first.wait(10)
    os.killpg(process.pgid, signal.SIGKILL)
    ops.wait_until(lambda: not ops.group_members(process.pgid), 10, "the attempt to be gone")

    done = ops.httk("job", "debug", str(ops.root), job, timeout=60)
    assert "ended succeeded" in done.stdout.splitlines()[-1], done.stdout + done.stderr
    assert ops.frame(job).total_attempts == 2
    takeovers = [entry for entry in ops.log(job) if entry.get("takeover")]
    assert takeovers and takeovers[0]["takeover"]["rule"] == "process_gone", ops.log(job)
    # The private manager waits quietly for the dead owner's lease: the first line says so.
    first_line = done.stdout.splitlines()[0]
    assert first_line.startswith(f"[debug] job {ops.marker(job).key} is running under manager {first_id} "), first_line
    assert "whose process is gone: its lease runs out in" in first_line


def test_follow_children_drives_the_tree_depth_first_in_spawn_order(ops, tmp_path):
    order = tmp_path / "order"
    job = ops.job(TREE_RUNNER.replace("ORDER", str(order)), runner_path="run.py", inputs={"name": "root"})
    done = ops.httk("job", "debug", str(ops.root), job, "--follow-children", timeout=120)
    assert "ended succeeded" in done.stdout.splitlines()[-1], done.stdout + done.stderr
    # Before: every child was handed to the private manager at once, and the higher-priority
    # ``leaf`` ran before ``mid``'s subtree.
    assert order.read_text().splitlines() == ["root", "mid", "c1", "c2", "mid after", "leaf", "root after"]


#: A parent spawning ``ok`` (succeeds) and ``stop`` (pauses), and gathering both when all are terminal.
PAUSING_RUNNER = """import shutil
from httk.workflow import JobSpec, Runner, prepare_job_payload

run = Runner("ops")


@run.step
def main(a):
    name = a.input("name")
    if name == "stop":
        a.pause("needs a look")
        return
    if name == "ok":
        a.succeed()
        return
    for kid in ("stop", "ok"):
        child = prepare_job_payload(a.workdir / kid, JobSpec(name=kid, workflow="ops", runner_path="run.py",
                                                             inputs={"name": kid}))
        shutil.copy(__file__, child / "run.py")
        a.spawn(child, label=kid)
    a.gather("after", when="all_terminal")


@run.step
def after(a):
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
"""


def test_follow_children_stops_when_only_a_paused_child_is_left(ops):
    """Before: the paused child was passed over, the parent waited on it, and debug never returned."""
    job = ops.job(PAUSING_RUNNER, runner_path="run.py", inputs={"name": "root"})
    done = ops.httk("job", "debug", str(ops.root), job, "--follow-children", code=4, timeout=60)
    stopped = [line for line in done.stdout.splitlines() if line.startswith("[debug] stopped:")]
    assert len(stopped) == 1, done.stdout + done.stderr
    assert f"{ops.marker(job).key} waits on paused child stop--" in stopped[0]
    assert f"'httk workflow job request {ops.root} stop--" in stopped[0] and " continue --operator WHO'" in stopped[0]
    assert ops.marker(job).kind.value == "waiting"
    assert "ended waiting" in done.stdout.splitlines()[-1]
