"""The bulk-submit case: jobs per second of ``submit_many`` against the single-job path and a bare floor.

``PYTHONPATH=src .venv/bin/python benchmarks/bulk_submit.py [--jobs 20000] [--rounds 2]``
prints one Markdown table: for each case the min / median / max jobs per second over
the rounds, the median as a fraction of the floor measured in the same rounds, and the
median CPU milliseconds per job (user + system of this process and its threads, or of
the CLI child: what a shared machine's load does not inflate the way it does wall time).
Every round uses fresh workspaces in a scratch directory (``--scratch``, default the
system temp directory) on one filesystem. The payloads are what a campaign submits:
one directory per job holding only ``job.json``, every job pinning one runner
published to the workspace store.

- **floor**: bare Python, no protocol: ``mkdir`` of a staging directory, one write of
  the job.json bytes, ``rename`` into a placement directory, per job; nothing synced.
- **protocol floor**: bare Python making exactly the names a no-durable batch job
  needs (a reservation written beside its name and renamed, a staging directory with
  its job.json renamed into the placement, an empty marker), with names as long as a
  workspace's; nothing checked or synced. What a batch could reach with no Python of
  its own.
- **prepare_job_payloads**: the payload directories written by the SDK's batch call.
- **submit_many**: ``Workspace.submit_many`` of those payloads at one placement.
- **submit_specs**: ``Workspace.submit_specs`` of the same specs (one pass: no payload
  directories prepared; each job.json written into the workspace's staging area).
- **submit, one at a time**: ``Workspace.submit`` per payload already prepared
  (``--single`` jobs; a rate, so comparable with the batch).
- **prepare + submit, one at a time**: what a user who submits one job at a time does,
  per job: ``prepare_job_payload`` of one spec, then ``Workspace.submit`` of it (the
  issue's "single-job path"; ``--single`` jobs).
- **CLI**: ``httk workflow job submit WS --from-file LIST --placement P`` as a
  subprocess, start-up included.

After the table, the batch / single ratios of the medians, per durability: ``submit_specs``
and ``prepare_job_payloads`` + ``submit_many`` (their times added) against prepare + submit
one at a time, and ``submit_many`` against submit one at a time (both of prepared payloads).

Figures are wall clock on a shared machine; they are recorded in docs/benchmarks.md,
never asserted by tests. The scratch directory is removed only after the last round:
ext4 without a journal (this project's CI VM) skips, when it allocates an inode, every
free one released in the last 60-300 s, so creations just after a large deletion (an
earlier round's clean-up) cost several times more kernel time than the code asks for.
Start a run a few minutes after anything deleted many files on the same filesystem.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from httk.workflow import JobSpec, Workspace, prepare_job_payload, prepare_job_payloads

FLOOR = "floor: mkdir + write + rename per job (no sync)"
PROTOCOL_FLOOR = "protocol floor: a batch job's creations and renames, bare (no sync)"


def specs(count: int, sha256: str) -> list[JobSpec]:
    return [JobSpec(name=f"job{index}", workflow="bench", runner_path="run.sh", runner_source="workspace",
                    runner_sha256=sha256, tag="bench") for index in range(count)]


def workspace(root: Path, durable: bool) -> tuple[Workspace, str]:
    """A fresh workspace with the benchmark's runner published; the runner's digest."""
    found = Workspace.init(root / "ws", durable=durable)
    (root / "run.sh").write_text("#!/bin/sh\n")
    return found, str(found.publish_runner(root / "run.sh", "run.sh")["sha256"])


def _cpu() -> tuple[float, float]:
    """CPU seconds (user, system) of this process and of its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


#: (jobs per second, CPU milliseconds per job: user + system, user alone) of one case.
Sample = tuple[float, float, float]


def rate(count: int, function: Callable[[], object]) -> Sample:
    """The :data:`Sample` of ``function`` doing ``count`` jobs."""
    start, (user, system) = time.perf_counter(), _cpu()
    function()
    elapsed, (user_after, system_after) = time.perf_counter() - start, _cpu()
    user_ms = 1000 * (user_after - user) / count
    return count / elapsed, user_ms + 1000 * (system_after - system) / count, user_ms


