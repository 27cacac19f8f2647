"""Language jobs: real jobflow flows submitted as jobs and run to the end by real managers.

The flows are tests/managers/jobflow_flows.py; the manager's runners import them
through PYTHONPATH, as a user's flows module would be found. A flow is one
conductor job plus one job per jobflow Job; outputs travel through transactional
data (docs/jobflow.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import jobflow_flows
import pytest

from httk.workflow.operations.collect import collect
from httk.workflow.operations.language_jobs import LanguageJobError, submit_flow

HERE = Path(__file__).resolve().parent
#: Hides jobflow from one interpreter, as on a machine without the extra (no code of ours is patched).
HIDE_JOBFLOW = """import sys


class _HideJobflow:
    def find_spec(self, name, path=None, target=None):
        if name == "jobflow" or name.startswith("jobflow."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _HideJobflow())
"""


@pytest.fixture
def flows(ops: Any) -> Any:
    ops.env["PYTHONPATH"] = str(HERE)
    return ops


def outputs(ops: Any, job_id: str) -> dict[str, Any]:
    """``name@index`` (``@uuid`` when a name repeats) -> output of the latest document of each uuid in a job's data."""
    directory = Path(ops.handle.layout.data_dir(job_id)) / "current" / "jobflow" / "outputs"
    latest: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        if document["uuid"] not in latest or document["index"] > latest[document["uuid"]]["index"]:
            latest[document["uuid"]] = document
    names = [doc["name"] for doc in latest.values()]
    return {f"{doc['name']}@{doc['index'] if names.count(doc['name']) == 1 else doc['uuid']}": doc["output"]
            for doc in latest.values()}


def job_names(ops: Any) -> dict[str, list[str]]:
    """kind -> the jobflow job names of the spawned jobs (tag ``<name>-<uuid8>``), sorted; conductors are untagged."""
    listing = json.loads(ops.httk("job", "list", str(ops.root), "--json").stdout)
    out: dict[str, list[str]] = {}
    for entry in listing:
        if "--" in entry["job_key"]:
            out.setdefault(entry["kind"], []).append(entry["job_key"].split("--")[0].rsplit("-", 1)[0])
    return {kind: sorted(names) for kind, names in out.items()}


def test_a_three_job_chain_runs_as_three_jobs_and_resolves_each_output(flows):
    conductor = submit_flow(flows.workspace, jobflow_flows.chain(), placement="flows").marker.job_id
    flows.run("--workers", "2", timeout=180)
    assert flows.kind(conductor) == "succeeded"
    assert job_names(flows) == {"succeeded": ["add", "add", "multiply"]}
    # (1 + 2) = 3, 3 + 10 = 13, 13 * 2 = 26: each job read the previous one's output.
    assert sorted(outputs(flows, conductor).values()) == [3, 13, 26]
    summary = json.loads((Path(flows.handle.layout.data_dir(conductor)) / "current/jobflow/flow.json").read_text())
    assert sorted(summary["statuses"].values()) == ["succeeded"] * 3


def test_a_dynamic_replace_runs_the_replacement_and_downstream_reads_its_output(flows):
    conductor = submit_flow(flows.workspace, jobflow_flows.dynamic(), placement="flows").marker.job_id
    flows.run("--workers", "2", timeout=240)
    assert flows.kind(conductor) == "succeeded"
    names = job_names(flows)["succeeded"]
    # fan_out replaced itself by three square jobs (run by a sub-conductor it spawned and gathered);
    # jobflow's own store_inputs job maps the replacement's output onto fan_out's uuid at index 2.
    assert names == sorted(["fan_out", "replace", "square", "square", "square", "store_inputs",
                                          "total"])
    results = outputs(flows, conductor)
    assert results["total@1"] == 0 + 1 + 4


