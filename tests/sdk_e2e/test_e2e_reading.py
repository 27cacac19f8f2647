"""What an attempt reads, through real attempts: context, paths, inputs, settings, state, declarations, run log.

Spec 001 "What an attempt reads" and "Steps and dispatch"; spec 002 rows
Attempt.context … Attempt.declaration, JobState.*, protocol.RunLog.append,
Runner.steps / Runner.description; docs/workflow_filesystem_api.md
"Environment of an attempt" and "context.json".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from httk.workflow.protocol import tree_digest

READ_EVERYTHING = """
run = Runner("e2e")


@run.step
def main(a):
    env = {name: os.environ.get(name) for name in os.environ if name.startswith("HTTK_WORKFLOW_")}
    save(a, {
        "context_step": a.context.step,
        "context_job_id": a.context.job_id,
        "context_placement": a.context["placement"],
        "context_durable": a.context.durable,
        "attempt_ordinal": a.context.attempt_ordinal,
        "step": a.step,
        "control": str(a.control),
        "payload": str(a.payload),
        "workdir": str(a.workdir),
        "workspace": str(a.workspace),
        "data": None if a.data is None else str(a.data),
        "cwd": os.getcwd(),
        "job_name": a.job.name,
        "job_workflow": a.job.workflow,
        "inputs": a.inputs,
        "encut": a.input("encut"),
        "missing_with_default": a.input("kpoints", "auto"),
        "missing_error": _missing(a),
        "seeded": sorted(p.name for p in a.workdir.iterdir()),
        "put_refused": _put_refused(a),
        "env": env,
        "children": len(a.children),
    })
    a.succeed()


def _missing(a):
    try:
        a.input("kpoints")
    except KeyError as error:
        return str(error)
    return None


def _put_refused(a):
    try:
        a.put("POSCAR", "POSCAR")
    except RuntimeError as error:
        return str(error)
    return None
"""


def test_context_paths_inputs_and_environment(harness) -> None:
    ref = harness.publish(READ_EVERYTHING)
    job = harness.submit(
        ref, inputs={"encut": 520, "supercell": [2, 2, 2]}, files={"POSCAR": "Si\n"}, placement="proj/read"
    )
    show = harness.finish(job, "succeeded")
    report = harness.report(job)
    control = harness.attempts(job)[0]
    assert report["step"] == report["context_step"] == "main"
    assert report["context_job_id"] == job.job_id
    assert report["context_placement"] == "proj/read"
    assert report["context_durable"] is False  # the harness workspace is --no-durable
    assert report["attempt_ordinal"] == 1
    assert report["control"] == str(control)
    assert report["payload"] == str(harness.payload(job))
    assert report["workdir"] == report["cwd"] == str(harness.workdir(job))
    assert report["workspace"] == str(harness.root)
    assert report["data"] is None
    assert report["job_name"] == show["name"] and report["job_workflow"] == "e2e"
    assert report["inputs"] == {"encut": 520, "supercell": [2, 2, 2]}
    assert report["encut"] == 520 and report["missing_with_default"] == "auto"
    assert "'kpoints' is not set" in report["missing_error"] and "encut, supercell" in report["missing_error"]
    assert report["seeded"] == ["POSCAR"]  # the workdir is seeded from the payload without job.json/.httk-job
    assert "data mode 'none'" in report["put_refused"]
    assert report["children"] == 0
    env = report["env"]
    assert env["HTTK_WORKFLOW_CONTEXT"] == str(control / "context.json")
    assert env["HTTK_WORKFLOW_CONTROL_DIR"] == str(control)
    assert env["HTTK_WORKFLOW_STEP"] == "main" and env["HTTK_WORKFLOW_DURABLE"] == "0"
    assert env["HTTK_WORKFLOW_JOB_ID"] == job.job_id
    assert control.name.endswith(env["HTTK_WORKFLOW_ATTEMPT_ID"])
    assert "HTTK_WORKFLOW_DATA_DIR" not in env
    context = json.loads((control / "context.json").read_text(encoding="utf-8"))
    assert context["format"] == "httk-workflow-attempt-context" and context["children"] == []


def test_a_durable_workspace_says_so_to_its_runners(durable_harness) -> None:
    ref = durable_harness.publish(READ_EVERYTHING)
    job = durable_harness.submit(ref, inputs={"encut": 1})
    assert durable_harness.run() == 0
    report = durable_harness.report(job)
    assert report["context_durable"] is True and report["env"]["HTTK_WORKFLOW_DURABLE"] == "1"


SETTINGS = """
run = Runner("e2e")

NAMES = [
    "vasp.command", "e2e.layer", "e2e.env-only", "e2e.json-env", "e2e.text", "e2e.number",
    "e2e.flag", "e2e.object", "e2e.absent", "e2e.deploy",
]