def floor(root: Path, count: int, data: bytes) -> Sample:
    staging, placement = root / "floor-tmp", root / "floor" / "bench" / "a"
    staging.mkdir()
    placement.mkdir(parents=True)

    def run() -> None:
        for index in range(count):
            path = f"{staging}/{index}"
            os.mkdir(path)
            fd = os.open(f"{path}/job.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
            os.rename(path, f"{placement}/{index}")

    return rate(count, run)


def protocol_floor(root: Path, count: int, data: bytes) -> Sample:
    """Bare Python making just the names a no-durable batch job needs, nothing synced or checked.

    Per job: an id reservation written to a temp beside it and renamed onto it, a staging
    directory with its job.json renamed into a placement, an empty marker: what the
    protocol asks of the kernel, with names as long as the workspace's.
    """
    ids, tmp = root / "proto" / "ids", root / "proto" / "tmp"
    placement, markers = root / "proto" / "bench" / "d", root / "proto" / "state" / "submitted" / "bench" / "d"
    for directory in (tmp, placement, markers, *(ids / f"{bucket:02x}" for bucket in range(256))):
        directory.mkdir(parents=True)
    names = [str(uuid.uuid4()) for _ in range(count)]
    reservation = b'{"format":"httk-workflow-job-id","format_version":1,"job_id":"' + b"0" * 140 + b'"}\n'
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC

    def run() -> None:
        for name in names:
            bucket = f"{ids}/{name[:2]}"
            fd = os.open(f"{bucket}/.{name}.tmp", flags, 0o666)
            os.write(fd, reservation)
            os.close(fd)
            os.rename(f"{bucket}/.{name}.tmp", f"{bucket}/{name}")
            staging = f"{tmp}/submit-{name}-0123456789ab"
            os.mkdir(staging)
            fd = os.open(f"{staging}/job.json", flags, 0o666)
            os.write(fd, data)
            os.close(fd)
            os.rename(staging, f"{placement}/bench--{name}")
            os.close(os.open(f"{markers}/bench--{name}.p0.g0.init", flags, 0o666))

    return rate(count, run)


def cases(root: Path, jobs: int, single: int, *, durable: bool, cli: bool) -> dict[str, Sample]:
    """Every case of one durability in the fresh directory ``root``."""
    label = "durable" if durable else "no-durable"
    out: dict[str, Sample] = {}
    found, sha256 = workspace(root, durable)
    batch = [(root / "src" / f"p{index}", spec) for index, spec in enumerate(specs(jobs, sha256))]
    out[f"prepare_job_payloads ({label})"] = rate(jobs, lambda: prepare_job_payloads(batch, durable=durable))
    payloads = [str(path) for path, _ in batch]
    out[f"submit_many ({label})"] = rate(jobs, lambda: found.submit_many(payloads, "bench/a"))
    direct = [spec for _path, spec in batch]
    out[f"submit_specs ({label})"] = rate(jobs, lambda: found.submit_specs(direct, "bench/d"))
    out[f"submit, one at a time ({label})"] = rate(
        single, lambda: [found.submit(payload, "bench/b") for payload in payloads[:single]])
    ones = [(root / "one" / f"p{index}", spec) for index, spec in enumerate(direct[:single])]
    out[f"prepare + submit, one at a time ({label})"] = rate(
        single, lambda: [found.submit(prepare_job_payload(path, spec, durable=durable), "bench/e")
                         for path, spec in ones])
    if cli:
        listing = root / "list.txt"
        listing.write_text("".join(f"{payload}\n" for payload in payloads))
        command = [str(Path(sys.executable).parent / "httk"), "workflow", "job", "submit", str(root / "ws"),
                   "--from-file", str(listing), "--placement", "bench/c"]
        env = {**os.environ, "XDG_DATA_HOME": str(root / "xdg-data"), "XDG_CONFIG_HOME": str(root / "xdg-config")}
        out[f"CLI job submit --from-file ({label})"] = rate(
            jobs, lambda: subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env))
    if durable:
        out[FLOOR] = floor(root, jobs, (Path(payloads[0]) / "job.json").read_bytes())
    else:
        out[PROTOCOL_FLOOR] = protocol_floor(root, jobs, (Path(payloads[0]) / "job.json").read_bytes())
    return out


def one_round(scratch: Path, jobs: int, single: int, cli: bool) -> dict[str, Sample]:
    """Every case of both durabilities, in fresh directories below ``scratch`` (left for the caller to remove)."""
    out: dict[str, Sample] = {}
    for durable in (True, False):
        out.update(cases(Path(tempfile.mkdtemp(dir=scratch)), jobs, single, durable=durable, cli=cli))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per batch (default 20000)")
    parser.add_argument("--single", type=int, default=1000, help="jobs submitted one at a time (default 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="fresh workspaces per case (default 2)")
    parser.add_argument("--no-cli", dest="cli", action="store_false", help="skip the command-line case")
    parser.add_argument("--scratch", help="directory for the workspaces (default: the system temp directory)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="httk-bulk-", dir=args.scratch))
    try:
        rounds = [one_round(scratch, args.jobs, args.single, args.cli) for _ in range(args.rounds)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    floor_median = statistics.median(found[FLOOR][0] for found in rounds)
    print(f"{args.jobs} jobs per batch, {args.single} one at a time, {args.rounds} rounds; jobs/s\n")
    print("| case | min | median | max | median / floor | CPU ms/job (median) | of it user |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for case in rounds[0]:
        samples = [found[case][0] for found in rounds]
        median = statistics.median(samples)
        cpu, user = (statistics.median(found[case][index] for found in rounds) for index in (1, 2))
        print(f"| {case} | {min(samples):.0f} | {median:.0f} | {max(samples):.0f} | {median / floor_median:.2f} "
              f"| {cpu:.3f} | {user:.3f} |")
    print()
    for line in ratios({case: statistics.median(found[case][0] for found in rounds) for case in rounds[0]}):
        print(line)


def ratios(medians: dict[str, float]) -> list[str]:
    """The batch / single ratios of the median rates, one line per durability."""
    lines = []
    for label in ("durable", "no-durable"):
        def median(case: str, label: str = label) -> float:
            return medians[f"{case} ({label})"]

        one, submit_only = median("prepare + submit, one at a time"), median("submit, one at a time")
        # Preparing then submitting a batch: the two calls' times added, as jobs per second of both.
        both = 1 / (1 / median("prepare_job_payloads") + 1 / median("submit_many"))
        lines.append(
            f"- {label}: against prepare + submit one at a time ({one:.0f} jobs/s): submit_specs "
            f"{median('submit_specs') / one:.1f}x, prepare_job_payloads + submit_many {both / one:.1f}x "
            f"({both:.0f} jobs/s); against submit one at a time ({submit_only:.0f} jobs/s): submit_many "
            f"{median('submit_many') / submit_only:.1f}x"
        )
    return lines


if __name__ == "__main__":
    main()