def test_detour_and_addition_run_and_stop_jobflow_ends_the_flow(flows):
    diverted = submit_flow(flows.workspace, jobflow_flows.diversions(), placement="flows").marker.job_id
    halted = submit_flow(flows.workspace, jobflow_flows.halting(), placement="halt").marker.job_id
    stored = submit_flow(flows.workspace, jobflow_flows.stored(), placement="stored").marker.job_id
    flows.run("--workers", "2", timeout=240)
    # An output sent to an additional store (@job(data=True)) travels as a blob and resolves downstream.
    assert flows.kind(stored) == "succeeded" and outputs(flows, stored)["total@1"] == 0 + 1 + 2 + 3 + 4
    blobs = list((Path(flows.handle.layout.data_dir(stored)) / "current/jobflow/blobs").glob("data.*.json"))
    assert [json.loads(path.read_text())["data"] for path in blobs] == [[0, 1, 2, 3, 4]]
    assert flows.kind(diverted) == "succeeded" and flows.kind(halted) == "failed"
    assert flows.frame(halted).failure.code == "jobflow_flow_stopped"
    results = outputs(flows, diverted)
    assert results["detouring@1"] == 1 and results["add@1"] == 2 and results["adding@1"] == 2
    # The detour's square(5) and the addition's square(6) ran as jobs, and their outputs reached the flow.
    squares = sorted(value for key, value in results.items() if key.startswith("square@"))
    assert squares == [25, 36]
    assert sorted(job_names(flows)["succeeded"]) == sorted(
        ["adding", "add", "addition", "big_list", "detour", "detouring", "halt", "square", "square", "total"])
    summary = json.loads((Path(flows.handle.layout.data_dir(halted)) / "current/jobflow/flow.json").read_text())
    assert sorted(summary["statuses"].values()) == ["not_run", "succeeded"] and summary["stopped_by"]


def test_a_failing_job_stops_its_dependents_and_stop_children_skips_its_own(flows):
    conductor = submit_flow(flows.workspace, jobflow_flows.failing(), placement="flows").marker.job_id
    flows.run("--workers", "2", timeout=180)
    assert flows.kind(conductor) == "failed"
    failure = flows.frame(conductor).failure
    assert failure.code == "jobflow_flow_failed" and "explode (failed)" in failure.message
    # Only the jobs that could run became jobs: add(1, 1), explode, stopper; the two dependents never ran.
    assert job_names(flows) == {"succeeded": ["add", "stopper"], "failed": ["explode"]}
    exploded = [key for key in json.loads(flows.httk("job", "list", str(flows.root), "--json").stdout)
                if key["job_key"].startswith("explode-")][0]["job_key"]
    assert flows.frame(exploded).failure.code == "jobflow_job_failed"
    assert "ValueError: cannot handle 2" in flows.frame(exploded).failure.message
    statuses = json.loads((Path(flows.handle.layout.data_dir(conductor)) / "current/jobflow/flow.json")
                          .read_text())["statuses"]
    assert sorted(statuses.values()) == ["errored", "failed", "stopped", "succeeded", "succeeded"]


def test_a_failed_addition_fails_the_flow_not_the_job_and_a_stopped_flow_is_no_success(flows):
    added = submit_flow(flows.workspace, jobflow_flows.failed_addition(), placement="added").marker.job_id
    halted = submit_flow(flows.workspace, jobflow_flows.halting_with_addition(), placement="halt").marker.job_id
    stopped = submit_flow(flows.workspace, jobflow_flows.stopping(), placement="stop").marker.job_id
    flows.run("--workers", "2", timeout=240)
    # jobflow adds an addition to the flow without re-parenting the job's children (only a detour does):
    # adding_bad and its dependent succeed; the added flow failed, so the flow fails naming it.
    assert flows.kind(added) == "failed"
    failure = flows.frame(added).failure
    assert failure.code == "jobflow_flow_failed" and "added-bad (failed)" in failure.message
    summary = json.loads((Path(flows.handle.layout.data_dir(added)) / "current/jobflow/flow.json").read_text())
    by_name = {summary["names"][uuid]: status for uuid, status in summary["statuses"].items()}
    assert by_name == {"adding_bad": "succeeded", "add": "succeeded", "added-bad": "failed"}
    assert outputs(flows, added)["add@1"] == 3
    # stop_jobflow: the job's addition is never run, and the flow did not finish successfully.
    assert flows.kind(halted) == "failed" and flows.frame(halted).failure.code == "jobflow_flow_stopped"
    assert "halt_adding returned stop_jobflow" in flows.frame(halted).failure.message
    assert not [key for key in outputs(flows, halted) if key.startswith("square@")]
    halted_summary = json.loads((Path(flows.handle.layout.data_dir(halted)) / "current/jobflow/flow.json")
                                .read_text())
    assert sorted(halted_summary["statuses"].values()) == ["not_run", "succeeded"]
    # stop_children alone: the skipped dependent means the flow did not finish successfully either.
    assert flows.kind(stopped) == "failed"
    assert flows.frame(stopped).failure.code == "jobflow_flow_stopped"
    assert "stop_children of stopper" in flows.frame(stopped).failure.message


