"""The million-job profile (``run.py --profile million``; never in CI).

One workspace of ``jobs`` (default 1,000,000) trivial jobs on one filesystem:

1. bulk-submitted durably in one pass (``Workspace.submit_specs``, the fastest public path:
   each job.json written straight into the workspace's staging area; 50,000 per call,
   1,000 jobs per placement ``bench/NNN``), timed, with its CPU seconds;
2. ``workspace status`` and ``job list --kind submitted --placement bench/000`` on it
   (whole processes);
3. the jobs are then made history: each marker is renamed from ``state/submitted/`` to
   ``state/succeeded/`` (a fabricated history — no frames — which a manager never
   opens: its scans stream the active kinds only), and ``workspace status`` is timed again;
4. ``probe`` fresh jobs (a runner that publishes ``succeed``) are submitted beside them and
   one manager (``httk workflow run WS --workers 2``, until idle) is timed: the first
   launch after its start (the earliest ``launch`` frame) and its peak RSS (``VmHWM``), against the
   same probe in an empty workspace measured in the same run.

What the layout costs is recorded too: entries (inodes) per job, counted,
the largest directory, the journal segments. The caller removes the scratch directory
(``run.py`` does, after printing the table).
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from inspection import HTTK, PER_PLACEMENT, environment, log, measure, seconds, submit

from httk.workflow import JobSpec, Workspace
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.inspection import job_log

#: Inodes and bytes a job needs, with a margin (payload directory, job.json, marker, reservation).
INODES_PER_JOB = 6
BYTES_PER_JOB = 16 * 1024


def free(path: Path) -> tuple[int, int]:
    """(free inodes, free bytes) of the filesystem holding ``path``."""
    found = os.statvfs(path)
    return found.f_favail, found.f_bavail * found.f_frsize


def check_room(scratch: Path, jobs: int) -> None:
    inodes, space = free(scratch)
    if inodes < jobs * INODES_PER_JOB or space < jobs * BYTES_PER_JOB:
        raise SystemExit(
            f"{scratch}: {inodes:,} free inodes and {space / 2**30:.1f} GiB free; {jobs:,} jobs need about "
            f"{jobs * INODES_PER_JOB:,} and {jobs * BYTES_PER_JOB / 2**30:.1f} GiB: give --jobs fewer or --scratch"
        )


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (its threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def submit_specs(root: Path, count: int, *, runner: str, chunk: int = 50_000,
                 progress: Callable[[int, float], None] | None = None) -> Workspace:
    """``count`` trivial jobs submitted durably to ``root/ws`` by ``Workspace.submit_specs``, ``chunk`` per call.

    Every job pins ``runner`` published to the workspace store; ``progress(done, seconds)``
    is told after each call.
    """
    root.mkdir(parents=True, exist_ok=True)
    workspace = Workspace.init(root / "ws", durable=True)
    (root / "run.sh").write_text(runner)
    sha256 = str(workspace.publish_runner(root / "run.sh", "run.sh")["sha256"])
    started, done = time.perf_counter(), 0
    while done < count:
        size = min(chunk, count - done)
        specs = [JobSpec(name=f"job{index}", workflow="bench", runner_path="run.sh", runner_source="workspace",
                         runner_sha256=sha256, tag="bench") for index in range(done, done + size)]
        workspace.submit_specs(specs, [f"bench/{index // PER_PLACEMENT:03d}" for index in range(done, done + size)])
        done += size
        if progress is not None:
            progress(done, time.perf_counter() - started)
    return workspace


def tree_size(root: Path) -> tuple[int, int, str]:
    """(entries below ``root``, entries of its largest directory, that directory's path)."""
    total, best = 0, (0, str(root))
    for current, dirs, files in os.walk(root):
        total += len(dirs) + len(files)
        best = max(best, (len(dirs) + len(files), current))
    return total, *best


def peak_rss(pid: int, process: subprocess.Popen[bytes]) -> float:
    """The peak resident set (``VmHWM``, MiB) of ``pid``, polled until it exits.

    ``ru_maxrss`` of ``wait4`` is no use here: it keeps the parent's size from before
    the child's ``exec``, and the parent of this profile is large.
    """
    peak = 0
    while process.poll() is None:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.02)
    return peak / 1024


def to_history(workspace: Workspace) -> int:
    """Rename every ``submitted`` marker into ``succeeded`` at the same placement; the number moved."""
    layout = workspace.handle.layout
    source, target = layout.kind_dir(StateKind.SUBMITTED), layout.kind_dir(StateKind.SUCCEEDED)
    moved = 0
    for current, _dirs, files in os.walk(source):
        if not files:
            continue
        destination = os.path.join(target, os.path.relpath(current, source))
        os.makedirs(destination, exist_ok=True)
        for name in files:
            os.rename(os.path.join(current, name), os.path.join(destination, name))
            moved += 1
    return moved