@run.step
def main(a):
    save(a, {
        "settings": {name: a.setting(name) for name in NAMES},
        "absent_default": a.setting("e2e.absent", "fallback"),
        "input_beats_default": a.setting("e2e.layer", "fallback"),
        "env": {name: os.environ.get(name) for name in os.environ if name.startswith(("HTTK_VASP", "HTTK_E2E"))},
        "snapshot": dict(a.context.settings),
    })
    a.succeed()
"""


def test_setting_layers_inputs_env_workspace_default(harness, monkeypatch: pytest.MonkeyPatch) -> None:
    harness.ws.set_setting("vasp.command", "srun vasp")
    harness.ws.set_setting("e2e.layer", "workspace")
    harness.ws.set_setting("e2e.text", "007")
    harness.ws.set_setting("e2e.number", 7)
    harness.ws.set_setting("e2e.flag", True)
    harness.ws.set_setting("e2e.object", {"nodes": 2})
    monkeypatch.setenv("HTTK_E2E_LAYER", "environment")
    monkeypatch.setenv("HTTK_E2E_ENV_ONLY", "from the environment")
    monkeypatch.setenv("HTTK_E2E_JSON_ENV", "[1, 2]")
    ref = harness.publish(SETTINGS)
    job = harness.submit(ref, inputs={"e2e.layer": "input"})
    harness.finish(job, "succeeded")
    report = harness.report(job)
    settings = report["settings"]
    assert settings["e2e.layer"] == report["input_beats_default"] == "input"  # inputs beat every other layer
    assert settings["e2e.env-only"] == "from the environment"  # HTTK_ + dotted name, '.'/'-' -> '_'
    assert settings["e2e.json-env"] == [1, 2]  # an environment value is JSON when it parses as JSON
    assert settings["vasp.command"] == "srun vasp"  # the workspace layer
    assert settings["e2e.text"] == "007" and settings["e2e.number"] == 7 and settings["e2e.flag"] is True
    assert settings["e2e.object"] == {"nodes": 2}  # not exported; read from the context.json snapshot
    assert settings["e2e.absent"] is None and report["absent_default"] == "fallback"
    # The manager exports scalar workspace settings and snapshots all of them into context.json.
    env = report["env"]
    assert env["HTTK_VASP_COMMAND"] == "srun vasp"
    assert env["HTTK_E2E_TEXT"] == "007" and env["HTTK_E2E_NUMBER"] == "7" and env["HTTK_E2E_FLAG"] == "true"
    assert "HTTK_E2E_OBJECT" not in env
    context = json.loads((harness.attempts(job)[0] / "context.json").read_text(encoding="utf-8"))
    expected_snapshot = {
        "vasp.command": "srun vasp",
        "e2e.layer": "workspace",
        "e2e.text": "007",
        "e2e.number": 7,
        "e2e.flag": True,
        "e2e.object": {"nodes": 2},
    }
    assert context["settings"] == report["snapshot"] == expected_snapshot


def test_deployment_environment_beats_the_workspace_setting(harness, monkeypatch: pytest.MonkeyPatch) -> None:
    harness.ws.set_setting("vasp.command", "srun vasp")
    monkeypatch.setenv("HTTK_VASP_COMMAND", "mpirun -n 4 vasp_std")
    ref = harness.publish(SETTINGS)
    job = harness.submit(ref)
    assert harness.run() == 0
    report = harness.report(job)
    assert report["snapshot"]["vasp.command"] == "srun vasp"
    assert report["settings"]["vasp.command"] == "mpirun -n 4 vasp_std"


STATE = """
run = Runner("e2e")


@run.step
def main(a):
    if a.context.attempt_ordinal == 1:
        assert len(a.state) == 0 and a.state.read() == {}
        a.state["count"] = 1
        a.state.set("first_workdir", str(a.workdir))
        (a.workdir / "scratch.txt").write_text("attempt 1", encoding="utf-8")
        a.retry("once more")
        return
    a.state["count"] = a.state["count"] + 1
    a.state.update(second_workdir=str(a.workdir), saw_scratch=(a.workdir / "scratch.txt").exists())
    a.advance("second", state={"advanced": True, "doomed": 1})


@run.step
def second(a):
    before = a.state.read()
    deleted = a.state.delete("doomed")
    deleted_again = a.state.delete("doomed")
    try:
        a.state["doomed"]
        missing = None
    except KeyError as error:
        missing = str(error)
    a.state.merge({"energy": -12.5, "converged": True})
    save(a, {
        "before": before,
        "deleted": deleted,
        "deleted_again": deleted_again,
        "missing": missing,
        "contains": "count" in a.state,
        "get_default": a.state.get("nothing", "dflt"),
        "keys": sorted(a.state),
        "workdir": str(a.workdir),
        "sees_scratch": (a.workdir / "scratch.txt").exists(),
        "path": str(a.state.path),
    })
    a.succeed()
