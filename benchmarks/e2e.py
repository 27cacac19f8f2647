"""End-to-end manager benchmarks: trivial jobs per second, fan-out, history independence, RSS.

Every case builds a fresh durable workspace, submits trivial jobs, runs a real
manager (in this process, 2 workers unless told) until it is idle, and times the
manager alone; the bare-process floor of the same count, 2 at a time, is
measured in the same run so the ratio holds when the machine's speed drifts.
``benchmarks/run.py`` reports these cases; ``python benchmarks/e2e.py CASE``
runs one (``--help`` lists them). Figures go to docs/benchmarks.md, never into
unit tests.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from httk.workflow import JobSpec, prepare_job_payload
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.workspace import Workspace

#: A runner that speaks the protocol by hand: no SDK, no Python.
RAW = (
    "#!/bin/bash\n"
    'd="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.1"; mkdir -p "$d"\n'
    "printf '{\"action\":\"succeed\",\"format\":\"httk-workflow-outcome\",\"format_version\":1}\\n'"
    ' > "$d/outcome.json"\n'
    'mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"\n'
)

PYTHON = (
    "from httk.workflow import Runner\n"
    "run = Runner('bench')\n"
    "@run.step\n"
    "def start(a):\n"
    "    a.succeed()\n"
    "raise SystemExit(run.main())\n"
)

BASH = (
    "#!/usr/bin/env bash\n"
    "set -euo pipefail\n"
    'source "$HTTK_WORKFLOW_SHELL_LIB"\n'
    "httk_workflow_runner bench start\n"
    "step_start() { httk_workflow_succeed; }\n"
    'httk_workflow_main "$@"\n'
)

#: A parent that spawns ``count`` Python-SDK children and gathers them all.
FAN_OUT = (
    "from httk.workflow import ChildSpec, Runner\n"
    "run = Runner('bench')\n"
    "@run.step\n"
    "def start(a):\n"
    "    for index in range(int(a.input('count'))):\n"
    "        a.spawn(ChildSpec(step='child'), label=f'c{index}')\n"
    "    a.gather('done', when='all_terminal')\n"
    "@run.step\n"
    "def child(a):\n"
    "    a.succeed()\n"
    "@run.step\n"
    "def done(a):\n"
    "    a.succeed()\n"
    "raise SystemExit(run.main())\n"
)

#: Kind -> (the runner file of the payload, its text).
RUNNERS = {"python": ("run.py", PYTHON), "bash": ("run.sh", BASH), "raw": ("run.sh", RAW),
           "fanout": ("run.py", FAN_OUT)}


def _python_floor(_index: int, _scratch: Path) -> list[str]:
    return [sys.executable, "-c", "import httk.workflow"]


def _shell_floor(index: int, scratch: Path) -> list[str]:
    # The raw runner's shape: bash, a mkdir, a write and a rename (mv), without any manager.
    return ["bash", "-c", 'mkdir -p "$1/t" && printf x > "$1/t/o" && mv "$1/t" "$1/r"', "floor",
            str(scratch / f"f{index}")]


#: The bare processes a job of each kind costs at least, run as often as the jobs and 2 at a time:
#: one interpreter that imports the package for a Python (or Bash SDK) job, bash + mkdir + mv for a raw one.
FLOORS: dict[str, tuple[str, Callable[[int, Path], list[str]]]] = {
    "python": ("`python -c 'import httk.workflow'`", _python_floor),
    "bash": ("`python -c 'import httk.workflow'`", _python_floor),
    "fanout": ("`python -c 'import httk.workflow'`", _python_floor),
    "raw": ("`bash -c 'mkdir; printf >; mv'`", _shell_floor),
}


def compile_package() -> None:
    """Byte-compile the package: with ``PYTHONDONTWRITEBYTECODE`` every runner would recompile what changed."""
    import httk.workflow

    compileall.compile_dir(os.path.dirname(httk.workflow.__file__), quiet=1)


def make_payload(root: Path, kind: str, inputs: dict[str, object] | None = None,
                 ws: Workspace | None = None) -> Path:
    """A prepared payload whose runner is the trivial runner of ``kind``.

    With ``ws`` the runner is published in its runner store and pinned (a spawned child
    inherits a workspace runner; it has no payload to copy a payload runner into).
    """
    name, text = RUNNERS[kind]
    path = Path(tempfile.mkdtemp(dir=root)) / "payload"
    runner: dict[str, object] = {"runner_path": name}
    if ws is not None:
        source = path.parent / name
        source.write_text(text)
        published = ws.publish_runner(source, name=f"bench/{name}")
        runner = {"runner_source": "workspace", "runner_path": published["path"], "runner_sha256": published["sha256"]}
    prepare_job_payload(path, JobSpec(name="bench", workflow="bench", tag="bench", initial_step="start",
                                      inputs=dict(inputs or {}), **runner), durable=False)  # type: ignore[arg-type]
    if ws is None:
        (path / name).write_text(text)
    return path


def placements(count: int, per_placement: int | None = None, start: int = 0) -> list[str]:
    """Where jobs ``start .. start + count`` go: all at ``bench/a``, or ``per_placement`` to each ``bench/NNN``."""
    if per_placement is None:
        return ["bench/a"] * count
    return [f"bench/{index // per_placement:03d}" for index in range(start, start + count)]


def workspace(root: Path, kind: str, count: int, *, durable: bool = True,
              inputs: dict[str, object] | None = None, per_placement: int | None = None) -> Workspace:
    """A fresh workspace with ``count`` submitted jobs of ``kind`` (bulk-submitted where the tree has it).

    They all go to ``bench/a`` unless ``per_placement`` spreads them over ``bench/NNN`` directories.
    """
    target = Path(tempfile.mkdtemp(dir=root))
    ws = Workspace.init(target / "ws", durable=durable)
    source = make_payload(target, kind, inputs, ws if kind == "fanout" else None)
    if count and hasattr(ws, "submit_many"):
        for start in range(0, count, 10000):
            size = min(10000, count - start)
            ws.submit_many([source] * size, placements(size, per_placement, start))
    else:
        for where in placements(count, per_placement):
            ws.submit(source, where)
    return ws


def new_manager(ws: Workspace, workers: int = 2) -> Manager:
    manager = build_manager(default_container(), ws.handle, ManagerConfig(workers=workers))
    manager.out = lambda line: None
    return manager


def register(ws: Workspace) -> None:
    """Make every submitted job ready without launching any (a manager with no worker slot)."""
    new_manager(ws, workers=0).run()


def run_manager(ws: Workspace, workers: int = 2) -> float:
    """Seconds a manager with ``workers`` takes to run the workspace until idle; every job must succeed."""
    manager = new_manager(ws, workers)
    start = time.perf_counter()
    manager.run()
    elapsed = time.perf_counter() - start
    store = ws.handle.store
    failed = [m for kind in (StateKind.FAILED, StateKind.CANCELLED) for m in store.iter_markers(kind)]
    if failed:
        raise SystemExit(f"benchmark jobs failed: {failed[:3]} (see their attempts' stderr.log)")
    return elapsed


def floor(argv: Callable[[int, Path], list[str]], count: int, parallel: int = 2) -> float:
    """Seconds for ``count`` bare processes, ``parallel`` at a time (the floor a manager is measured against)."""
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        running: list[subprocess.Popen[bytes]] = []
        for index in range(count):
            while len(running) >= parallel:
                running[0].wait()
                running = [process for process in running if process.poll() is None]
            running.append(subprocess.Popen(argv(index, Path(scratch)), stdout=subprocess.DEVNULL))
        for process in running:
            process.wait()
        return time.perf_counter() - start


def spread(samples: Sequence[float], digits: int = 1) -> str:
    """``min / median / max`` of ``samples``."""
    return " / ".join(f"{value:.{digits}f}" for value in (min(samples), statistics.median(samples), max(samples)))


def case_throughput(root: Path, kind: str, count: int, rounds: int) -> tuple[str, str]:
    """Jobs per second (min/median/max over ``rounds``), each round beside its own floor."""
    rates, floors, ratios, manager_cpu, runner_cpu = [], [], [], [], []
    label, argv = FLOORS[kind]
    for _ in range(rounds):
        rate, own, runners = measured_run(workspace(root, kind, count), count)
        rates.append(rate)
        manager_cpu.append(own)
        runner_cpu.append(runners)
        floors.append(count / floor(argv, count))
        ratios.append(floors[-1] / rates[-1])
    return (f"end to end, {kind} runner: {count} trivial jobs, 2 workers, durable (jobs/s)",
            f"{spread(rates)}; floor {label} 2 at a time {spread(floors)}; "
            f"floor/manager per round {spread(ratios, 2)}; CPU ms per job: manager {spread(manager_cpu)}, "
            f"runner {spread(runner_cpu)}")


def measured_run(ws: Workspace, count: int) -> tuple[float, float, float]:
    """(jobs/s, manager CPU ms per job, runner CPU ms per job) of one manager running ``count`` jobs until idle."""
    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = count / run_manager(ws)
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU per job, the manager's own and its runners': steadier than wall time on a shared machine.
    return rate, _cpu(before[0], after[0]) / count * 1e3, _cpu(before[1], after[1]) / count * 1e3


def _cpu(start: resource.struct_rusage, end: resource.struct_rusage) -> float:
    return (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime)


def case_fanout(root: Path, count: int) -> tuple[str, str]:
    """One parent spawns ``count`` Python children and gathers them; beside ``count + 2`` bare launches."""
    ws = workspace(root, "fanout", 1, inputs={"count": count})
    seconds = run_manager(ws)
    succeeded = sum(1 for _ in ws.handle.store.iter_markers(StateKind.SUCCEEDED))
    if succeeded != count + 1:
        raise SystemExit(f"fan-out: {succeeded} jobs succeeded, expected {count + 1}")
    label, argv = FLOORS["fanout"]
    bare = floor(argv, count + 2)
    return (f"fan-out: one parent spawns {count} Python children and gathers them, 2 workers, durable",
            f"{seconds:.1f} s; {count + 2} bare {label}, 2 at a time: {bare:.1f} s; ratio {seconds / bare:.2f}")


def first_launch(ws: Workspace) -> float:
    """Seconds from a manager's start to its first launched attempt; it stops there and reaps what it launched."""
    manager = new_manager(ws)
    proc = manager.proc
    launch = proc.launch
    seen: list[float] = []

    def launched(*args: Any, **kwargs: Any) -> Any:
        seen.append(time.perf_counter())
        manager.stop_now = True
        return launch(*args, **kwargs)

    proc.launch = launched  # type: ignore[method-assign]
    start = time.perf_counter()
    manager.run()
    for running in manager.running.values():
        running.process.wait()
    return seen[0] - start


