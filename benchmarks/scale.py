"""Throughput and latency against workspace size, each beside its floor: a PNG, a CSV and a Markdown table.

``PYTHONPATH=src .venv/bin/python benchmarks/run.py --profile scale [--sizes 0,1000,10000,100000]
[--out docs/benchmarks-scale.png]`` (or ``benchmarks/scale.py`` with the same flags). For each
size N, one fresh durable workspace is given N finished jobs (bulk-submitted at ``bench/NNN``,
1,000 per placement, then every marker renamed into ``succeeded/``: :func:`million.to_history`),
and then, in this order:

1. ``workspace status`` and ``job list --kind ready`` as whole processes (``--runs`` after a
   warm-up, :func:`inspection.measure`), with ``--jobs`` raw-protocol jobs ready beside the
   history, and ``python -c pass`` as their floor;
2. a manager in this process, 2 workers, running those ready jobs until idle
   (:func:`e2e.measured_run`: jobs/s and CPU per job), beside the floor of as many bare
   ``bash -c 'mkdir; printf >; mv'`` processes 2 at a time (:func:`e2e.floor`);
3. ``Workspace.submit_many`` of ``--batch`` prepared payloads, durable (the preparation
   is not timed), beside the floor of ``mkdir`` + one write + ``rename`` per payload
   (:func:`bulk_submit.floor`).

The plot has throughput (left, jobs/s) and latency (right, seconds) against N on a
symmetric-log x axis (N = 0 included); the CSV beside it (same name, ``.csv``) holds the
raw numbers. Default sizes finish in about three minutes; 100,000 adds about five. Figures
are wall clock on whatever machine runs it: docs/benchmarks.md records them, tests never
assert them.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import bulk_submit
from inspection import HTTK, PY, environment, log, measure, submit
from million import to_history

import e2e
from httk.workflow import Workspace

#: The CSV's columns, in order: N, then each measured figure.
COLUMNS = (
    "existing_jobs", "submit_many_jobs_per_s", "submit_floor_jobs_per_s", "manager_jobs_per_s",
    "manager_floor_jobs_per_s", "manager_cpu_ms_per_job", "runner_cpu_ms_per_job", "status_wall_s",
    "status_cpu_s", "list_ready_wall_s", "list_ready_cpu_s", "python_pass_wall_s",
)


def at_size(scratch: Path, size: int, *, batch: int, jobs: int, runs: int) -> dict[str, float]:
    """Every figure of one workspace holding ``size`` finished jobs (see the module docstring)."""
    root = scratch / f"n{size}"
    ws = Workspace.init(root / "ws", durable=True)
    started = time.perf_counter()
    if size:
        submit(root / "history", size, durable=False, workspace=ws)
        to_history(ws)
    log(f"{size:,} finished jobs in {time.perf_counter() - started:.0f} s")
    row: dict[str, float] = {"existing_jobs": size}
    ws.submit_many([e2e.make_payload(root, "raw")] * jobs, "run/a")
    e2e.register(ws)
    env, path = environment(scratch), str(ws.handle.root)
    for name, command in (("status", [HTTK, "workflow", "workspace", "status", path]),
                          ("list_ready", [HTTK, "workflow", "job", "list", path, "--kind", "ready"]),
                          ("python_pass", [PY, "-c", "pass"])):
        found = measure(command, env, runs)
        row[f"{name}_wall_s"] = statistics.median(found["wall"])
        row[f"{name}_cpu_s"] = statistics.median(found["cpu"])
    rate, manager_cpu, runner_cpu = e2e.measured_run(ws, jobs)
    row.update(manager_jobs_per_s=rate, manager_cpu_ms_per_job=manager_cpu, runner_cpu_ms_per_job=runner_cpu,
               manager_floor_jobs_per_s=jobs / e2e.floor(e2e.FLOORS["raw"][1], jobs))
    spent: list[float] = []
    submit(root / "batch", batch, durable=True, prefix="batch", workspace=ws,
           progress=lambda _done, _prepare, submitting: spent.append(submitting))
    row["submit_many_jobs_per_s"] = batch / spent[-1]
    data = bulk_submit.specs(1, "0" * 64)[0].to_bytes()
    row["submit_floor_jobs_per_s"] = bulk_submit.floor(root, batch, data)[0]  # (jobs/s, CPU ms per job)
    log(f"{size:,}: " + ", ".join(f"{key} {value:.3g}" for key, value in row.items()))
    shutil.rmtree(root)
    return row


def write_csv(path: Path, found: Sequence[dict[str, float]]) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in found:
            writer.writerow({key: f"{row[key]:.6g}" for key in COLUMNS})


def plot(path: Path, found: Sequence[dict[str, float]], *, batch: int, jobs: int, note: str) -> None:
    """The two panels: throughput beside its floors, latency beside ``python -c pass``."""
    import matplotlib

    matplotlib.use("Agg")  # no display; the PNG is all that is drawn
    from matplotlib.figure import Figure

    sizes = [row["existing_jobs"] for row in found]
    figure = Figure(figsize=(10, 5), dpi=100, layout="constrained")
    rate, latency = figure.subplots(1, 2)

    def line(axes, key: str, label: str, color: str, style: str = "-") -> None:
        axes.plot(sizes, [row[key] for row in found], style, color=color, marker="o", markersize=4, label=label)

    line(rate, "submit_many_jobs_per_s", f"submit_many, {batch:,} jobs, durable", "C0")
    line(rate, "submit_floor_jobs_per_s", "its floor: mkdir + write + rename", "C0", "--")
    line(rate, "manager_jobs_per_s", f"manager, {jobs} raw jobs, 2 workers", "C1")
    line(rate, "manager_floor_jobs_per_s", "its floor: bare bash processes, 2 at a time", "C1", "--")
    rate.set_yscale("log")
    rate.set_ylabel("jobs/s")
    rate.set_title("throughput")
    line(latency, "status_wall_s", "workspace status (wall)", "C2")
    line(latency, "status_cpu_s", "workspace status (CPU)", "C2", ":")
    line(latency, "list_ready_wall_s", f"job list --kind ready, {jobs} ready (wall)", "C3")
    line(latency, "list_ready_cpu_s", "job list --kind ready (CPU)", "C3", ":")
    line(latency, "python_pass_wall_s", "floor: python -c pass", "0.5", "--")
    latency.set_ylabel("seconds (median)")
    latency.set_ylim(bottom=0)
    latency.set_title("command latency")
    nonzero = [size for size in sizes if size] or [1000]
    for axes in (rate, latency):
        axes.set_xscale("symlog", linthresh=min(nonzero))
        axes.set_xticks(sizes, labels=[f"{int(size):,}" for size in sizes])
        axes.minorticks_off()
        axes.set_xlim(-0.2 * min(nonzero), max(sizes) * 1.3)
        axes.set_xlabel("finished jobs already in the workspace")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    figure.suptitle(f"httk-workflow at workspace size ({note})", fontsize=9)
    figure.savefig(path, format="png")


def rows(found: Sequence[dict[str, float]]) -> list[tuple[str, str]]:
    """The Markdown rows ``run.py`` prints: one per size."""
    return [(f"{int(row['existing_jobs']):,} finished jobs",
             f"submit_many {row['submit_many_jobs_per_s']:.0f} jobs/s (floor {row['submit_floor_jobs_per_s']:.0f}); "
             f"manager {row['manager_jobs_per_s']:.1f} jobs/s (floor {row['manager_floor_jobs_per_s']:.1f}), "
             f"CPU {row['manager_cpu_ms_per_job']:.1f} ms/job; status {row['status_wall_s']:.3f} s "
             f"({row['status_cpu_s']:.3f} CPU); list --kind ready {row['list_ready_wall_s']:.3f} s "
             f"({row['list_ready_cpu_s']:.3f} CPU); python -c pass {row['python_pass_wall_s']:.3f} s")
            for row in found]


def profile(scratch: Path, sizes: Sequence[int], out: Path, *, batch: int = 1000, jobs: int = 100,
            runs: int = 5) -> list[tuple[str, str]]:
    """Measure every size, write ``out`` (PNG) and its CSV beside it; the Markdown rows."""
    e2e.compile_package()
    load = os.getloadavg()[0]
    found = [at_size(scratch, size, batch=batch, jobs=jobs, runs=runs) for size in sizes]
    load = max(load, os.getloadavg()[0])
    write_csv(out.with_suffix(".csv"), found)
    plot(out, found, batch=batch, jobs=jobs,
         note=f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
              f"load average up to {load:.1f}; benchmarks/run.py --profile scale")
    log(f"wrote {out} and {out.with_suffix('.csv')}")
    return rows(found)


def arguments(parser: argparse.ArgumentParser) -> None:
    """The profile's flags, shared with ``run.py``."""
    parser.add_argument("--sizes", default="0,1000,10000",
                        help="finished jobs already in each workspace, comma-separated (default 0,1000,10000)")
    parser.add_argument("--out", default="docs/benchmarks-scale.png", help="the PNG (its CSV goes beside it)")
    parser.add_argument("--batch", type=int, default=1000, help="payloads of the timed submit_many (default 1000)")
    parser.add_argument("--manager-jobs", type=int, default=100, help="jobs the timed manager runs (default 100)")
    parser.add_argument("--runs", type=int, default=5, help="counted runs of each command (default 5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(parser)
    parser.add_argument("--scratch", help="directory for the workspaces (default: the system temp directory)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="httk-scale-", dir=args.scratch))
    try:
        found = profile(scratch, [int(size) for size in args.sizes.split(",") if size], Path(args.out),
                        batch=args.batch, jobs=args.manager_jobs, runs=args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("| workspace | result |\n| --- | --- |")
    for name, value in found:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
