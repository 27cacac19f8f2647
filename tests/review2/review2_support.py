"""Shared helpers of the review2 tests: the SDK attempt harness and a Bash runner launcher."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "shell" / "httk-workflow.sh"


def _load_sdk_harness() -> Any:
    spec = importlib.util.spec_from_file_location("httk_review2_sdk_harness", ROOT / "tests" / "sdk" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _load_sdk_harness()


def bash_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HTTK_WORKFLOW_SHELL_LIB": str(LIB), "HTTK_WORKFLOW_PYTHON": sys.executable, **extra}


def run_bash_runner(directory: Path, body: str, *, steps: str = "start") -> subprocess.CompletedProcess[str]:
    """Write a Bash runner with ``body`` (its step functions) and run it in the current attempt."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"runner-{len(list(directory.iterdir()))}.sh"
    script.write_text(
        f'source "$HTTK_WORKFLOW_SHELL_LIB"\nhttk_workflow_runner demo {steps}\n{body}\nhttk_workflow_main "$@"\n',
        encoding="utf-8",
    )
    return subprocess.run(
        ["bash", str(script)],
        env=bash_env(),
        cwd=os.environ["HTTK_WORKFLOW_WORKDIR"],
        capture_output=True,
        text=True,
        timeout=30,
    )


def bridge(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One ``python -m httk.workflow.shell_bridge`` call, as a Bash function makes it."""
    return subprocess.run(
        [sys.executable, "-m", "httk.workflow.shell_bridge", *args],
        env=env if env is not None else bash_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
