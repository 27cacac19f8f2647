"""Inspection at campaign scale: CLI start-up, ``workspace status``/``job list`` at 10k/100k jobs, collect, fsck.

``PYTHONPATH=src .venv/bin/python benchmarks/inspection.py [--sizes 10000,100000] [--runs 5]``
prints a Markdown table of whole-process wall and CPU seconds (median, min and max of
``--runs`` runs after one warm-up, from ``os.wait4``), beside the floors measured
in the same run (``python -c pass``, ``python -c "import click"``). The workspaces are
built in a scratch directory (``--scratch``) and removed afterwards:

- jobs are bulk-submitted (``Workspace.submit_many``, no-durable: the fixture is not
  what is measured) at ``bench/NNN``, 1,000 jobs per placement;
- ``--terminal`` of them (default 0.9) are then driven to ``succeeded`` with the raw
  store transitions a manager makes (register, claim, launch, publish, commit), the
  rest registered (``ready``), so the tree looks like a campaign part-way through.

``run.py --profile million`` (see there) uses :func:`build` for its one large workspace.
Figures are recorded in docs/benchmarks.md, never asserted by tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from httk.workflow import JobSpec, Workspace, prepare_job_payloads
from httk.workflow.domain.frames import Owner
from httk.workflow.domain.lifecycle import Event, StateKind

#: Jobs per placement directory: a campaign spreads its jobs (docs/benchmarks.md "Layout").
PER_PLACEMENT = 1000
HTTK = str(Path(sys.executable).parent / "httk")
PY = sys.executable
TO_SUCCEEDED = (
    (Event.REGISTER, {"step": "main", "activation_id": "v1", "activation_ordinal": 1}),
    (Event.CLAIM, {"owner": Owner(manager_id="m-bench", host="bench", lease_seconds=60.0, claimed_at=0.0),
                   "attempt_id": "a1", "attempt_ordinal": 1, "total_attempts": 1}),
    (Event.LAUNCH, {}),
    (Event.PUBLISH, {}),
    (Event.COMMIT_SUCCEED, {"owner": None}),
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def submit(root: Path, count: int, *, durable: bool, chunk: int = 50_000, runner: str = "#!/bin/sh\n",
           prefix: str = "bench", workspace: Workspace | None = None,
           progress: Callable[[int, float, float], None] | None = None) -> Workspace:
    """``count`` trivial jobs submitted to ``root/ws`` (made unless given), ``chunk`` payloads prepared at a time.

    Every job pins ``runner`` published to the workspace store. The payloads are moved into
    place (``move=True``), so a job costs its payload directory, its ``job.json``, its
    marker and its id reservation, and no copy. ``progress(done, prepare_s, submit_s)``
    is told after each chunk with the seconds spent so far in each of the two steps.
    """
    root.mkdir(parents=True, exist_ok=True)
    if workspace is None:
        workspace = Workspace.init(root / "ws", durable=durable)
    (root / "run.sh").write_text(runner)
    sha256 = str(workspace.publish_runner(root / "run.sh", "run.sh")["sha256"])
    where = [f"{prefix}/{index // PER_PLACEMENT:03d}" for index in range(count)]
    done, preparing, submitting = 0, 0.0, 0.0
    while done < count:
        size = min(chunk, count - done)
        batch = [(root / "src" / f"p{done + index}",
                  JobSpec(name=f"job{done + index}", workflow="bench", runner_path="run.sh",
                          runner_source="workspace", runner_sha256=sha256, tag="bench"))
                 for index in range(size)]
        started = time.perf_counter()
        paths = prepare_job_payloads(batch, durable=durable)
        preparing += time.perf_counter() - started
        started = time.perf_counter()
        workspace.submit_many(paths, where[done : done + size], move=True)
        submitting += time.perf_counter() - started
        done += size
        if progress is not None:
            progress(done, preparing, submitting)
    shutil.rmtree(root / "src", ignore_errors=True)
    return workspace


def advance(workspace: Workspace, terminal: float) -> None:
    """Register every submitted job; drive the first ``terminal`` fraction of them to ``succeeded``."""
    store = workspace.handle.store
    markers = list(store.iter_markers(StateKind.SUBMITTED))
    finished = int(len(markers) * terminal)
    for index, marker in enumerate(markers):
        frame = store.read_job(marker).frame
        for event, changes in TO_SUCCEEDED if index < finished else TO_SUCCEEDED[:1]:
            marker, frame = store.transition(marker, frame, event, **changes)


def build(root: Path, count: int, terminal: float) -> Workspace:
    started = time.perf_counter()
    workspace = submit(root, count, durable=False)
    log(f"submitted {count} jobs in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    advance(workspace, terminal)
    log(f"advanced {count} jobs ({terminal:.0%} to succeeded) in {time.perf_counter() - started:.0f} s")
    return workspace


def run_once(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one whole process, its output discarded."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime


def measure(command: Sequence[str], env: dict[str, str], runs: int) -> dict[str, list[float]]:
    run_once(command, env)  # warm-up: page cache, .pyc
    samples = [run_once(command, env) for _ in range(runs)]
    return {"wall": [wall for wall, _ in samples], "cpu": [cpu for _, cpu in samples]}


def seconds(found: dict[str, list[float]]) -> str:
    """``found``'s wall median (min, max) and cpu median, in seconds."""
    wall, cpu = sorted(found["wall"]), sorted(found["cpu"])
    return (f"{statistics.median(wall):.3f} s wall (min {wall[0]:.3f}, max {wall[-1]:.3f}), "
            f"{statistics.median(cpu):.3f} s cpu")


