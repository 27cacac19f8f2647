"""Helpers of the Bash SDK tests: the library, its environment, runner scripts, bridge calls.

Imported by name (``from shell_support import ...``); the ``runners`` fixture of
tests/shell/conftest.py builds a :class:`Runners` per test. Attempts come from the
shared ``make_attempt`` fixture (tests/attempt_support.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "shell" / "httk-workflow.sh"
#: Every runner, script and bridge call of these tests is stopped after this long.
TIMEOUT = 60


def bash_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HTTK_WORKFLOW_SHELL_LIB": str(LIB), "HTTK_WORKFLOW_PYTHON": sys.executable, **extra}


class Runners:
    """Writes runner scripts into a scratch directory and runs them in the current attempt."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0

    def bash(
        self, body: str, *, steps: str = "start", args: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A Bash runner whose step functions are ``body``, started as the manager starts one."""
        self.count += 1
        script = self.directory / f"runner-{self.count}.sh"
        script.write_text(
            f'source "$HTTK_WORKFLOW_SHELL_LIB"\nhttk_workflow_runner demo {steps}\n{body}\nhttk_workflow_main "$@"\n',
            encoding="utf-8",
        )
        cwd = os.environ.get("HTTK_WORKFLOW_WORKDIR") or self.directory
        return subprocess.run(
            ["bash", str(script), *args], env=bash_env(**(env or {})), cwd=cwd, capture_output=True, text=True,
            timeout=TIMEOUT,
        )

    def python(self, body: str, *, steps: str = "start") -> subprocess.CompletedProcess[str]:
        """The same runner in Python: ``body`` defines the handlers on ``run``."""
        self.count += 1
        script = self.directory / f"runner-{self.count}.py"
        script.write_text(
            "from httk.workflow import ChildSpec, Runner\n"
            "run = Runner('demo')\n"
            f"{body}\n"
            "raise SystemExit(run.main())\n",
            encoding="utf-8",
        )
        return subprocess.run(
            [sys.executable, str(script)],
            env=dict(os.environ),
            cwd=os.environ["HTTK_WORKFLOW_WORKDIR"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


def bridge(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One ``python -m httk.workflow.shell_bridge`` call, as a Bash function makes it."""
    return subprocess.run(
        [sys.executable, "-m", "httk.workflow.shell_bridge", *args],
        env=env if env is not None else bash_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
