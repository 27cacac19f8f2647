"""What an attempt reads: context, job, inputs, settings, state, declarations, run log (spec 001)."""

from __future__ import annotations

import hashlib
import json

import pytest

from httk.workflow import Attempt, JobSpec, Runner, codec
from httk.workflow.codec import DocumentError
from httk.workflow.protocol import JobDocument
from httk.workflow.runtime import AttemptContext, JobState


def runner_with(handler) -> Runner:
    run = Runner("demo")
    run.step(name="start")(handler)
    run.step(name="second")(handler)
    return run


def test_paths_context_and_job(make_attempt, workspace_spec):
    spec = workspace_spec(inputs={"encut": 520}, data_mode="transactional")
    attempt = make_attempt("start", spec=spec)
    a = Attempt.initialize(steps=frozenset({"start"}))
    assert (a.control, a.payload, a.workdir, a.workspace, a.data) == (
        attempt.control,
        attempt.payload,
        attempt.workdir,
        attempt.workspace,
        attempt.data,
    )
    assert a.step == "start" and a.job == spec and a.inputs == {"encut": 520}
    assert isinstance(a.context, AttemptContext)
    assert a.context.durable is False
    assert a.context.attempt_id == attempt.attempt_id
    assert a.context["placement"] == "project/a" == a.context.placement
    assert a.context.get("missing", 3) == 3
    assert not a.published


def test_data_is_none_without_transactional_data(make_attempt):
    make_attempt("start")
    assert Attempt.initialize().data is None


def test_a_corrupt_context_is_refused_naming_the_member(make_attempt):
    attempt = make_attempt("start")
    path = attempt.control / "context.json"
    document = json.loads(path.read_bytes())
    document["durable"] = "yes"
    path.write_bytes(codec.encode(document))
    with pytest.raises(DocumentError, match=r"\$\.durable"):
        Attempt.initialize()


def test_step_mismatch_between_environment_and_context(make_attempt, monkeypatch):
    make_attempt("start")
    monkeypatch.setenv("HTTK_WORKFLOW_STEP", "other")
    with pytest.raises(RuntimeError, match="disagrees"):
        Attempt.initialize()


def test_input_with_and_without_default(make_attempt, workspace_spec):
    make_attempt("start", spec=workspace_spec(inputs={"site": [1, 2], "none": None}))
    a = Attempt.initialize()
    assert a.input("site") == [1, 2]
    assert a.input("none", 5) is None
    assert a.input("absent", 5) == 5
    with pytest.raises(KeyError, match="none, site"):
        a.input("absent")


def test_setting_layers_most_specific_first(make_attempt, workspace_spec, monkeypatch):
    spec = workspace_spec(inputs={"vasp.command": "from-input"})
    settings = {
        "vasp.command": "from-settings",
        "vasp.ncore": 4,
        "queue.name": "from-settings",
        "only.settings": {"nested": [1]},
        "code.id": "007",
    }
    make_attempt("start", spec=spec, settings=settings)
    monkeypatch.setenv("HTTK_VASP_COMMAND", "from-env")
    monkeypatch.setenv("HTTK_QUEUE_NAME", "from-env")
    monkeypatch.setenv("HTTK_VASP_NCORE", "8")
    monkeypatch.setenv("HTTK_EXTRA_FLAGS", '["-x", "-y"]')
    monkeypatch.setenv("HTTK_CODE_ID", "007")  # exactly what the manager exports for the string setting
    monkeypatch.setenv("HTTK_MY_TOOL_PATH", "/opt/tool")
    a = Attempt.initialize()
    assert a.setting("vasp.command") == "from-input"  # 1. job inputs
    assert a.setting("queue.name") == "from-env"  # 2. environment, raw string
    assert a.setting("vasp.ncore") == 8  # 2. environment, JSON-decoded
    assert a.setting("extra.flags") == ["-x", "-y"]
    assert a.setting("my-tool.path") == "/opt/tool"
    assert a.setting("code.id") == "007"  # the manager's export of a string setting keeps its type
    assert a.setting("only.settings") == {"nested": [1]}  # 3. workspace settings
    assert a.setting("absent") is None  # 4. default
    assert a.setting("absent", "fallback") == "fallback"


def test_state_persists_across_attempts(make_attempt):
    attempt = make_attempt("start")
    seen = []

    def handler(a):
        if a.step == "start":
            a.state["converged"] = False
            a.state.merge({"attempts": 3, "energy": -12.5})
            a.state.set("drop", 1)
            assert a.state.delete("drop") is True
            assert a.state.delete("drop") is False
            a.advance("second", state={"sites": 5})
        else:
            seen.append(a.state.read())
            seen.append((len(a.state), sorted(a.state), "sites" in a.state, a.state.get("nope", 1)))
            del a.state["attempts"]
            a.succeed()

    run = runner_with(handler)
    run.main([])
    state_file = attempt.payload / ".httk-job" / "state.json"
    first = {"converged": False, "attempts": 3, "energy": -12.5, "sites": 5}
    assert state_file.read_bytes() == codec.encode(first)
    attempt.next("second")
    run.main([])
    assert seen == [first, (4, ["attempts", "converged", "energy", "sites"], True, 1)]
    assert json.loads(state_file.read_bytes()) == {"converged": False, "energy": -12.5, "sites": 5}


