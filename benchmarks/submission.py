"""What one submission costs, with the id buckets of ``.httk-workflow/ids/`` cold (new) and warm (existing).

``make bench`` submits into a fresh workspace, where nearly every random job id
opens a new bucket directory (one more ``mkdir`` and, when durable, one more
directory fsync); a workspace that has run for a while has all 256 buckets, so
the warm figure is the steady state. ``PYTHONPATH=<tree>/src .venv/bin/python
benchmarks/submission.py`` measures another copy of the source (the buckets are
created either way, so a tree without reservations measures the same workload).
Prints one median per case, in ms per job, over ``--rounds`` fresh workspaces.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from run import payload

from httk.workflow.workspace import Workspace


def per_job(root: Path, count: int, *, durable: bool, warm: bool) -> float:
    target = Path(tempfile.mkdtemp(dir=root))
    workspace = Workspace.init(target / "ws", durable=durable)
    if warm:
        for bucket in range(256):
            (target / "ws" / ".httk-workflow" / "ids" / f"{bucket:02x}").mkdir(parents=True)
        os.sync()
    source = payload(target)
    start = time.perf_counter()
    for _ in range(count):
        workspace.submit(source, "bench/a")
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200, help="submissions per workspace")
    parser.add_argument("--rounds", type=int, default=3, help="fresh workspaces per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for warm in (False, True):
            for durable in (True, False):
                samples = [per_job(Path(scratch), args.count, durable=durable, warm=warm) for _ in range(args.rounds)]
                label = f"submit ({'durable' if durable else 'no-durable'}, {'warm' if warm else 'cold'} id buckets)"
                print(f"| {label} | {statistics.median(samples) * 1e3:.2f} ms/job |")


if __name__ == "__main__":
    main()
