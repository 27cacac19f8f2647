"""Black-box benchmarks of the store and the manager; prints a Markdown table.

Run with ``make bench`` (or ``python benchmarks/run.py [--quick]``). Figures are
wall-clock medians on this machine; they are measured here and recorded in
docs/benchmarks.md, never asserted by unit tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from httk.workflow import JobSpec, prepare_job_payload
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.store.discovery import Discovery
from httk.workflow.workspace import Workspace

SUCCEED = (
    "#!/bin/bash\n"
    'd="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.1"; mkdir -p "$d"\n'
    "printf '{\"action\":\"succeed\",\"format\":\"httk-workflow-outcome\",\"format_version\":1}\\n'"
    ' > "$d/outcome.json"\n'
    'mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"\n'
)


def payload(root: Path) -> Path:
    path = root / "payload"
    prepare_job_payload(path, JobSpec(name="bench", workflow="bench", runner_path="run.sh", tag="bench"))
    (path / "run.sh").write_text(SUCCEED)
    return path


def timed(function: Callable[[], object], repeat: int = 3) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_submit(root: Path, count: int, durable: bool) -> float:
    """Seconds per submission."""
    def once() -> None:
        target = Path(tempfile.mkdtemp(dir=root))
        workspace = Workspace.init(target / "ws", durable=durable)
        source = payload(target)
        for _ in range(count):
            workspace.submit(source, "bench/a")
    return timed(once) / count


def bench_transition(root: Path, count: int, durable: bool) -> float:
    """Seconds per transition (append a frame, rename the marker)."""
    target = Path(tempfile.mkdtemp(dir=root))
    workspace = Workspace.init(target / "ws", durable=durable)
    marker = workspace.submit(payload(target), "bench/a")
    store = workspace.handle.store
    frame = store.read_job(marker).frame
    marker, frame = store.transition(marker, frame, Event.REGISTER)
    start = time.perf_counter()
    for index in range(count):
        event = Event.OPERATOR_PAUSE if index % 2 == 0 else Event.OPERATOR_CONTINUE
        marker, frame = store.transition(marker, frame, event)
    return (time.perf_counter() - start) / count


def bench_manager(root: Path, count: int, workers: int) -> tuple[float, float]:
    """(jobs per second, median seconds from runner exit to committed) for trivial jobs."""
    target = Path(tempfile.mkdtemp(dir=root))
    workspace = Workspace.init(target / "ws")
    source = payload(target)
    for _ in range(count):
        workspace.submit(source, "bench/a")
    manager = build_manager(default_container(), workspace.handle, ManagerConfig(workers=workers))
    manager.out = lambda line: None
    start = time.perf_counter()
    manager.run()
    elapsed = time.perf_counter() - start
    # Latency: the runner's outcome.json mtime against the created_at of the job's final frame.
    store = workspace.handle.store
    gaps = []
    for marker in store.iter_markers(StateKind.SUCCEEDED):
        frame = store.read_frame(marker)
        attempts = target / "ws" / ".httk-workflow" / "attempts" / marker.job_id
        outcome = next(attempts.iterdir()) / "outcome.ready" / "outcome.json"
        gaps.append(frame.created_at - outcome.stat().st_mtime)
    return count / elapsed, statistics.median(gaps) if gaps else float("nan")


def bench_tick_vs_history(root: Path, history: int) -> float:
    """Seconds for one bounded discovery cycle over active kinds with ``history`` terminal markers present."""
    target = Path(tempfile.mkdtemp(dir=root))
    workspace = Workspace.init(target / "ws", durable=False)
    terminal = target / "ws" / ".httk-workflow" / "state" / "succeeded" / "old"
    terminal.mkdir(parents=True)
    for index in range(history):
        fd = os.open(terminal / f"{index:08x}-0000-4000-8000-000000000000.p0.g5.init", os.O_CREAT | os.O_WRONLY)
        os.close(fd)
    source = payload(target)
    for _ in range(10):
        workspace.submit(source, "bench/a")
    discovery = Discovery(workspace.handle.fs, workspace.handle.layout)

    def cycle() -> None:
        for kind in (StateKind.SUBMITTED, StateKind.READY, StateKind.WAITING, StateKind.RUNNING):
            discovery.scan(kind)

    return timed(cycle, repeat=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    scale = 1 if args.quick else 4
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for durable in (True, False):
            label = "durable" if durable else "no-durable"
            rows.append((f"submit ({label})", f"{bench_submit(root, 100 * scale, durable) * 1e3:.2f} ms/job"))
            rows.append((f"transition ({label})", f"{bench_transition(root, 500 * scale, durable) * 1e6:.0f} µs"))
        rate, latency = bench_manager(root, 50 * scale, workers=2)
        rows.append(("manager, trivial jobs, 2 workers", f"{rate:.1f} jobs/s"))
        rows.append(("runner outcome → committed marker (median)", f"{latency * 1e3:.1f} ms"))
        for history in (0, 20000 * scale):
            cycle = bench_tick_vs_history(root, history)
            rows.append((f"discovery cycle, {history} terminal markers", f"{cycle * 1e3:.2f} ms"))
    print("| benchmark | result |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
