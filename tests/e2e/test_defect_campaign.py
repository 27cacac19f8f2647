"""The spec's complete defect-campaign runner, driven to completion by the real manager."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from e2e_support import EXAMPLE

from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.operations import inspection
from httk.workflow.workspace import Workspace


def submit_campaign(path: Path) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLE / "submit.py"), str(path)], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def run_manager(path: Path, workers: int = 2) -> int:
    workspace = Workspace(path)
    return build_manager(default_container(), workspace.handle, ManagerConfig(workers=workers)).run()


def test_campaign_succeeds_and_aggregates(tmp_path, campaign_env, capsys):
    key = submit_campaign(tmp_path / "ws")
    assert run_manager(tmp_path / "ws") == 0
    out = capsys.readouterr().out
    assert "5 succeeded, 0 failed" in out
    workspace = Workspace(tmp_path / "ws")
    marker = inspection.resolve_job(workspace.handle, key)
    report = inspection.show_job(workspace.handle, marker)
    assert report["kind"] == "succeeded"
    workdir = tmp_path / "ws" / ".httk-workflow" / "workdirs" / marker.job_id
    campaign = json.loads((workdir / "campaign.json").read_text())
    assert sorted(campaign) == ["site-0", "site-1", "site-2", "site-3"]
    assert campaign["site-2"]["energy_ev"] == -10.5
    state = json.loads((tmp_path / "ws" / "project" / "si-vacancies" / key / ".httk-job" / "state.json").read_text())
    assert state == {"sites": 4}


def test_campaign_triage_branch_when_a_relax_fails(tmp_path, campaign_env, capsys):
    campaign_env.setenv("DEMO_DIVERGE", "1,3")
    key = submit_campaign(tmp_path / "ws")
    assert run_manager(tmp_path / "ws") == 0
    assert "2 succeeded, 3 failed" in capsys.readouterr().out
    workspace = Workspace(tmp_path / "ws")
    parent = inspection.show_job(workspace.handle, inspection.resolve_job(workspace.handle, key))
    assert parent["kind"] == "failed"
    assert parent["failure"]["code"] == "campaign_incomplete"
    assert parent["failure"]["details"] == {"failed": ["site-1", "site-3"]}
    children = inspection.list_jobs(workspace.handle, kinds=["failed"])
    handle = workspace.handle
    codes = sorted(
        inspection.show_job(handle, inspection.resolve_job(handle, job["job_key"]))["failure"]["code"]
        for job in children
    )
    assert codes == ["campaign_incomplete", "relax_diverged", "relax_diverged"]
    log = inspection.job_log(workspace.handle, inspection.resolve_job(workspace.handle, key))
    events = [entry.get("event") for entry in log]
    assert "commit_wait" in events and "join_satisfied" in events and events[-1] == "commit_fail"


def test_collect_streams_results_of_the_campaign(tmp_path, campaign_env):
    key = submit_campaign(tmp_path / "ws")
    assert run_manager(tmp_path / "ws") == 0
    out = subprocess.run([str(Path(sys.executable).with_name("httk")), "workflow", "collect", str(tmp_path / "ws")],
                         capture_output=True, text=True, check=True).stdout
    jobs = [json.loads(line) for line in out.splitlines()]
    assert len(jobs) == 5 and {job["kind"] for job in jobs} == {"succeeded"}
    parent = next(job for job in jobs if job["job_key"] == key)
    assert parent["state"] == {"sites": 4} and parent["step"] == "aggregate"
    assert json.loads((Path(parent["workdir"]) / "campaign.json").read_text())["site-0"]["energy_ev"] == -10.0
    raw = subprocess.run([str(Path(sys.executable).with_name("httk")), "workflow", "collect", str(tmp_path / "ws"),
                          "--raw"], capture_output=True, text=True, check=True).stdout
    record = json.loads(raw.splitlines()[0])
    assert record["frame"]["format"] == "httk-workflow-state-frame" and record["job"]["format"] == "httk-workflow-job"