"""


def test_state_survives_retry_advance_and_isolated_workdirs(harness) -> None:
    ref = harness.publish(STATE)
    job = harness.submit(ref, workdir_mode="isolated")
    harness.finish(job, "succeeded")
    first, second, third = harness.attempts(job)
    report = harness.report(job)
    assert report["before"] == {
        "advanced": True,
        "count": 2,
        "doomed": 1,
        "first_workdir": str(first / "workdir"),
        "saw_scratch": False,
        "second_workdir": str(second / "workdir"),
    }
    assert report["workdir"] == str(third / "workdir") and report["sees_scratch"] is False
    assert report["deleted"] is True and report["deleted_again"] is False
    assert "'doomed' is not set" in report["missing"]
    assert report["contains"] is True and report["get_default"] == "dflt"
    state_file = harness.payload(job) / ".httk-job" / "state.json"
    assert report["path"] == str(state_file)
    assert harness.state(job) == {
        "advanced": True,
        "converged": True,
        "count": 2,
        "energy": -12.5,
        "first_workdir": str(first / "workdir"),
        "saw_scratch": False,
        "second_workdir": str(second / "workdir"),
    }
    # canonical JSON: sorted keys, compact separators, trailing newline
    assert state_file.read_text(encoding="utf-8") == json.dumps(
        harness.state(job), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ) + "\n"
    assert (first / "workdir" / "scratch.txt").exists()  # isolated: each attempt had its own workdir


DECLARE = """
run = Runner("e2e")


@run.step
def main(a):
    declared = a.declaration("workflow")
    a.declare("workflow", {**declared, "outputs": {"structures": 1}})
    save(a, {"declared": declared, "observed": a.declaration("workflow"), "absent": a.declaration("other")})
    a.advance("refine")


@run.step
def refine(a):
    seen = a.declaration("workflow")
    a.declare("workflow", {**seen, "outputs": {"structures": 3}})
    a.declare("extra", {"note": "observed only"})
    try:
        a.declare("workflow", ["not", "an", "object"])
        refused = None
    except TypeError as error:
        refused = str(error)
    save(a, {"seen": seen, "final": a.declaration("workflow"), "extra": a.declaration("extra"), "refused": refused})
    a.succeed()
"""


def test_declare_and_declaration_read_observed_then_declared(harness) -> None:
    ref = harness.publish(DECLARE)
    declared = {"inputs": {"structure": "POSCAR"}}
    payload = harness.prepare(ref, declarations={"workflow": declared}, files={"POSCAR": "Si\n"})
    digest_before = tree_digest(payload)
    job = harness.ws.submit(payload, "proj/decl")
    harness.finish(job, "succeeded")
    first = harness.report(job, 0)
    assert first["declared"] == declared
    assert first["observed"] == {**declared, "outputs": {"structures": 1}}
    assert first["absent"] is None
    second = harness.report(job, 1)
    assert second["seen"] == first["observed"]  # the observed document survives the advance
    assert second["final"] == {**declared, "outputs": {"structures": 3}}  # the last write of a name wins
    assert second["extra"] == {"note": "observed only"}
    assert "must be a JSON object" in second["refused"]
    directory = harness.payload(job) / ".httk-job" / "declarations"
    assert sorted(path.name for path in directory.iterdir()) == ["extra.json", "workflow.json"]
    assert json.loads((directory / "workflow.json").read_text(encoding="utf-8")) == second["final"]
    # .httk-job/ (state, declarations, runner steps) is excluded from every payload digest
    assert tree_digest(harness.payload(job)) == digest_before
    assert json.loads((harness.payload(job) / "job.json").read_text(encoding="utf-8"))["declarations"] == {
        "workflow": declared
    }


RUNLOG = """
run = Runner("e2e")


@run.step
def main(a):
    (a.workdir / "out.txt").write_text("evidence\\n", encoding="utf-8")
    a.log.append("start", "an ordinary note")
    a.log.append("summary", "read me first", kind="headline")
    a.log.append("outputs", "the output file", kind="files", files=["out.txt"])
    try:
        a.log.append("bad", "no files", kind="files")
        refused = None
    except ValueError as error:
        refused = str(error)
    save(a, {"refused": refused, "path": str(a.log.path)})
    a.advance("second")


@run.step
def second(a):
    a.log.append("second", "appended by the next activation")
    save(a, {"events": a.log.read()})
    a.succeed()
