"""Start-up cost of the runner side: the SDK import, a trivial Python attempt, Bash bridge calls.

Run with ``python benchmarks/runner_start.py [--runs N]``. Every figure is the
median wall time of N fresh interpreter starts, measured from outside like a
manager or a Bash runner sees it; the package is byte-compiled first, so no run
pays for compiling (``PYTHONDONTWRITEBYTECODE`` would otherwise make every run
compile what changed). The results go to docs/benchmarks.md, never into unit tests.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httk.workflow
from httk.workflow import codec
from httk.workflow.protocol import JobSpec, prepare_job_payload

RUNNER = (
    "from httk.workflow import Runner\n"
    "run = Runner('bench')\n"
    "@run.step\n"
    "def start(a):\n"
    "    a.succeed()\n"
    "raise SystemExit(run.main())\n"
)


class Attempt:
    """A payload, workdir and runner laid out like a manager does; :meth:`fresh` makes a new control dir."""

    def __init__(self, root: Path, durable: bool) -> None:
        self.root, self.durable = root, durable
        self.job_id = str(uuid.uuid4())
        self.payload = root / "ws" / "bench" / self.job_id
        prepare_job_payload(self.payload, JobSpec(name="b", workflow="bench", runner_path="run.py"), durable=False)
        (self.payload / "run.py").write_text(RUNNER)
        self.workdir = root / "ws" / ".httk-workflow" / "workdirs" / self.job_id
        self.workdir.mkdir(parents=True)

    def fresh(self) -> dict[str, str]:
        """A new control directory with its context.json; the environment a runner gets."""
        attempt_id = str(uuid.uuid4())
        control = self.root / "ws" / ".httk-workflow" / "attempts" / self.job_id / attempt_id
        control.mkdir(parents=True)
        context = {
            "format": "httk-workflow-attempt-context", "format_version": 1, "job_id": self.job_id,
            "attempt_id": attempt_id, "step": "start", "durable": self.durable, "placement": "bench",
            "children": [],
        }
        (control / "context.json").write_bytes(codec.encode(context))
        return {
            **os.environ,
            "HTTK_WORKFLOW_CONTEXT": str(control / "context.json"),
            "HTTK_WORKFLOW_CONTROL_DIR": str(control),
            "HTTK_WORKFLOW_JOB_DIR": str(self.payload),
            "HTTK_WORKFLOW_WORKDIR": str(self.workdir),
            "HTTK_WORKFLOW_WORKSPACE_DIR": str(self.root / "ws"),
            "HTTK_WORKFLOW_STEP": "start",
            "HTTK_WORKFLOW_DURABLE": "1" if self.durable else "0",
        }


def wall(argv: list[str], runs: int, env: object = None, cwd: Path | None = None) -> float:
    """Median seconds of ``runs`` executions of ``argv``; ``env`` may be a callable making each environment."""
    samples = []
    for _ in range(runs):
        environment = env() if callable(env) else env
        start = time.perf_counter()
        subprocess.run(argv, env=environment, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def import_time(module: str, runs: int) -> float:
    """Median cumulative ``-X importtime`` microseconds of ``module``."""
    samples = []
    for _ in range(runs):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True
        )
        line = [row for row in result.stderr.splitlines() if row.rstrip().endswith(f"| {module}")][-1]
        samples.append(int(re.split(r"\s*\|\s*", line.split(":", 1)[1].strip())[1]))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    compileall.compile_dir(os.path.dirname(httk.workflow.__file__), quiet=1)
    python = sys.executable
    bridge = [python, "-m", "httk.workflow.shell_bridge"]
    sdk = "httk.workflow.sdk"
    rows = [
        (f"`import {sdk}` (-X importtime, cumulative)", f"{import_time(sdk, runs) / 1e3:.1f} ms"),
        (f"`python -c 'import {sdk}'`", f"{wall([python, '-c', f'import {sdk}'], runs) * 1e3:.0f} ms"),
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for durable in (True, False):
            attempt = Attempt(Path(scratch) / f"d{int(durable)}", durable)
            label = "durable" if durable else "no-durable"
            seconds = wall([python, str(attempt.payload / "run.py")], runs, attempt.fresh, attempt.workdir)
            rows.append((f"trivial Python runner attempt, start to exit ({label})", f"{seconds * 1e3:.0f} ms"))
        attempt = Attempt(Path(scratch) / "bridge", True)
        env = attempt.fresh()
        calls = [
            ("bridge `calc 1+2`", ["calc", "1+2"]),
            ("bridge `state_set k 1` (durable)", ["state_set", "k", "1"]),
            ("bridge `run -- true` (writes process-report.json)", ["run", "--", "true"]),
        ]
        for name, args in calls:
            rows.append((name, f"{wall([*bridge, *args], runs, env, attempt.workdir) * 1e3:.0f} ms"))
    print("| runner-side start-up | median |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
