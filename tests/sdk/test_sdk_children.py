"""Spawning children (ChildSpec, prepared payloads) and reading the children of a join (spec 001)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from httk.workflow import ChildResult, ChildSpec, Failure, JobSpec, Runner, RunnerRef, prepare_job_payload
from httk.workflow.protocol import parse_job_bytes

RUNNER_SHA = "ab" * 32
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def runner_with(handler) -> Runner:
    run = Runner("demo")
    run.step(name="start")(handler)
    run.step(name="relax")(lambda a: a.succeed())
    return run


def rich_parent(workspace_spec) -> JobSpec:
    return workspace_spec(
        name="Si vacancies",
        pool="gpu",
        capabilities=("vasp", "mpi"),
        executor="slurm",
        priority=7,
        resources={"cores": 16},
        workdir_mode="isolated",
        data_mode="transactional",
        maximum_attempts_per_activation=5,
        retry_on=("node_failure",),
        declarations={"workflow": {"outputs": {}}},
        tag="parent",
    )


def test_childspec_inherits_the_parent_job(make_attempt, workspace_spec):
    attempt = make_attempt("start", spec=rich_parent(workspace_spec), placement="project/si")
    keys = []

    def handler(a):
        keys.append(a.spawn(ChildSpec(step="relax", inputs={"site": [0, 0, 0]}), label="site-0"))
        keys.append(
            a.spawn(
                ChildSpec(
                    step="relax",
                    maximum_attempts_per_activation=2,
                    maximum_total_attempts=9,
                    retry_on=["relax_diverged"],
                    priority=-1,
                    name="custom",
                    workdir_mode="persistent",
                    data_mode="none",
                ),
                label="site-1",
                placement="project/si/children",
            )
        )
        a.gather("relax")

    assert runner_with(handler).main([]) == 0
    spawn = attempt.spawned()
    assert spawn["format"] == "httk-workflow-spawn" and spawn["format_version"] == 1
    first, second = spawn["children"]
    assert set(first) == {"label", "job_id", "job_key", "placement", "payload"}
    assert UUID.match(first["job_id"])
    assert first["job_key"] == f"site-0--{first['job_id']}" == keys[0]
    assert first["payload"] == f"jobs/{first['job_key']}"
    assert first["placement"] == "project/si"  # the spawning job's placement
    assert second["placement"] == "project/si/children"
    job_dir = attempt.ready / "children" / first["payload"]
    assert sorted(p.name for p in job_dir.iterdir()) == ["job.json"]
    child = parse_job_bytes((job_dir / "job.json").read_bytes())
    assert child == JobSpec(
        name="Si vacancies/site-0",
        workflow="demo",
        runner_source="workspace",
        runner_path="demo/run.py",
        runner_sha256=RUNNER_SHA,
        initial_step="relax",
        inputs={"site": [0, 0, 0]},
        priority=7,
        pool="gpu",
        capabilities=("mpi", "vasp"),
        executor="slurm",
        workdir_mode="isolated",
        data_mode="transactional",
        resources={"cores": 16},
        tag="site-0",
    )
    other = parse_job_bytes((attempt.ready / "children" / second["payload"] / "job.json").read_bytes())
    assert (other.name, other.priority, other.workdir_mode, other.data_mode, other.tag) == (
        "custom",
        -1,
        "persistent",
        "none",
        "site-1",
    )
    assert other.retry_policy.maximum_attempts_per_activation == 2
    assert (other.maximum_total_attempts, other.maximum_activations, other.retry_on) == (9, None, ("relax_diverged",))


def test_explicit_runner_refs(make_attempt):
    attempt = make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="x", runner=RunnerRef.workspace("tools/x.py", "cd" * 32)), label="ws")
        a.spawn(ChildSpec(step="y", runner=RunnerRef.installed("bin/y", "ef" * 32)), label="inst")
        a.gather("relax", when="all_terminal")

    runner_with(handler).main([])
    runners = [
        json.loads((attempt.ready / "children" / child["payload"] / "job.json").read_bytes())["runner"]
        for child in attempt.spawned()["children"]
    ]
    assert runners == [
        {"source": "workspace", "path": "tools/x.py", "sha256": "cd" * 32},
        {"source": "installed", "path": "bin/y", "sha256": "ef" * 32},
    ]
    with pytest.raises(ValueError, match="sha256"):
        RunnerRef.workspace("tools/x.py", "nothex")
    assert RunnerRef.inherit().inherits


def test_a_payload_runner_cannot_be_inherited(make_attempt):
    spec = JobSpec(name="P", workflow="demo", runner_path="run.py", initial_step="start")
    make_attempt("start", spec=spec)

    def handler(a):
        with pytest.raises(ValueError, match="publish_runner") as caught:
            a.spawn(ChildSpec(step="relax"), label="c")
        assert "prepared payload directory" in str(caught.value)
        assert not list(a.control.glob("outcome.tmp.*")), "a refused spawn creates no draft"
        a.succeed()

    assert runner_with(handler).main([]) == 0


def test_spawn_a_prepared_payload_directory(make_attempt):
    attempt = make_attempt("start")

    def handler(a):
        child = a.workdir / "child"
        prepare_job_payload(child, JobSpec(name="Child", workflow="demo", runner_path="files/runner"), durable=False)
        (child / "files").mkdir()
        (child / "files" / "runner").write_text("#!/bin/sh\n", encoding="utf-8")
        (child / "files" / "link").symlink_to("runner")
        (child / ".httk-job").mkdir()
        (child / ".httk-job" / "state.json").write_text("{}\n", encoding="utf-8")
        a.spawn(child, label="prepared", placement="project/children")
        with pytest.raises(ValueError, match="not a prepared payload"):
            a.spawn(a.workdir, label="nope")
        a.gather("relax")

    runner_with(handler).main([])
    (entry,) = attempt.spawned()["children"]
    assert entry["placement"] == "project/children"
    copied = attempt.ready / "children" / entry["payload"]
    names = sorted(str(p.relative_to(copied)) for p in copied.rglob("*"))
    assert names == ["files", "files/link", "files/runner", "job.json"]
    assert (copied / "files" / "link").is_symlink()
    assert (copied / "job.json").read_bytes() == (attempt.workdir / "child" / "job.json").read_bytes()


def test_labels_are_mandatory_valid_and_unique(make_attempt):
    make_attempt("start")

    def handler(a):
        a.spawn(ChildSpec(step="relax"), label="site-0")
        with pytest.raises(ValueError, match="already used"):
            a.spawn(ChildSpec(step="relax"), label="site-0")
        for bad in ("Site", "a--b", "", "-x"):
            with pytest.raises(ValueError, match="invalid child label"):
                a.spawn(ChildSpec(step="relax"), label=bad)
        with pytest.raises(ValueError, match="placement"):
            a.spawn(ChildSpec(step="relax"), label="up", placement="../escape")
        with pytest.raises(TypeError):
            a.spawn(42, label="num")
        a.gather("relax")

    assert runner_with(handler).main([]) == 0


def child_entry(label: str, kind: str, tmp: Path, failure: dict | None = None, data: bool = False) -> dict:
    job_id = str(uuid.uuid4())
    return {
        "label": label,
        "job_id": job_id,
        "job_key": f"{label}--{job_id}",
        "kind": kind,
        "failure": failure,
        "payload": str(tmp / "payloads" / label),
        "workdir": str(tmp / "workdirs" / label),
        "data": str(tmp / "data" / label) if data else None,
    }


def test_children_are_parsed_from_the_context(make_attempt, tmp_path):
    failure = {"code": "relax_diverged", "message": "no", "details": {"site": 1}, "retryable": False}
    entries = [
        child_entry("site-0", "succeeded", tmp_path, data=True),
        child_entry("site-1", "failed", tmp_path, failure=failure),
        child_entry("site-2", "cancelled", tmp_path),
    ]
    make_attempt("start", children=entries)
    seen = {}

    def handler(a):
        seen["children"] = a.children
        a.succeed()

    runner_with(handler).main([])
    children = seen["children"]
    assert len(children) == 3
    assert [child.label for child in children] == ["site-0", "site-1", "site-2"]
    assert [child.label for child in children.succeeded] == ["site-0"]
    assert [child.label for child in children.failed] == ["site-1", "site-2"]
    first = children["site-0"]
    assert isinstance(first, ChildResult)
    assert first.workdir == tmp_path / "workdirs" / "site-0"
    assert first.data == tmp_path / "data" / "site-0"
    assert first.job_key == entries[0]["job_key"] and first.failure is None
    assert children["site-1"].failure == Failure("relax_diverged", "no", {"site": 1}, False)
    assert children["site-2"].data is None
    assert children.get("site-9") is None
    with pytest.raises(KeyError, match="site-0, site-1, site-2"):
        children["site-9"]
    with pytest.raises(AttributeError):
        first.label = "x"  # frozen


def test_children_are_empty_without_a_join(make_attempt):
    make_attempt("start")
    seen = []
    runner_with(lambda a: (seen.append((len(a.children), list(a.children))), a.succeed())).main([])
    assert seen == [(0, [])]