"""


def test_runlog_note_headline_and_files_events(harness) -> None:
    ref = harness.publish(RUNLOG)
    job = harness.submit(ref)
    harness.finish(job, "succeeded")
    first_control, second_control = harness.attempts(job)
    path = harness.workdir(job) / ".httk-runner" / "runlog.jsonl"
    assert harness.report(job, 0)["path"] == str(path)
    assert "needs at least one file" in harness.report(job, 0)["refused"]
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["kind"], e["label"], e["step"]) for e in events] == [
        ("note", "start", "main"),
        ("headline", "summary", "main"),
        ("files", "outputs", "main"),
        ("note", "second", "second"),
    ]
    for event in events:
        assert event["format"] == "httk-workflow-runlog-event" and event["format_version"] == 1
        assert isinstance(event["time"], float)
    assert first_control.name.endswith(events[0]["attempt_id"])
    assert second_control.name.endswith(events[3]["attempt_id"])
    import hashlib

    digest = hashlib.sha256(b"evidence\n").hexdigest()
    assert events[2]["files"] == [{"path": "out.txt", "size": 9, "sha256": digest}]
    assert events[0]["files"] == []
    assert harness.report(job, 1)["events"] == events


STEPS = """
run = Runner("e2e")


@run.step
def main(a):
    save(a, {
        "steps": sorted(run.steps),
        "workflow": run.workflow,
        "description": run.description(),
        "duplicate": DUPLICATE,
    })
    try:
        a.advance("mian")
    except ValueError as error:
        save(a, {"typo": str(error)}, "typo.json")
    a.advance("collect-results")


@run.step(name="collect-results")
def collect(a):
    a.succeed()


try:
    run.step(name="main")(collect)
    DUPLICATE = None
except ValueError as error:
    DUPLICATE = str(error)
"""


def test_runner_steps_in_the_state_frame_and_runner_steps_json(harness) -> None:
    ref = harness.publish(STEPS)
    job = harness.submit(ref)
    show = harness.finish(job, "succeeded")
    assert show["runner_steps"] == ["collect-results", "main"]
    report = harness.report(job, 0)
    assert report["steps"] == ["collect-results", "main"] and report["workflow"] == "e2e"
    assert "step 'main' is already registered in runner 'e2e'" in report["duplicate"]
    assert report["description"] == {
        "format": "httk-workflow-runner-description",
        "format_version": 1,
        "workflow": "e2e",
        "steps": ["collect-results", "main"],
    }
    typo = harness.report(job, 0, "typo.json")["typo"]
    assert "'mian' is not a step of this runner" in typo and "collect-results, main" in typo
    # recorded from the first outcome the job publishes, in every later frame
    log = harness.log(job)
    recorded = [entry.get("runner_steps") for entry in log if str(entry.get("event", "")).startswith("commit_")]
    assert recorded == [["collect-results", "main"], ["collect-results", "main"]]
    assert [entry.get("runner_steps") for entry in log[:3]] == [None, None, None]  # submit, register, claim
    steps_file = harness.payload(job) / ".httk-job" / "runner-steps.json"
    assert json.loads(steps_file.read_text(encoding="utf-8")) == {
        "steps": ["collect-results", "main"],
        "workflow": "e2e",
    }
    outcome = json.loads((harness.attempts(job)[0] / "outcome.ready" / "outcome.json").read_text(encoding="utf-8"))
    assert outcome["runner_steps"] == ["collect-results", "main"] and outcome["next_step"] == "collect-results"


def test_describe_prints_the_steps_and_touches_nothing(harness, tmp_path: Path) -> None:
    runner = harness.write_runner(STEPS)
    before = sorted(os.listdir(runner.parent))
    env = {key: value for key, value in os.environ.items() if not key.startswith("HTTK_")}
    expected = {
        "format": "httk-workflow-runner-description",
        "format_version": 1,
        "workflow": "e2e",
        "steps": ["collect-results", "main"],
    }
    by_flag = subprocess.run(
        [sys.executable, str(runner), "--describe"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert json.loads(by_flag.stdout) == expected
    by_env = subprocess.run(
        [sys.executable, str(runner)],
        env={**env, "HTTK_WORKFLOW_DESCRIBE": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(by_env.stdout) == expected
    assert sorted(os.listdir(runner.parent)) == before
    unbound = subprocess.run([sys.executable, str(runner)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert unbound.returncode != 0 and "must be launched by an httk-workflow task manager" in unbound.stderr


def test_a_describe_request_in_the_manager_environment_does_not_reach_attempts(
    harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTK_WORKFLOW_DESCRIBE", "1")
    ref = harness.publish(READ_EVERYTHING)
    job = harness.submit(ref, inputs={"encut": 1})
    harness.finish(job, "succeeded")
    assert "HTTK_WORKFLOW_DESCRIBE" not in harness.report(job)["env"]