def fill_terminal(ws: Workspace, count: int, per_placement: int = 1000) -> None:
    """``count`` succeeded markers, ``per_placement`` to a directory, as a long campaign leaves them (names only:
    no pass reads a terminal marker, so their frames and payloads are not needed)."""
    base = Path(ws.handle.layout.kind_dir(StateKind.SUCCEEDED)) / "old"
    for index in range(count):
        directory = base / f"{index // per_placement:04d}"
        if index % per_placement == 0:
            directory.mkdir(parents=True)
        name = f"done--{index:08x}-0000-4000-8000-000000000000.p0.g5.init"
        os.close(os.open(directory / name, os.O_CREAT | os.O_WRONLY))


def case_history(root: Path, ready: int, history: int, rounds: int) -> tuple[str, str]:
    """Time to the first launch of ``ready`` ready jobs beside ``history`` terminal ones, against beside none."""
    beside: list[float] = []
    alone: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
        for terminal, into in ((0, alone), (history, beside)):
            ws = workspace(root, "raw", ready)
            register(ws)
            fill_terminal(ws, terminal)
            os.sync()
            into.append(first_launch(ws) * 1e3)
        ratios.append(beside[-1] / alone[-1])
    return (f"time to the first launch of {ready} ready jobs beside {history} terminal (ms)",
            f"{spread(beside)}; beside none {spread(alone)}; ratio per round {spread(ratios, 2)}")