def run_manager(workspace: Workspace, env: dict[str, str], prefix: str = "probe") -> tuple[float, float, float]:
    """(seconds to the first launch, seconds until idle, peak RSS MiB) of one manager with 2 workers."""
    command = [HTTK, "workflow", "run", str(workspace.handle.root), "--workers", "2"]
    started_at, started = time.time(), time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    rss = peak_rss(process.pid, process)
    elapsed = time.perf_counter() - started
    store = workspace.handle.store
    launches = []
    for marker in store.iter_markers(StateKind.SUCCEEDED, prefixes=(prefix,)):
        launches += [entry["created_at"] for entry in job_log(workspace.handle, marker)
                     if entry.get("event") == Event.LAUNCH.value]
    first = min(launches) - started_at if launches else float("nan")
    return first, elapsed, rss


def probe(root: Path, workspace: Workspace, jobs: int, runner: str, env: dict[str, str], prefix: str = "probe"
          ) -> tuple[float, float, float]:
    """:func:`run_manager` on ``jobs`` fresh jobs submitted at ``prefix/000``."""
    submit(root / prefix, jobs, durable=True, runner=runner, prefix=prefix, workspace=workspace)
    return run_manager(workspace, env, prefix)


def profile(scratch: Path, jobs: int, probe_jobs: int, runner: str, runs: int = 3) -> list[tuple[str, str]]:
    """The rows of the million-job profile (``jobs`` jobs); see the module docstring."""
    check_room(scratch, jobs)
    env = environment(scratch)
    rows = Rows()
    _inodes_before, bytes_before = free(scratch)
    root = scratch / "million"
    root.mkdir()

    def progress(done: int, elapsed: float) -> None:
        log(f"{done:,} jobs: submit_specs {elapsed:.0f} s")

    started, cpu = time.perf_counter(), cpu_seconds()
    workspace = submit_specs(root, jobs, runner=runner, progress=progress)
    total, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    _inodes_after, bytes_after = free(scratch)
    rows.append((f"{jobs:,} jobs bulk-submitted in one pass, durable (submit_specs, 1 call per 50,000)",
                 f"{total:.0f} s, {jobs / total:.0f} jobs/s; CPU {1000 * cpu / jobs:.2f} ms per job"))
    entries, largest, where = tree_size(Path(workspace.handle.root))
    # Counted, not taken from statvfs: other work on a shared filesystem moves its free counts.
    rows.append(("entries (inodes) and bytes per submitted job",
                 f"{entries / jobs:.2f} entries, {(bytes_before - bytes_after) / jobs:.0f} B (bytes: statvfs)"))
    rows.append(("largest directory", f"{largest:,} entries ({os.path.relpath(where, workspace.handle.root)})"))
    path = str(workspace.handle.root)
    log("timing status at submission")
    rows.append((f"workspace status, {jobs:,} submitted",
                 seconds(measure([HTTK, "workflow", "workspace", "status", path], env, runs))))
    rows.append((f"job list --kind submitted --placement bench/000 ({PER_PLACEMENT:,} of {jobs:,})",
                 seconds(measure([HTTK, "workflow", "job", "list", path, "--kind", "submitted", "--placement",
                                  "bench/000"], env, runs))))
    started = time.perf_counter()
    moved = to_history(workspace)
    log(f"{moved:,} markers renamed into succeeded/ in {time.perf_counter() - started:.0f} s")
    rows.append((f"workspace status, {jobs:,} terminal",
                 seconds(measure([HTTK, "workflow", "workspace", "status", path], env, runs))))
    log("probe beside the history")
    first, elapsed, rss = probe(root, workspace, probe_jobs, runner, env)
    empty_root = scratch / "empty"
    empty_root.mkdir()
    log("probe in an empty workspace")
    first_0, elapsed_0, rss_0 = probe(empty_root, Workspace.init(empty_root / "ws"), probe_jobs, runner, env)
    rows.append((f"manager, {probe_jobs} trivial jobs, 2 workers, beside 0 terminal",
                 f"first launch {first_0:.2f} s after start, idle after {elapsed_0:.1f} s, peak RSS {rss_0:.0f} MiB"))
    rows.append((f"manager, {probe_jobs} trivial jobs, 2 workers, beside {jobs:,} terminal",
                 f"first launch {first:.2f} s after start, idle after {elapsed:.1f} s, peak RSS {rss:.0f} MiB "
                 f"(first launch {first / first_0:.2f}×, RSS {rss / rss_0:.2f}×)"))
    segments = sum(len(files) for _current, _dirs, files in os.walk(workspace.handle.layout.journal))
    rows.append(("journal segments after the probe", f"{segments}"))
    return rows


class Rows(list[tuple[str, str]]):
    """The profile's rows, each also logged when it is measured (a long run shows them as it goes)."""

    def append(self, row: tuple[str, str]) -> None:
        log(f"| {row[0]} | {row[1]} |")
        super().append(row)