def test_state_refuses_what_json_cannot_hold(tmp_path):
    state = JobState(tmp_path, durable=False)
    with pytest.raises(TypeError, match="'when'"):
        state["when"] = object()
    with pytest.raises(TypeError, match="'nan'"):
        state["nan"] = float("nan")
    with pytest.raises(TypeError, match="keys are strings"):
        state[1] = 2  # type: ignore[index]
    with pytest.raises(KeyError, match="not set"):
        state["absent"]
    with pytest.raises(KeyError):
        del state["absent"]
    state.update(a=1, b=2)
    assert dict(state) == {"a": 1, "b": 2} == state.read()
    assert not (tmp_path / ".httk-job" / "state.json.tmp").exists()


def test_declarations_observed_then_declared_then_none(make_attempt, workspace_spec):
    attempt = make_attempt("start", spec=workspace_spec(declarations={"workflow": {"inputs": {"a": 1}}}))
    a = Attempt.initialize()
    assert a.declaration("workflow") == {"inputs": {"a": 1}}
    assert a.declaration("other") is None
    a.declare("workflow", {**a.declaration("workflow"), "outputs": {"structures": 3}})
    a.declare("workflow", {**a.declaration("workflow"), "outputs": {"structures": 4}})
    path = attempt.payload / ".httk-job" / "declarations" / "workflow.json"
    assert path.read_bytes() == codec.encode({"inputs": {"a": 1}, "outputs": {"structures": 4}})
    assert a.declaration("workflow") == {"inputs": {"a": 1}, "outputs": {"structures": 4}}
    with pytest.raises(ValueError, match="declaration name"):
        a.declare("Bad Name", {})
    with pytest.raises(TypeError, match="JSON object"):
        a.declare("workflow", [1, 2])  # type: ignore[arg-type]


def test_run_log_lines(make_attempt):
    attempt = make_attempt("start")
    a = Attempt.initialize()
    (a.workdir / "OUTCAR").write_bytes(b"energy\n")
    a.log.append("triage", "3 of 5 sites did not relax")
    a.log.append("summary", "read me first", kind="headline")
    a.log.append("outputs", "the results", kind="files", files=["OUTCAR"])
    with pytest.raises(ValueError, match="kind"):
        a.log.append("x", "y", kind="loud")
    with pytest.raises(ValueError, match="at least one file"):
        a.log.append("x", "y", kind="files")
    path = attempt.workdir / ".httk-runner" / "runlog.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    assert all(line == codec.encode(event) for line, event in zip(lines, events, strict=True))
    assert [(e["kind"], e["label"], e["message"]) for e in events] == [
        ("note", "triage", "3 of 5 sites did not relax"),
        ("headline", "summary", "read me first"),
        ("files", "outputs", "the results"),
    ]
    first = events[0]
    assert set(first) == {"format", "format_version", "kind", "label", "message", "files", "time", "step", "attempt_id"}
    assert (first["format"], first["format_version"], first["files"]) == ("httk-workflow-runlog-event", 1, [])
    assert (first["step"], first["attempt_id"]) == ("start", attempt.attempt_id)
    assert isinstance(first["time"], float)
    assert events[2]["files"] == [{"path": "OUTCAR", "size": 7, "sha256": hashlib.sha256(b"energy\n").hexdigest()}]
    assert a.log.read() == events


def test_initialize_reads_an_explicit_environment(make_attempt, monkeypatch):
    attempt = make_attempt("start")
    environ = attempt.path_env()
    monkeypatch.delenv("HTTK_WORKFLOW_WORKDIR")
    assert Attempt.initialize(environ=environ).workdir == attempt.workdir
    with pytest.raises(RuntimeError, match="HTTK_WORKFLOW_WORKDIR is not set"):
        Attempt.initialize()


def test_job_is_the_typed_definition(make_attempt, workspace_spec):
    spec = workspace_spec(retry_on=("x",))
    make_attempt("start", spec=spec)
    assert isinstance(Attempt.initialize().job, JobSpec)


def test_job_json_is_read_on_first_use(make_attempt):
    """A state or run-log call (most Bash bridge calls) never structures job.json; reading the job does."""
    attempt = make_attempt("start")
    job_file = attempt.payload / "job.json"
    original = job_file.read_bytes()
    job_file.write_bytes(b'{"format": "httk-workflow-job", "format_version": 1, "name": 5}\n')
    a = Attempt.initialize()
    a.state["k"] = 1
    a.log.append("note", "no job needed")
    with pytest.raises(DocumentError, match=r"job\.json @ \$\.name"):
        a.inputs  # noqa: B018
    job_file.write_bytes(original)
    assert a.job.name == JobSpec.from_record(codec.read(original, JobDocument, "job.json")).name