def case_rss(root: Path, ready: int, launches: int = 20, per_placement: int | None = None,
             trace: bool = False) -> tuple[str, str]:
    """Peak RSS of a manager process that serves ``ready`` ready jobs until ``launches`` attempts committed.

    The jobs are in one placement directory, or ``per_placement`` to a directory. With
    ``trace`` the manager runs under ``tracemalloc`` (which adds its own memory to the RSS)
    and its largest allocations at the serving peak and the summary's peak go to stderr.
    """
    ws = workspace(root, "raw", ready + launches, durable=False, per_placement=per_placement)
    register(ws)
    argv = [sys.executable, __file__, "_rss", str(ws.handle.layout.root), str(launches), *(["trace"] * trace)]
    found = subprocess.run(argv, check=True, capture_output=True, text=True)
    print(found.stderr, end="", file=sys.stderr)
    serving, peak = map(float, found.stdout.split()[-2:])
    layout = "one placement" if per_placement is None else f"{per_placement:,} per placement"
    return (f"manager peak RSS beside {ready:,} ready jobs ({layout}; {launches} launched and committed)",
            f"{serving:.1f} MiB serving; {peak:.1f} MiB after its closing summary")


def _rss_child(root: str, launches: int, trace: bool = False) -> None:
    """In a fresh process: a 2-worker manager that stops after ``launches`` commits; prints its peak RSS in MiB.

    With ``trace``, also the largest allocations (by traceback, to stderr) when the traced
    memory was largest after a discovery pass, and the closing summary's traced peak.
    """
    ws = Workspace(root)
    manager = new_manager(ws)
    finish = manager.committer.commit_exited
    done: list[object] = []

    serving: list[float] = []

    def committed(*args: Any, **kwargs: Any) -> Any:
        result = finish(*args, **kwargs)
        done.append(None)
        if len(done) >= launches and not manager.stop_now:
            manager.stop_now = True
            serving.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return result

    manager.committer.commit_exited = committed  # type: ignore[method-assign]
    largest: list[Any] = [0, None]
    if trace:
        tracemalloc.start(8)
        scan = manager.discovery.scan

        def traced_scan(*args: Any, **kwargs: Any) -> Any:
            result = scan(*args, **kwargs)
            # A pass's result still holds what it kept: the moment to see what a pass leaves behind.
            if tracemalloc.get_traced_memory()[0] > largest[0]:
                largest[:] = [tracemalloc.get_traced_memory()[0], tracemalloc.take_snapshot()]
            return result

        manager.discovery.scan = traced_scan  # type: ignore[method-assign]
        summary = manager.summary

        def traced_summary() -> str:
            serving_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            line = summary()
            print(f"traced peak: serving {serving_peak / 2**20:.1f} MiB, closing summary "
                  f"{tracemalloc.get_traced_memory()[1] / 2**20:.1f} MiB", file=sys.stderr)
            return line

        manager.summary = traced_summary  # type: ignore[method-assign]
    manager.run()
    if largest[1] is not None:
        print(f"largest after a pass: {largest[0] / 2**20:.1f} MiB traced, by traceback:", file=sys.stderr)
        for stat in largest[1].statistics("traceback")[:5]:
            print(f"  {stat.size / 2**20:.2f} MiB in {stat.count} blocks, from {stat.traceback.format()[-2:]}",
                  file=sys.stderr)
    # The closing summary walks every active job once, at exit: its peak is reported apart.
    print(serving[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


CASES: dict[str, Callable[[Path, argparse.Namespace], list[tuple[str, str]]]] = {
    "python": lambda root, a: [case_throughput(root, "python", a.count, a.rounds)],
    "bash": lambda root, a: [case_throughput(root, "bash", a.count, a.rounds)],
    "raw": lambda root, a: [case_throughput(root, "raw", a.count, a.rounds)],
    "fanout": lambda root, a: [case_fanout(root, a.children)],
    "history": lambda root, a: [case_history(root, 50, a.history, a.rounds)],
    "rss": lambda root, a: [case_rss(root, 0, trace=a.trace), case_rss(root, a.ready, trace=a.trace),
                            case_rss(root, a.ready, per_placement=a.per_placement, trace=a.trace)],
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", choices=[[], *sorted(CASES)], default=[], metavar="CASE",
                        help=f"any of {', '.join(sorted(CASES))} (default: all)")
    parser.add_argument("--count", type=int, default=100, help="jobs per throughput round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--children", type=int, default=2000, help="children of the fan-out")
    parser.add_argument("--history", type=int, default=50000, help="terminal jobs beside the 50 ready ones")
    parser.add_argument("--ready", type=int, default=100000, help="ready jobs of the second and third RSS figures")
    parser.add_argument("--per-placement", type=int, default=1000,
                        help="ready jobs per placement directory of the third RSS figure (the second has one)")
    parser.add_argument("--trace", action="store_true",
                        help="rss: run each manager under tracemalloc and print its largest allocations to stderr")
    args = parser.parse_args(argv)
    compile_package()
    print("| benchmark | min / median / max |\n| --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for case in args.cases or sorted(CASES):
            for name, value in CASES[case](Path(scratch), args):
                print(f"| {name} | {value} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["_rss"]:
        _rss_child(sys.argv[2], int(sys.argv[3]), trace=sys.argv[4:5] == ["trace"])
    else:
        main()
