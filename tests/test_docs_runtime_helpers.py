"""docs/runtime_helpers.md cannot rot: its code runs.

The page's complete defect-campaign runner is published and driven to an end by
a real manager, through the page's own publish-and-submit block, with the
stand-in ``characterize`` and ``relax`` programs of examples/defects/bin on
PATH. Every other ``python`` block is compiled, the ``--describe`` output the
page shows is compared with what the runner prints, and every public member of
the authoring surface must be named on the page.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from httk.workflow import runtime_utils
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.operations import inspection
from httk.workflow.runtime import Children, ChildResult, JobState
from httk.workflow.sdk import Attempt, Runner
from httk.workflow.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "runtime_helpers.md"
EXAMPLE = ROOT / "examples" / "defects"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(PAGE.read_text(encoding="utf-8")) if lang == language]


def the_block(language: str, marker: str) -> str:
    found = [body for body in blocks(language) if marker in body]
    assert len(found) == 1, f"expected exactly one {language} block containing {marker!r}, found {len(found)}"
    return found[0]


def complete_runner() -> str:
    return the_block("python", 'run = Runner("defects")')


def submission() -> str:
    return the_block("python", "workspace.submit(")


def test_the_page_has_its_blocks() -> None:
    assert len(blocks("python")) >= 15
    assert complete_runner().startswith("#!/usr/bin/env python3\n")


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_every_python_block_compiles(index: int) -> None:
    compile(blocks("python")[index], f"{PAGE.name} python block {index}", "exec")


def test_the_complete_runner_is_the_shipped_example() -> None:
    assert complete_runner() == (EXAMPLE / "defects.py").read_text(encoding="utf-8"), (
        "docs/runtime_helpers.md and examples/defects/defects.py must show the same runner"
    )


def test_the_describe_output_shown_is_what_the_runner_prints(tmp_path: Path) -> None:
    console = the_block("console", "--describe")
    lines = console.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("$ python defects.py --describe"))
    shown = json.loads(lines[index + 1])
    runner = tmp_path / "defects.py"
    runner.write_text(complete_runner(), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("HTTK_WORKFLOW_")}
    printed = subprocess.run(
        [sys.executable, str(runner), "--describe"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(printed) == shown
    assert printed.strip() == lines[index + 1].strip()  # canonical JSON, byte for byte


def _public(cls: type) -> list[str]:
    return sorted(name for name in vars(cls) if not name.startswith("_"))


def test_every_member_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    missing: list[str] = []
    for name in _public(Attempt):
        if f"a.{name}" not in page and f"Attempt.{name}" not in page:
            missing.append(f"Attempt.{name}")
    for name in _public(Runner):
        if f"run.{name}" not in page and f"Runner.{name}" not in page:
            missing.append(f"Runner.{name}")
    for name in ("read", "set", "delete", "merge", "get"):
        assert hasattr(JobState, name)
        if f"a.state.{name}" not in page:
            missing.append(f"JobState.{name}")
    for name in ("succeeded", "failed", "labels", "get"):
        assert hasattr(Children, name)
        if f"a.children.{name}" not in page:
            missing.append(f"Children.{name}")
    for name in ("label", "job_id", "job_key", "kind", "failure", "payload", "workdir", "data", "succeeded"):
        assert name in ChildResult.__attrs_attrs__.__dict__ or hasattr(ChildResult, name)
        if f"`{name}`" not in page and f".{name}" not in page:
            missing.append(f"ChildResult.{name}")
    for name in ("evaluate_expression", "render_template", "compress_files", "decompress_files"):
        assert hasattr(runtime_utils, name)
        if f"runtime_utils.{name}" not in page:
            missing.append(f"runtime_utils.{name}")
    for name in (
        "ProcessSupervisor",
        "ChildSpec",
        "RunnerRef.inherit",
        "RunnerRef.workspace",
        "RunnerRef.installed",
        "prepare_job_payload",
        "JobSpec",
        "Failure",
    ):
        if name not in page:
            missing.append(name)
    assert missing == [], f"not named on {PAGE.name}: {', '.join(missing)}"


def _campaign_job(workspace: Workspace) -> str:
    parents = [job for job in inspection.list_jobs(workspace.handle) if job["tag"] is None]
    assert len(parents) == 1, parents
    return str(parents[0]["job_id"])


@pytest.mark.parametrize("diverge", ["", "1,3"], ids=["all-relax", "triage"])
def test_the_complete_runner_runs_through_the_manager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, diverge: str
) -> None:
    for name in list(os.environ):
        if name.startswith("HTTK_WORKFLOW_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{EXAMPLE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DEMO_DIVERGE", diverge)
    monkeypatch.delenv("DEMO_SITES", raising=False)
    monkeypatch.chdir(tmp_path)
    Workspace.init(tmp_path / "workflow-workspace", durable=False)
    (tmp_path / "defects.py").write_text(complete_runner(), encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": "docs_submission"}
    exec(compile(submission(), f"{PAGE.name} submission block", "exec"), namespace)  # the page's own code

    workspace = Workspace(tmp_path / "workflow-workspace")
    manager = build_manager(
        default_container(), workspace.handle, ManagerConfig(workers=4, poll_interval=0.05, kill_grace=2.0)
    )
    manager.out = lambda _line: None
    assert manager.run() == 0

    job_id = _campaign_job(workspace)
    marker = inspection.resolve_job(workspace.handle, job_id)
    report = inspection.show_job(workspace.handle, marker)
    workdir = Path(report["paths"]["workdir"])
    assert report["runner_steps"] == ["aggregate", "characterize", "relax", "triage"]
    assert marker.placement == "project/si-vacancies"
    state = json.loads((Path(report["paths"]["payload"]) / ".httk-job" / "state.json").read_text(encoding="utf-8"))
    campaign = json.loads((workdir / "campaign.json").read_text(encoding="utf-8"))
    children = [job for job in inspection.list_jobs(workspace.handle) if job["tag"] is not None]
    assert sorted(job["tag"] for job in children) == ["site-0", "site-1", "site-2", "site-3"]
    if not diverge:
        assert report["kind"] == "succeeded", report
        assert state == {"sites": 4}
        assert sorted(campaign) == ["site-0", "site-1", "site-2", "site-3"]
        assert campaign["site-2"] == {"site": 2, "energy_ev": -10.5}
        return
    assert report["kind"] == "failed" and report["step"] == "triage"
    assert report["failure"] == {
        "code": "campaign_incomplete",
        "message": "not every site relaxed",
        "details": {"failed": ["site-1", "site-3"]},
        "retryable": False,
    }
    assert state == {"sites": 4, "failed": ["site-1", "site-3"]}
    assert sorted(campaign) == ["site-0", "site-2"]
    events = [json.loads(line) for line in (workdir / ".httk-runner" / "runlog.jsonl").read_text().splitlines()]
    assert [(e["label"], e["message"]) for e in events] == [("triage", "2 of 4 sites did not relax")]
    kinds = {job["tag"]: job["kind"] for job in children}
    assert kinds == {"site-0": "succeeded", "site-1": "failed", "site-2": "succeeded", "site-3": "failed"}
