"""Black-box benchmarks of the store and the manager; prints a Markdown table.

Run with ``make bench`` (or ``python benchmarks/run.py [--quick]``). Figures are
wall-clock medians on this machine; they are measured here and recorded in
docs/benchmarks.md, never asserted by unit tests.

``--profile inspection`` measures the read commands instead (``inspection.py``): the
start-up of ``workspace status``, ``job list`` and ``job show`` beside ``python -c
pass`` and ``python -c "import click"``, then ``workspace status`` and ``job list
--kind ready`` at 10,000 and 100,000 jobs and ``collect``/``workspace fsck`` at
100,000. ``--profile million`` is the million-job profile (``million.py``; about
half an hour and several GiB of scratch space: never in CI); ``--jobs`` changes its size.
The default table ends with the whole-manager cases of ``e2e.py`` (Python SDK, Bash SDK
and raw-protocol throughput beside their floors, a 2,000-child fan-out, the first launch
beside 50,000 terminal jobs, a manager's RSS at 0 and 100,000 ready jobs, in one placement and
1,000 to a placement);
``--profile children-20000`` is one parent spawning and gathering 20,000 children (never in CI).
``--profile scale`` (``scale.py``) measures bulk submission, a manager's throughput and the
``status``/``job list`` latency at several workspace sizes (``--sizes``), each beside its floor,
and draws them into a PNG (``--out``, default docs/benchmarks-scale.png) with a CSV beside it;
about three minutes at the default sizes, eight with 100,000.
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def print_rows(rows: list[tuple[str, str]]) -> None:
    print("| benchmark | result |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


def profile(name: str, args: argparse.Namespace) -> None:
    """The ``inspection``, ``million``, ``children-20000`` or ``scale`` profile, printed as the default one is."""
    import inspection  # benchmarks/ is this script's directory, so its siblings import by name

    scratch = Path(tempfile.mkdtemp(prefix=f"httk-{name}-", dir=args.scratch))
    try:
        if name == "children-20000":
            import e2e

            e2e.compile_package()
            rows = [e2e.case_fanout(scratch, 20000)]
        elif name == "scale":
            import scale

            rows = scale.profile(scratch, [int(size) for size in args.sizes.split(",") if size], Path(args.out),
                                 batch=args.batch, jobs=args.manager_jobs, runs=args.runs)
        elif name == "million":
            import million

            rows = million.profile(scratch, args.jobs, 50, SUCCEED)
        else:
            sizes = (10_000, 100_000) if not args.quick else (10_000,)
            rows = inspection.rows(scratch, sizes, terminal=0.9, runs=5, heavy_from=100_000)
        print_rows(rows)  # before the removal, which takes minutes after a million jobs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def end_to_end_rows(root: Path, quick: bool) -> list[tuple[str, str]]:
    """The whole-manager cases of ``e2e.py``, each beside its bare-process floor measured in the same run."""
    import e2e

    e2e.compile_package()
    count, rounds = (20, 1) if quick else (100, 3)
    rows = [e2e.case_throughput(root, kind, count // 2 if kind == "bash" else count, rounds)
            for kind in ("python", "bash", "raw")]
    rows.append(e2e.case_fanout(root, 200 if quick else 2000))
    rows.append(e2e.case_history(root, 50, 5000 if quick else 50000, rounds))
    ready = 1000 if quick else 100000
    rows += [e2e.case_rss(root, 0), e2e.case_rss(root, ready), e2e.case_rss(root, ready, per_placement=ready // 100)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--profile", choices=("default", "inspection", "million", "children-20000", "scale"),
                        default="default", help="what to measure (default: the store and the manager)")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs of the million profile")
    parser.add_argument("--scratch", help="directory for the profiles' workspaces (default: the system temp one)")
    import scale  # benchmarks/ is this script's directory

    scale.arguments(parser)
    args = parser.parse_args()
    if args.profile != "default":
        profile(args.profile, args)
        return
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
        rows += end_to_end_rows(root, args.quick)
    print_rows(rows)


if __name__ == "__main__":
    main()
