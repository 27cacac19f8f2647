"""The httk-workflow 2.1 Bash spellings still accepted (one-argument runlog notes), the removed
``httk_workflow_parameter``, and the NAME=VALUE value rule (issue 18)."""

from __future__ import annotations

import json
import subprocess

import pytest
from shell_support import TIMEOUT, bash_env, bridge

from httk.workflow.codec import json_or_text
from httk.workflow.shell_attempt import COMMANDS, Refused, assignments


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("-1.5", -1.5),
        ("true", True),
        ("null", None),
        ('["a", 1]', ["a", 1]),
        ('{"k": 1}', {"k": 1}),
        ('"alpha"', "alpha"),
        ("alpha", "alpha"),
        ("007", "007"),  # a leading zero is not JSON
        ("{nope", "{nope"),
        ("NaN", "NaN"),  # Python's parser would take it; JSON does not
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_a_value_that_parses_as_json_is_json_otherwise_a_string(text, value):
    assert json_or_text(text) == value and type(json_or_text(text)) is type(value)
    assert assignments([f"name={text}"], "--input") == {"name": value}


def test_a_pair_without_a_name_is_refused_and_a_later_name_wins():
    with pytest.raises(Refused, match="--input must be NAME=VALUE, got 'site'"):
        assignments(["site"], "--input")
    with pytest.raises(Refused, match="NAME=VALUE"):
        assignments(["=1"], "--input")
    assert assignments(["a=1", "a=two"], "--input") == {"a": "two"}


def test_advance_takes_repeated_pairs_and_json_objects(make_attempt, runners):
    attempt = make_attempt("start")
    call = (
        "httk_workflow_advance relax --state name=alpha --state size=2 "
        "--state '{\"tags\": [\"x\"], \"ok\": true}' --state code=007 --state 'size=3'"
    )
    result = runners.bash(f"step_start() {{ {call}; }}\nstep_relax() {{ :; }}", steps="start relax")
    assert result.returncode == 0, result.stderr
    assert attempt.outcome() == attempt.expected("advance", ["relax", "start"], next_step="relax", priority=None)
    state = json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes())
    assert state == {"name": "alpha", "size": 3, "tags": ["x"], "ok": True, "code": "007"}


def refused(attempt, *argv: str) -> str:
    """The one stderr line of a bridge command refused with status 2 that wrote nothing in the control directory."""
    result = bridge(*argv)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert sorted(path.name for path in attempt.control.iterdir()) == ["context.json"]
    return lines[0]


@pytest.mark.parametrize("bad", ["{nope", "[1]", "novalue"])
def test_a_bad_state_argument_is_refused_and_writes_nothing(make_attempt, bad):
    attempt = make_attempt("start")
    assert "--state" in refused(attempt, "advance", "relax", "--state", "k=1", "--state", bad)
    assert not (attempt.payload / ".httk-job" / "state.json").exists()


def test_spawn_input_pairs_follow_the_value_rule(make_attempt, runners):
    attempt = make_attempt("start")
    body = (
        "step_start() {\n"
        "    httk_workflow_spawn --label a --step relax --input name=alpha --input size=2 "
        "--input 'quoted=\"2\"' >/dev/null\n"
        "    httk_workflow_gather relax\n"
        "}\nstep_relax() { :; }\n"
    )
    result = runners.bash(body, steps="start relax")
    assert result.returncode == 0, result.stderr
    (entry,) = attempt.spawned()["children"]
    job = json.loads((attempt.ready / "children" / entry["payload"] / "job.json").read_bytes())
    assert job["inputs"] == {"name": "alpha", "size": 2, "quoted": "2"}


def test_the_2_1_spelling_httk_workflow_parameter_is_gone(make_attempt, workspace_spec):
    """Spec 002 lists no row for it: the library defines no such function and the bridge no such command."""
    make_attempt("start", spec=workspace_spec(inputs={"name": "Si"}))
    assert "parameter" not in COMMANDS
    check = subprocess.run(
        ["bash", "-c", 'source "$HTTK_WORKFLOW_SHELL_LIB"; declare -F httk_workflow_parameter'],
        env=bash_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert check.returncode == 1 and check.stdout == ""
    for result in (bridge("parameter", "name"), bridge("batch", stdin="httk_workflow_parameter name\n")):
        assert result.returncode == 2 and "unknown command 'parameter'" in result.stderr and result.stdout == ""


def test_input_without_a_name_prints_the_inputs_object(make_attempt, workspace_spec):
    make_attempt("start", spec=workspace_spec(inputs={"site": [1, 2], "name": "Si"}))
    assert bridge("input").stdout == '{"name":"Si","site":[1,2]}\n'  # Attempt.inputs, canonical JSON
    assert bridge("input", "name").stdout == "Si\n"
    make_attempt("start", spec=workspace_spec(inputs={}))
    assert (bridge("input").returncode, bridge("input").stdout) == (0, "{}\n")  # no inputs is an empty object


def test_a_usage_error_names_the_function_called(make_attempt):
    line = refused(make_attempt("start"), "input", "a", "b", "c")
    assert line == "httk_workflow_input: usage: httk_workflow_input [NAME [DEFAULT]]"


def test_runlog_note_with_one_argument_takes_the_default_label(make_attempt, runners):
    attempt = make_attempt("start")
    body = (
        "step_start() {\n"
        "    httk_workflow_runlog_note 'just a message'\n"
        "    httk_workflow_runlog_note note 'just a message'\n"
        "    httk_workflow_succeed\n"
        "}\n"
    )
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    lines = (attempt.workdir / ".httk-runner" / "runlog.jsonl").read_bytes().splitlines()
    events = [json.loads(line) for line in lines]
    assert [(event["kind"], event["label"], event["message"]) for event in events] == [
        ("note", "note", "just a message")
    ] * 2
    assert [{**event, "time": 0} for event in events][0] == {**events[1], "time": 0}


def test_runlog_note_still_refuses_no_message_or_too_many(make_attempt):
    attempt = make_attempt("start")
    for args in ((), ("a", "b", "c")):
        result = bridge("runlog_note", *args)
        assert result.returncode == 2 and "usage: httk_workflow_runlog_note [LABEL] MESSAGE" in result.stderr
    assert not (attempt.workdir / ".httk-runner" / "runlog.jsonl").exists()
