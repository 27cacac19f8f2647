"""The Bash runner SDK and its bridge with awkward arguments, early exits and damaged attempt files."""

from __future__ import annotations

import json
import os

from shell_support import bridge

from httk.workflow import codec

AWKWARD = "a b\n'q' \"d\" * $HOME `x` \\ ü"


def test_awkward_strings_survive_state_and_fail_verbatim(make_attempt, runners, monkeypatch):
    fake = make_attempt("start")
    body = 'step_start() {\n    httk_workflow_state_set k "$AWKJSON"\n    httk_workflow_fail "code" "$AWK"\n}\n'
    monkeypatch.setenv("AWK", AWKWARD)
    monkeypatch.setenv("AWKJSON", json.dumps(AWKWARD))
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    assert json.loads((fake.payload / ".httk-job" / "state.json").read_bytes()) == {"k": AWKWARD}
    assert fake.outcome()["failure"]["message"] == AWKWARD


def test_handler_exit_zero_without_outcome_is_no_outcome(make_attempt, runners):
    fake = make_attempt("start")
    result = runners.bash("step_start() {\n    exit 0\n    httk_workflow_succeed\n}\n")
    assert result.returncode == 0, result.stderr
    assert fake.outcome()["failure"]["code"] == "no_outcome"


def test_bridge_outside_an_attempt_is_refused_with_one_line(make_attempt):
    make_attempt("start")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HTTK_WORKFLOW_")}
    result = bridge("state_get", "k", env=env)
    assert result.returncode == 2
    assert "must be launched by an httk-workflow task manager" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_batch_lines_with_quoting_and_json_arrays(make_attempt):
    fake = make_attempt("start")
    lines = "\n".join(
        [
            "# a comment",
            """httk_workflow_state_set a '"x y"'""",
            json.dumps(["state_set", "b", json.dumps(AWKWARD)]),
            "",
            "state_get a",
        ]
    )
    result = bridge("batch", stdin=lines + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "x y\n"
    assert json.loads((fake.payload / ".httk-job" / "state.json").read_bytes()) == {"a": "x y", "b": AWKWARD}


def test_batch_unbalanced_quote_is_refused(make_attempt):
    make_attempt("start")
    result = bridge("batch", stdin="state_set a '\"x\n")
    assert result.returncode == 2 and "line 1" in result.stderr


def test_second_terminal_call_is_refused_with_status_2(make_attempt):
    fake = make_attempt("start")
    assert bridge("succeed").returncode == 0
    second = bridge("fail", "late")
    assert second.returncode == 2 and "already published" in second.stderr
    assert fake.outcome()["action"] == "succeed"


def test_damaged_workdir_batch_is_refused_not_absent(make_attempt):
    fake = make_attempt("start")
    ready = fake.workdir / ".httk-runner" / "workdir-ready" / "b1"
    ready.mkdir(parents=True)
    document = {"format": "httk-workflow-workdir-batch", "format_version": 1, "id": "b1", "operations": [{"op": "x"}]}
    document["operations"] = [{"op": "remove"}]
    (ready / "ops.json").write_bytes(codec.encode(document))
    result = bridge("state_get", "k")
    assert result.returncode == 2
    assert result.stderr.strip()


def test_unexpected_bridge_exception_is_status_2(make_attempt):
    fake = make_attempt("start")
    ready = fake.workdir / ".httk-runner" / "workdir-ready" / "b1"
    ready.mkdir(parents=True)
    document = {"format": "httk-workflow-workdir-batch", "format_version": 1, "id": "b1", "operations": ["x"]}
    (ready / "ops.json").write_bytes(codec.encode(document))
    result = bridge("state_get", "k")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
