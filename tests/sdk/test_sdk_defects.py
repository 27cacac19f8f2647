"""The spec's complete defect-campaign runner, step by step, plus describing runners as subprocesses."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from httk.workflow import codec
from httk.workflow.protocol import parse_job_bytes

ROOT = Path(__file__).resolve().parents[2]
DEFECTS = ROOT / "examples" / "defects" / "defects.py"
DESCRIPTION = {
    "format": "httk-workflow-runner-description",
    "format_version": 1,
    "workflow": "defects",
    "steps": ["aggregate", "characterize", "relax", "triage"],
}


def clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("HTTK_WORKFLOW_")}


@pytest.mark.parametrize(("args", "extra"), [(["--describe"], {}), ([], {"HTTK_WORKFLOW_DESCRIBE": "1"})])
def test_describe_as_a_subprocess(tmp_path, args, extra):
    result = subprocess.run(
        [sys.executable, str(DEFECTS), *args],
        cwd=tmp_path,
        env={**clean_env(), **extra},
        capture_output=True,
        check=True,
    )
    assert result.stdout == codec.encode(DESCRIPTION)
    assert list(tmp_path.iterdir()) == []


def test_a_raising_runner_exits_nonzero_as_a_subprocess(make_attempt, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "from httk.workflow import Runner\n"
        "run = Runner('demo')\n"
        "@run.step\n"
        "def start(a):\n"
        "    raise OSError('disk full')\n"
        "raise SystemExit(run.main())\n",
        encoding="utf-8",
    )
    attempt = make_attempt("start")
    result = subprocess.run([sys.executable, str(script)], env=dict(os.environ), capture_output=True)
    assert result.returncode == 1
    assert b"OSError: disk full" in result.stderr
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["exception"], error["message"]) == ("OSError", "disk full")
    assert not attempt.ready.exists()


def load_defects():
    spec = importlib.util.spec_from_file_location("defects_under_test", DEFECTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


def fake_tools(bin_dir: Path) -> None:
    """``characterize`` writes three sites; ``relax`` converges except for site [1, 1, 1]."""
    bin_dir.mkdir()
    tools = {
        "characterize": "#!/bin/sh\nprintf '[[0,0,0],[1,1,1],[2,2,2]]' > sites.json\n",
        "relax": ('#!/bin/sh\ncase "$2" in *1,*1,*1*) exit 1;; esac\nprintf \'{"energy": -1.5}\' > energy.json\n'),
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)


def test_the_defect_campaign_step_by_step(make_attempt, workspace_spec, monkeypatch, tmp_path):
    fake_tools(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run = load_defects()
    spec = workspace_spec(name="Si vacancies", workflow="defects", initial_step="characterize")

    # characterize: spawn one relax child per site, then gather
    parent = make_attempt("characterize", spec=spec, placement="project/si")
    (parent.workdir / "POSCAR").parent.mkdir(parents=True, exist_ok=True)
    assert run.main([]) == 0
    steps = DESCRIPTION["steps"]
    join = {
        "step": "aggregate",
        "when": "all_terminal",
        "count": None,
        "on_impossible": "triage",
        "children": ["site-0", "site-1", "site-2"],
    }
    assert parent.outcome() == parent.expected("wait", steps, join=join)
    spawned = parent.spawned()["children"]
    children = []
    for index, entry in enumerate(spawned):
        job = parse_job_bytes((parent.ready / "children" / entry["payload"] / "job.json").read_bytes())
        assert (job.initial_step, job.tag, job.runner, job.maximum_attempts_per_activation) == (
            "relax",
            f"site-{index}",
            spec.runner,
            2,
        )
        # relax: each child runs the same runner file at its own step
        child = make_attempt("relax", spec=job, placement=entry["placement"])
        assert run.main([]) == 0
        kind = "succeeded" if child.outcome()["action"] == "succeed" else "failed"
        failure = child.outcome().get("failure")
        children.append(
            {
                "label": entry["label"],
                "job_id": child.job_id,
                "job_key": child.payload.name,
                "kind": kind,
                "failure": failure,
                "payload": str(child.payload),
                "workdir": str(child.workdir),
                "data": None,
            }
        )
    assert [child["kind"] for child in children] == ["succeeded", "failed", "succeeded"]
    assert children[1]["failure"]["code"] == "relax_diverged"

    # aggregate: the join's children arrive through context.json
    parent.next("aggregate", children=children)
    assert run.main([]) == 0
    assert parent.outcome() == parent.expected("advance", steps, next_step="triage", priority=None)
    assert json.loads((parent.workdir / "campaign.json").read_text(encoding="utf-8")) == {
        "site-0": {"energy": -1.5},
        "site-2": {"energy": -1.5},
    }

    # triage: an advance observes no children; the state carries what aggregate learned
    parent.next("triage")
    assert run.main([]) == 0
    failure = {
        "code": "campaign_incomplete",
        "message": "not every site relaxed",
        "details": {"failed": ["site-1"]},
        "retryable": False,
    }
    assert parent.outcome() == parent.expected("fail", steps, failure=failure)
    state = json.loads((parent.payload / ".httk-job" / "state.json").read_bytes())
    assert state == {"sites": 3, "failed": ["site-1"]}
    (event,) = [
        json.loads(line) for line in (parent.workdir / ".httk-runner" / "runlog.jsonl").read_bytes().splitlines()
    ]
    assert (event["label"], event["message"], event["step"]) == ("triage", "1 of 3 sites did not relax", "triage")