def environment(scratch: Path) -> dict[str, str]:
    """This process's environment with XDG homes of its own (nothing touches the user's registry)."""
    return {**os.environ, "XDG_DATA_HOME": str(scratch / "xdg-data"), "XDG_CONFIG_HOME": str(scratch / "xdg-config"),
            "XDG_STATE_HOME": str(scratch / "xdg-state")}


def startup(scratch: Path, runs: int) -> list[tuple[str, str]]:
    """Start-up rows: the floors, then the three read commands on a three-job workspace."""
    env = environment(scratch)
    workspace = submit(scratch / "small", 3, durable=False)
    path = str(workspace.handle.root)
    job = next(workspace.handle.store.iter_markers(StateKind.SUBMITTED)).job_id
    cases = [
        ("python -c pass", [PY, "-c", "pass"]),
        ('python -c "import click"', [PY, "-c", "import click"]),
        ("httk workflow workspace status WS", [HTTK, "workflow", "workspace", "status", path]),
        ("httk workflow job list WS", [HTTK, "workflow", "job", "list", path]),
        ("httk workflow job show WS JOB", [HTTK, "workflow", "job", "show", path, job]),
    ]
    return [(label, seconds(measure(command, env, runs))) for label, command in cases]


def at_scale(scratch: Path, size: int, terminal: float, runs: int, heavy: bool) -> list[tuple[str, str]]:
    """Rows for one workspace of ``size`` jobs: status, list --kind ready, and (``heavy``) collect and fsck."""
    env = environment(scratch)
    root = scratch / f"ws-{size}"
    workspace = build(root, size, terminal)
    path = str(workspace.handle.root)
    ready = size - int(size * terminal)
    label = f"{size:,} jobs ({ready:,} ready)"
    cases = [
        (f"workspace status, {label}", [HTTK, "workflow", "workspace", "status", path], runs),
        (f"job list --kind ready, {label}", [HTTK, "workflow", "job", "list", path, "--kind", "ready"], runs),
    ]
    if heavy:
        cases += [
            (f"collect, {label}", [HTTK, "workflow", "collect", path], 1),
            (f"workspace fsck, {label}", [HTTK, "workflow", "workspace", "fsck", path], 1),
        ]
    found = [(name, seconds(measure(command, env, count))) for name, command, count in cases]
    shutil.rmtree(root)
    return found


def rows(scratch: Path, sizes: Sequence[int], *, terminal: float, runs: int, heavy_from: int) -> list[tuple[str, str]]:
    """Every case: start-up, then each size (``collect`` and ``fsck`` from ``heavy_from`` jobs on)."""
    found = startup(scratch, runs)
    for size in sizes:
        found += at_scale(scratch, size, terminal, runs, size >= heavy_from)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="workspace sizes, comma-separated")
    parser.add_argument("--terminal", type=float, default=0.9, help="fraction of the jobs driven to succeeded")
    parser.add_argument("--runs", type=int, default=5, help="counted runs per command (default 5)")
    parser.add_argument("--heavy-from", type=int, default=100_000,
                        help="also time collect and fsck (one run each) from this size on")
    parser.add_argument("--scratch", help="directory for the workspaces (default: the system temp directory)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="httk-inspect-", dir=args.scratch))
    sizes = [int(text) for text in args.sizes.split(",") if text]
    try:
        found = rows(scratch, sizes, terminal=args.terminal, runs=args.runs, heavy_from=args.heavy_from)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.runs} runs after a warm-up (collect and fsck: one)\n\n| command | result |\n| --- | --- |")
    for name, value in found:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