def test_job_new_language_jobflow_and_the_realization_in_show_why_and_collect(flows):
    created = json.loads(flows.httk("job", "new", str(flows.root), "--language", "jobflow", "--flow",
                                    "jobflow_flows:chain", "--placement", "cli", "--json").stdout)
    assert created["workflow_realization"] == "language" and created["runner"]["path"] == "languages/jobflow"
    job = created["job_id"]
    shown = flows.httk("job", "show", str(flows.root), job).stdout
    assert "realization      language (jobflow)" in shown
    why = flows.httk("job", "why", str(flows.root), job).stdout
    assert "realization: language (jobflow)" in why and "engine modules are installed" in why
    flows.run(timeout=180)
    collected = {item.job_id: item for item in collect(flows.handle)}
    assert collected[job].workflow_realization == "language" and collected[job].language == "jobflow"
    assert {item.workflow_realization for item in collected.values()} == {"language"}
    line = json.loads(flows.httk("collect", str(flows.root)).stdout.splitlines()[0])
    assert line["workflow_realization"] == "language"


MY_FLOWS = """from jobflow import Flow, job


@job
def double(x):
    return 2 * x


def make_flow():
    first = double(5)
    return Flow([first, double(first.output)], name="doubles")
"""


def test_job_new_ships_a_flow_module_of_the_current_directory_the_manager_cannot_import(ops, tmp_path):
    """docs/jobflow.md: 'importable from the current directory' is enough, wherever the manager runs."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "myflows.py").write_text(MY_FLOWS)
    done = subprocess.run([str(Path(sys.executable).parent / "httk"), "workflow", "job", "new", str(ops.root),
                           "--language", "jobflow", "--flow", "myflows:make_flow", "--json"], cwd=mine,
                          capture_output=True, text=True, env=ops.env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    conductor = json.loads(done.stdout)["job_id"]
    spec = json.loads((Path(json.loads(done.stdout)["payload"]) / "job.json").read_text())
    assert spec["inputs"]["modules"] == {"myflows.py": MY_FLOWS}
    # The manager runs elsewhere, with neither mine/ nor its PYTHONPATH: the module came with the job.
    ops.run(timeout=180)
    assert ops.kind(conductor) == "succeeded", ops.frame(conductor).failure
    assert sorted(outputs(ops, conductor).values()) == [10, 20]


def test_a_flow_whose_module_the_manager_cannot_import_fails_once_naming_it(ops):
    # Submitted from Python without shipping its module, to a manager without it on PYTHONPATH.
    conductor = submit_flow(ops.workspace, jobflow_flows.chain(), placement="flows").marker.job_id
    ops.run(timeout=120)
    frame = ops.frame(conductor)
    assert ops.kind(conductor) == "failed" and frame.failure.code == "jobflow_flow_unimportable"
    assert "'jobflow_flows'" in frame.failure.message and "PYTHONPATH" in frame.failure.message
    assert not frame.failure.retryable and frame.total_attempts == 1
    assert frame.failure.details["module"] == "jobflow_flows"


def test_a_flow_defined_in_main_is_refused_at_submission(ops):
    import jobflow

    def local(x):
        return x

    local.__module__ = "__main__"  # as in a script run with 'python script.py'
    with pytest.raises(LanguageJobError, match="defined in __main__"):
        submit_flow(ops.workspace, jobflow.Flow([jobflow.job(local)(1)]))
    assert ops.httk("job", "list", str(ops.root), "--json").stdout.strip() == "[]"


def test_job_new_language_refusals_write_nothing(flows):
    before = sorted(p.relative_to(flows.root) for p in flows.root.rglob("*"))
    for args, needle in (
        (["--language", "jobflow", "--flow", "jobflow_flows"], "expected MODULE:FUNCTION"),
        (["--language", "jobflow", "--flow", "no_such_module:f"], "cannot import 'no_such_module'"),
        (["--language", "jobflow", "--flow", "jobflow_flows:nothing"], "has no function 'nothing'"),
        (["--language", "cwl", "--flow", "jobflow_flows:chain"], "unknown language"),
        (["--language", "jobflow", "--flow", "jobflow_flows:chain", "--placement", "../out"], "placement"),
    ):
        done = flows.httk("job", "new", str(flows.root), *args, code=2)
        assert done.stderr.startswith("error: ") and needle in done.stderr, done.stderr
    assert sorted(p.relative_to(flows.root) for p in flows.root.rglob("*")) == before


def test_the_cli_starts_without_importing_jobflow():
    probe = "import sys, httk.workflow.cli.main; print('jobflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def hidden_env(ops: Any, tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "hide-jobflow"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE_JOBFLOW)
    return {**ops.env, "PYTHONPATH": f"{site}{os.pathsep}{HERE}"}


def precheck(ops: Any, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([str(Path(sys.executable).parent / "httk"), "workflow", "precheck", str(ops.root),
                           "--json"], capture_output=True, text=True, env=env, timeout=60, check=False)
    return done.returncode, json.loads(done.stdout)


def engine_finding(report: dict[str, Any]) -> dict[str, Any]:
    [job] = report["jobs"]
    [finding] = [item for item in job["findings"] if item["check"] == "engine"]
    return finding


def test_precheck_names_the_missing_extra_and_is_indeterminate_when_a_live_manager_serves_it(flows, tmp_path):
    # A live manager serving the path executor, stopped before the job exists so it claims nothing.
    manager = flows.start("--idle")
    manager_id = manager.manager_id
    os.kill(manager.pid, signal.SIGSTOP)
    try:
        check_missing_extra(flows, tmp_path, manager_id)
    finally:
        os.kill(manager.pid, signal.SIGCONT)


def check_missing_extra(flows: Any, tmp_path: Path, manager_id: str) -> None:
    submit_flow(flows.workspace, jobflow_flows.chain(), placement="flows")
    hidden = hidden_env(flows, tmp_path)
    # Where jobflow is installed the engine is fine.
    status, report = precheck(flows, flows.env)
    assert engine_finding(report)["status"] == "ok"
    # Hidden, with a live manager serving the job's executor: indeterminate, exit 0.
    status, report = precheck(flows, hidden)
    finding = engine_finding(report)
    assert finding["status"] == "indeterminate" and manager_id in finding["message"], finding
    assert "pip install 'httk-workflow[jobflow]'" in finding["message"]
    assert status == 0, report


def test_precheck_fails_on_the_missing_extra_when_no_live_manager_serves_the_executor(flows, tmp_path):
    submit_flow(flows.workspace, jobflow_flows.chain(), placement="flows")
    status, report = precheck(flows, hidden_env(flows, tmp_path))
    finding = engine_finding(report)
    assert status == 1 and finding["status"] == "broken"
    assert "modules (jobflow) are not installed here" in finding["message"]
    assert "pip install 'httk-workflow[jobflow]'" in finding["message"]
    assert "no live manager serves executor path" in finding["message"]


def test_a_manager_without_the_extra_fails_the_job_naming_it(flows, tmp_path):
    conductor = submit_flow(flows.workspace, jobflow_flows.chain(), placement="flows").marker.job_id
    flows.env.update(hidden_env(flows, tmp_path))
    flows.run(timeout=120)
    failure = flows.frame(conductor).failure
    assert flows.kind(conductor) == "failed" and failure.code == "language_engine_missing"
    assert "pip install 'httk-workflow[jobflow]'" in failure.message and not failure.retryable
