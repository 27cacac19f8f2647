"""The Bash runner SDK (shell/httk-workflow.sh) run as real Bash runners against hand-built attempts.

Attempts are laid out by the Python SDK's own test harness (tests/attempt_support.py,
the ``make_attempt`` fixture: payload via ``prepare_job_payload``, control directory,
``context.json``, ``HTTK_WORKFLOW_*``), and each runner is a Bash script started as a
subprocess, exactly as the manager starts one (tests/shell/shell_support.py). Where the
Python SDK has the same operation, the bytes both leave behind are compared.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from shell_support import LIB, bash_env

from attempt_support import ENV_VARS
from httk.workflow import codec
from httk.workflow.protocol import JobSpec, prepare_job_payload

ROOT = Path(__file__).resolve().parents[2]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
UUID_BYTES = re.compile(UUID.pattern.encode())


def scrub(data: bytes) -> bytes:
    """``data`` with every uuid replaced, so two runs compare."""
    return UUID_BYTES.sub(b"<uuid>", data)


def script(text: str) -> str:
    """A Bash snippet written indented in this file, as Bash sees it."""
    return textwrap.dedent(text).strip("\n")


# Runs one command with errexit out of the way and prints name, status and output.
PROBE = r"""
probe() {
    local name=$1 out status=0
    shift
    out=$("$@" 2>/dev/null) || status=$?
    printf '%s\x1f%s\x1f%s\x1e' "$name" "$status" "$out"
}
"""


def probes(stdout: str) -> dict[str, tuple[int, str]]:
    result = {}
    for record in stdout.split("\x1e")[:-1]:
        name, status, out = record.split("\x1f")
        result[name] = (int(status), out)
    return result


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` by relative path, uuids replaced in names and contents."""
    return {
        UUID.sub("<uuid>", path.relative_to(root).as_posix()): scrub(path.read_bytes())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


# --------------------------------------------------------------------------- describing and dispatching


def test_describe_matches_the_python_runner_byte_for_byte(tmp_path):
    env = {
        key: value
        for key, value in bash_env().items()
        if not key.startswith("HTTK_WORKFLOW_") or key in ("HTTK_WORKFLOW_SHELL_LIB", "HTTK_WORKFLOW_PYTHON")
    }
    python = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "defects" / "defects.py"), "--describe"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=True,
    )
    for args, extra in ((["--describe"], {}), ([], {"HTTK_WORKFLOW_DESCRIBE": "1"})):
        bash = subprocess.run(
            ["bash", str(ROOT / "examples" / "defects" / "defects.sh"), *args],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            check=True,
        )
        assert bash.stdout == python.stdout
    assert json.loads(python.stdout)["steps"] == ["aggregate", "characterize", "relax", "triage"]
    assert list(tmp_path.iterdir()) == []


def test_main_refuses_bad_usage_and_undeclared_runners(make_attempt, runners):
    make_attempt("start")
    assert runners.bash("step_start() { httk_workflow_succeed; }", args=("--verbose",)).returncode == 2
    missing = runners.bash("step_start() { :; }", steps="start other")
    assert missing.returncode == 2 and "step_other" in missing.stderr
    invalid = runners.bash("step_start() { :; }", steps="'bad name'")
    assert invalid.returncode == 2 and "invalid step name" in invalid.stderr
    twice = runners.bash("step_start() { :; }", steps="start start")
    assert twice.returncode == 2 and "declared twice" in twice.stderr
    script = runners.directory / "undeclared.sh"
    script.write_text('source "$HTTK_WORKFLOW_SHELL_LIB"\nhttk_workflow_main\n', encoding="utf-8")
    result = subprocess.run(["bash", str(script)], env=bash_env(), capture_output=True, text=True)
    assert result.returncode == 2 and "httk_workflow_runner" in result.stderr


def test_main_outside_a_manager_is_refused(runners, monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    result = runners.bash("step_start() { httk_workflow_succeed; }")
    assert result.returncode == 2
    assert "HTTK_WORKFLOW_CONTEXT is not set" in result.stderr


def test_unknown_step_and_no_outcome_publish_what_python_publishes(make_attempt, runners):
    bash_cases = {
        "other": "step_start() { :; }",
        "start": "step_start() { httk_workflow_spawn --label c --step start; }",
    }
    python_cases = {
        "other": "@run.step\ndef start(a):\n    pass",
        "start": "@run.step\ndef start(a):\n    a.spawn(ChildSpec(step='start'), label='c')",
    }
    for step in ("other", "start"):
        documents = []
        for language in ("bash", "python"):
            attempt = make_attempt(step)
            result = runners.bash(bash_cases[step]) if language == "bash" else runners.python(python_cases[step])
            assert result.returncode == 0, result.stderr
            assert attempt.drafts() == []
            assert sorted(path.name for path in attempt.ready.iterdir()) == ["outcome.json"]  # the spawn is gone
            documents.append(scrub((attempt.ready / "outcome.json").read_bytes()))
            runner_steps = attempt.payload / ".httk-job" / "runner-steps.json"
            assert runner_steps.read_bytes() == codec.encode({"steps": ["start"], "workflow": "demo"})
        assert documents[0] == documents[1]
        failure = json.loads(documents[0])["failure"]
        if step == "other":
            assert failure["code"] == "unknown_step"
            assert failure["message"] == "step 'other' is not implemented; registered steps: start"
        else:
            assert failure["code"] == "no_outcome"
            assert failure["message"] == "step 'start' returned without publishing an outcome"


# --------------------------------------------------------------------------- every ending is an outcome


def test_errexit_death_discards_the_draft_and_leaves_a_breadcrumb(make_attempt, runners):
    attempt = make_attempt("start")
    body = script(
        r"""
        step_start() {
            httk_workflow_spawn --label c --step start >/dev/null
            echo before
            grep -q needle /dev/null
            echo after
        }
        """
    )
    result = runners.bash(body)
    assert result.returncode == 1
    assert "before" in result.stdout and "after" not in result.stdout
    assert attempt.drafts() == [] and not attempt.ready.exists()
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert error == {
        "format": "httk-workflow-runner-error",
        "format_version": 1,
        "step": "start",
        "exception": "CommandFailed",
        "message": "command 'grep -q needle /dev/null' failed with status 1",
        "file": str(runners.directory / "runner-1.sh"),
        "line": 6,
        "command": "grep -q needle /dev/null",
    }


def test_a_refused_sdk_call_dies_at_the_callers_line(make_attempt, runners):
    attempt = make_attempt("start")
    result = runners.bash("step_start() {\n    httk_workflow_succeed\n    httk_workflow_succeed\n}")
    assert result.returncode == 2
    assert "already published" in result.stderr
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"], error["file"]) == (
        5,
        "httk_workflow_succeed",
        str(runners.directory / "runner-1.sh"),
    )
    assert attempt.outcome()["action"] == "succeed"  # the first outcome is undisturbed


def test_a_failing_command_substitution_and_an_explicit_exit(make_attempt, runners):
    attempt = make_attempt("start")
    result = runners.bash("step_start() {\n    value=$(httk_workflow_state_get missing)\n}")
    assert result.returncode == 1
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"]) == (4, "value=$(httk_workflow_state_get missing)")

    attempt = make_attempt("start")
    result = runners.bash("step_start() {\n    httk_workflow_spawn --label c --step start\n    exit 3\n}")
    assert result.returncode == 3
    error = json.loads((attempt.control / "error.json").read_bytes())
    # No line is known for an explicit exit: error.json writes a member only when it is set.
    assert (error["exception"], error["command"], "line" in error) == ("HandlerExit", "exit 3", False)
    assert attempt.drafts() == [] and not attempt.ready.exists()


def test_a_handlers_own_return_n_names_its_line(make_attempt, runners):
    attempt = make_attempt("start")
    # The audit's case: ERR for the handler's own `return 3` fires in the library's frame, not the handler's.
    result = runners.bash("helper() {\n    return 4\n}\nstep_start() {\n    :\n    return 3\n}")
    assert result.returncode == 3
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["file"], error["line"], error["command"]) == (str(runners.directory / "runner-1.sh"), 8, "return 3")
    assert error["message"] == "command 'return 3' failed with status 3"

    attempt = make_attempt("start")  # a helper's `return 4` fails at the handler's line that called it
    result = runners.bash("helper() {\n    return 4\n}\nstep_start() {\n    :\n    helper\n}")
    assert result.returncode == 4
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"]) == (8, "return 4")


def test_a_return_after_a_tolerated_call_failure_is_not_named_after_the_call(make_attempt, runners):
    attempt = make_attempt("start")
    body = "step_start() {\n    httk_workflow_state_get missing || true\n    return 5\n}"
    result = runners.bash(body)
    assert result.returncode == 5
    error = json.loads((attempt.control / "error.json").read_bytes())
    assert (error["line"], error["command"]) == (5, "return 5")

    attempt = make_attempt("start")  # a handler whose last list fails names its file, and no line it cannot know
    result = runners.bash("step_start() {\n    :\n    false && true\n}")
    assert result.returncode == 1
    error = json.loads((attempt.control / "error.json").read_bytes())
    where = (str(runners.directory / "runner-2.sh"), "false", False)
    assert (error["file"], error["command"], "line" in error) == where


def test_an_explicit_exit_0_after_publishing_is_fine(make_attempt, runners):
    attempt = make_attempt("start")
    assert runners.bash("step_start() { httk_workflow_succeed; exit 0; }").returncode == 0
    assert attempt.outcome()["action"] == "succeed"
    assert not (attempt.control / "error.json").exists()


# --------------------------------------------------------------------------- reading


def test_reading_functions_and_their_statuses(make_attempt, runners, workspace_spec):
    spec = workspace_spec(inputs={"n": 3, "s": "text", "none": None}, declarations={"workflow": {"v": 1}})
    attempt = make_attempt("start", spec=spec, settings={"vasp.command": "vasp_std", "cores": 8})
    body = PROBE + script(
        r"""
        step_start() {
            probe context httk_workflow_context
            probe context_step httk_workflow_context step
            probe context_durable httk_workflow_context durable
            probe context_nested httk_workflow_context runner.source
            probe context_null httk_workflow_context data
            probe context_usage httk_workflow_context a b
            probe input_n httk_workflow_input n
            probe input_s httk_workflow_input s
            probe input_null httk_workflow_input none
            probe input_default httk_workflow_input missing fallback
            probe input_missing httk_workflow_input missing
            probe input_all httk_workflow_input
            probe input_usage httk_workflow_input a b c
            probe setting_env httk_workflow_setting vasp.command
            probe setting_typed httk_workflow_setting cores
            probe setting_input httk_workflow_setting n
            probe setting_default httk_workflow_setting absent 7
            probe setting_missing httk_workflow_setting absent
            probe state_empty httk_workflow_state_get
            probe state_unset httk_workflow_state_get key
            probe declared httk_workflow_declaration workflow
            probe undeclared httk_workflow_declaration other
            probe bad_declaration httk_workflow_declaration 'Bad Name'
            probe children httk_workflow_children
            probe child httk_workflow_child site-0
            httk_workflow_succeed
        }
        """
    )
    result = runners.bash(body, env={"HTTK_VASP_COMMAND": "srun vasp_std", "HTTK_CORES": "8"})
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    context = json.loads((attempt.control / "context.json").read_bytes())
    assert seen["context"] == (0, codec.dumps(context))
    assert seen["context_step"] == (0, "start")
    assert seen["context_durable"] == (0, "false")
    assert seen["context_nested"] == (0, "workspace")
    assert seen["context_null"][0] == 1
    assert seen["context_usage"][0] == 2
    assert seen["input_n"] == (0, "3")
    assert seen["input_s"] == (0, "text")
    assert seen["input_null"] == (0, "null")
    assert seen["input_default"] == (0, "fallback")
    assert seen["input_missing"] == (1, "")
    assert seen["input_all"] == (0, codec.dumps({"n": 3, "s": "text", "none": None}))  # Attempt.inputs
    assert seen["input_usage"][0] == 2
    assert seen["setting_env"] == (0, "srun vasp_std")  # the environment beats the workspace settings
    assert seen["setting_typed"] == (0, "8")
    assert seen["setting_input"] == (0, "3")  # the job's inputs beat both
    assert seen["setting_default"] == (0, "7")
    assert seen["setting_missing"] == (1, "")
    assert seen["state_empty"] == (0, "{}")
    assert seen["state_unset"] == (1, "")
    assert seen["declared"] == (0, '{"v":1}')
    assert seen["undeclared"] == (1, "")
    assert seen["bad_declaration"][0] == 2
    assert seen["children"] == (0, "")
    assert seen["child"] == (1, "")


def test_every_absent_answer_is_status_1_and_silent(make_attempt, runners, workspace_spec):
    """Spec 002's discipline for every row with an absent answer: status 1, nothing on stdout or stderr."""
    make_attempt("start", spec=workspace_spec(inputs={"n": 3}))
    calls = [
        "httk_workflow_context data",
        "httk_workflow_context no.such.member",
        "httk_workflow_input missing",
        "httk_workflow_setting absent.thing",
        "httk_workflow_state_get unset",
        "httk_workflow_state_delete unset",
        "httk_workflow_declaration other",
        "httk_workflow_child nosuch",
        "httk_workflow_child nosuch kind",
        "httk_template_render <(printf '{{ sites.3 }}') '{\"sites\": []}'",
    ]
    record = '    status=0; {} >>"$OUT" 2>>"$ERR" || status=$?; echo "$status" >>"$STATUS"\n'
    lines = "".join(record.format(call) for call in calls)
    out, err, status = (runners.directory / name for name in ("out", "err", "status"))
    env = {"OUT": str(out), "ERR": str(err), "STATUS": str(status)}
    result = runners.bash(f"step_start() {{\n    local status\n{lines}    httk_workflow_succeed\n}}", env=env)
    assert result.returncode == 0, result.stderr
    assert status.read_text().split() == ["1"] * len(calls)
    assert out.read_text() == "" and err.read_text() == ""


def test_children_and_child_fields(make_attempt, runners, tmp_path):
    failure = {"code": "relax_diverged", "message": "no", "details": {}, "retryable": False}
    children = [
        {
            "label": f"site-{index}",
            "job_id": f"j{index}",
            "job_key": f"site-{index}--j{index}",
            "kind": kind,
            "failure": child_failure,
            "payload": str(tmp_path / f"p{index}"),
            "workdir": str(tmp_path / f"w{index}"),
            "data": None,
        }
        for index, (kind, child_failure) in enumerate([("succeeded", None), ("failed", failure)])
    ]
    make_attempt("aggregate", children=children)
    body = PROBE + script(
        r"""
        step_aggregate() {
            probe all httk_workflow_children
            probe succeeded httk_workflow_children --succeeded
            probe failed httk_workflow_children --failed
            probe json httk_workflow_children --json
            probe both httk_workflow_children --succeeded --failed
            probe child httk_workflow_child site-1
            probe kind httk_workflow_child site-1 kind
            probe code httk_workflow_child site-1 failure.code
            probe workdir httk_workflow_child site-0 workdir
            probe null_failure httk_workflow_child site-0 failure
            probe null_data httk_workflow_child site-0 data
            probe unknown_field httk_workflow_child site-0 colour
            probe unknown_failure_field httk_workflow_child site-1 failure.colour
            probe scalar_member httk_workflow_child site-1 kind.x
            probe code_member httk_workflow_child site-1 failure.code.x
            probe missing_detail httk_workflow_child site-1 failure.details.why
            probe null_failure_code httk_workflow_child site-0 failure.code
            probe unobserved httk_workflow_child site-9
            httk_workflow_succeed
        }
        """
    )
    result = runners.bash(body, steps="aggregate")
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    assert seen["all"] == (0, "site-0\nsite-1")
    assert seen["succeeded"] == (0, "site-0")
    assert seen["failed"] == (0, "site-1")
    assert json.loads(seen["json"][1]) == children
    assert seen["both"][0] == 2
    assert json.loads(seen["child"][1]) == children[1]
    assert seen["kind"] == (0, "failed")
    assert seen["code"] == (0, "relax_diverged")
    assert seen["workdir"] == (0, str(tmp_path / "w0"))
    assert seen["null_failure"] == (1, "")
    assert seen["null_data"] == (1, "")
    assert seen["unknown_field"][0] == 2
    # A path that names no member of ChildResult is refused, as Python's attribute access would refuse it;
    # a missing key of the application's own failure.details, or a field of a null failure, is absent.
    assert seen["unknown_failure_field"][0] == seen["scalar_member"][0] == seen["code_member"][0] == 2
    assert seen["missing_detail"] == seen["null_failure_code"] == (1, "")
    assert seen["unobserved"] == (1, "")


# --------------------------------------------------------------------------- state, declarations, run log


def test_state_declarations_and_runlog_write_the_bytes_python_writes(make_attempt, runners):
    bash_body = PROBE + script(
        r"""
        step_start() {
            echo data > evidence.txt
            httk_workflow_state_set energy -12.5
            httk_workflow_state_set tags '["a", "b"]'
            httk_workflow_state_merge '{"converged": true, "attempts": 3, "gone": 1}'
            probe delete httk_workflow_state_delete gone
            probe delete_again httk_workflow_state_delete gone
            probe get httk_workflow_state_get tags
            probe bad_json httk_workflow_state_set x '{nope'
            probe bad_merge httk_workflow_state_merge '[1]'
            httk_workflow_declare workflow '{"outputs": {"structures": 3}}'
            probe bad_declare httk_workflow_declare workflow '[1]'
            probe declaration httk_workflow_declaration workflow
            httk_workflow_runlog_note relax 'started'
            httk_workflow_runlog_headline result 'energy -12.5 eV'
            httk_workflow_runlog_append evidence 'the input' evidence.txt
            probe runlog_missing httk_workflow_runlog_append evidence 'x' missing.txt
            probe runlog_nofile httk_workflow_runlog_append evidence 'x'
            httk_workflow_succeed
        }
        """
    )
    python_body = script(
        r"""
        @run.step
        def start(a):
            (a.workdir / 'evidence.txt').write_text('data\n')
            a.state['energy'] = -12.5
            a.state['tags'] = ['a', 'b']
            a.state.merge({'converged': True, 'attempts': 3, 'gone': 1})
            a.state.delete('gone')
            a.declare('workflow', {'outputs': {'structures': 3}})
            a.log.append('relax', 'started')
            a.log.append('result', 'energy -12.5 eV', kind='headline')
            a.log.append('evidence', 'the input', kind='files', files=['evidence.txt'])
            a.succeed()
        """
    )
    left = []
    for language in ("bash", "python"):
        attempt = make_attempt("start")
        result = runners.bash(bash_body) if language == "bash" else runners.python(python_body)
        assert result.returncode == 0, result.stderr
        private = tree(attempt.payload / ".httk-job")
        events = [
            json.loads(line) for line in (attempt.workdir / ".httk-runner" / "runlog.jsonl").read_bytes().splitlines()
        ]
        for event in events:
            assert event.pop("attempt_id") == attempt.attempt_id
            assert isinstance(event.pop("time"), float)
        left.append((private, events, scrub((attempt.ready / "outcome.json").read_bytes())))
        if language == "bash":
            seen = probes(result.stdout)
            assert seen["delete"] == (0, "") and seen["delete_again"] == (1, "")
            assert seen["get"] == (0, '["a","b"]')
            assert seen["bad_json"][0] == seen["bad_merge"][0] == seen["bad_declare"][0] == 2
            assert seen["declaration"] == (0, '{"outputs":{"structures":3}}')
            assert seen["runlog_missing"][0] == seen["runlog_nofile"][0] == 2
    assert left[0] == left[1]
    private, events, _ = left[0]
    assert json.loads(private["state.json"]) == {"attempts": 3, "converged": True, "energy": -12.5, "tags": ["a", "b"]}
    assert [event["kind"] for event in events] == ["note", "headline", "files"]
    assert events[2]["files"][0]["path"] == "evidence.txt"


def test_log_writes_one_timestamped_line_to_stderr(make_attempt, runners):
    make_attempt("start")
    body = PROBE + (
        "step_start() {\n"
        "    httk_workflow_log info 'hello world'\n"
        "    httk_workflow_log warn careful\n"
        "    probe level httk_workflow_log LOUD x\n"
        "    httk_workflow_succeed\n"
        "}"
    )
    result = runners.bash(body)
    assert result.returncode == 0
    lines = result.stderr.splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})?"
    assert re.fullmatch(stamp + " INFO hello world", lines[0])
    assert re.fullmatch(stamp + " WARNING careful", lines[1])
    assert probes(result.stdout)["level"][0] == 2


# --------------------------------------------------------------------------- the draft and the outcome


SPAWN_BASH = script(
    r"""
    step_start() {
        echo energy > energy.txt
        mkdir -p bands && echo k > bands/k1
        httk_workflow_spawn --label site-0 --step relax --input 'site=0' --maximum-attempts-per-activation 2 \
            --retry-on scf >/dev/null
        httk_workflow_spawn --label site-1 --step relax --inputs '{"site": 1}' --priority 4 >/dev/null
        httk_workflow_put energy.txt results/energy.txt
        httk_workflow_put bands results/bands
        httk_workflow_remove scratch --missing-ok
        httk_workflow_gather relax --when at_least --count 1 --on-impossible start
    }
    step_relax() { :; }
    """
)
SPAWN_PYTHON = script(
    r"""
    @run.step
    def start(a):
        (a.workdir / 'energy.txt').write_text('energy\n')
        (a.workdir / 'bands').mkdir()
        (a.workdir / 'bands' / 'k1').write_text('k\n')
        first = ChildSpec(step='relax', inputs={'site': 0}, maximum_attempts_per_activation=2, retry_on=['scf'])
        a.spawn(first, label='site-0')
        a.spawn(ChildSpec(step='relax', inputs={'site': 1}, priority=4), label='site-1')
        a.put('energy.txt', 'results/energy.txt')
        a.put('bands', 'results/bands')
        a.remove('scratch', missing_ok=True)
        a.gather('relax', when='at_least', count=1, on_impossible='start')
    @run.step
    def relax(a):
        pass
    """
)


def test_one_draft_across_many_bridge_calls_publishes_what_python_publishes(make_attempt, runners, workspace_spec):
    published = []
    for language in ("bash", "python"):
        attempt = make_attempt("start", spec=workspace_spec(data_mode="transactional"))
        if language == "bash":
            result = runners.bash(SPAWN_BASH, steps="start relax")
        else:
            result = runners.python(SPAWN_PYTHON)
        assert result.returncode == 0, result.stderr
        assert attempt.drafts() == []
        published.append(tree(attempt.ready))
    assert published[0] == published[1]
    names = sorted(published[0])
    assert names == [
        "children/jobs/site-0--<uuid>/job.json",
        "children/jobs/site-1--<uuid>/job.json",
        "children/spawn.json",
        "outcome.json",
        "transaction/files/op-0001",
        "transaction/files/op-0002/k1",
        "transaction/manifest.json",
    ]


def test_staging_and_publishing_refusals(make_attempt, runners, workspace_spec):
    make_attempt("start")  # data mode none
    body = PROBE + script(
        r"""
        step_start() {
            probe put_none httk_workflow_put x results/x
            probe spawn_no_label httk_workflow_spawn --step relax
            probe spawn_bad_label httk_workflow_spawn --label Bad --step relax
            probe spawn_neither httk_workflow_spawn --label a
            probe spawn_unknown_step httk_workflow_spawn --label a --step nowhere
            probe spawn_bad_input httk_workflow_spawn --label a --step relax --input site
            probe spawn_payload_and_input httk_workflow_spawn --label a --payload . --input x=1
            probe spawn_bad_runner httk_workflow_spawn --label a --step relax --runner other
            probe spawn httk_workflow_spawn --label a --step relax
            probe spawn_again httk_workflow_spawn --label a --step relax
            probe gather_unknown httk_workflow_gather nowhere
            probe gather_when httk_workflow_gather relax --when sometimes
            probe gather_count httk_workflow_gather relax --when at_least --count 5
            probe advance_unknown httk_workflow_advance colect
            probe fail_details httk_workflow_fail code msg --details '[1]'
            probe priority httk_workflow_advance relax --priority high
            probe option httk_workflow_succeed --now
            probe gather httk_workflow_gather relax
            probe succeed_after httk_workflow_succeed
            probe spawn_after httk_workflow_spawn --label b --step relax
        }
        step_relax() { :; }
        """
    )
    result = runners.bash(body, steps="start relax")
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    refused = [name for name, (status, _) in seen.items() if status == 2]
    assert sorted(refused) == sorted(name for name in seen if name not in ("spawn", "gather")), seen
    assert seen["spawn"][0] == 0 and re.fullmatch(r"a--" + UUID.pattern, seen["spawn"][1])
    assert seen["gather"] == (0, "")


def test_put_and_remove_print_their_operation_identifier(make_attempt, runners, workspace_spec):
    attempt = make_attempt("start", spec=workspace_spec(data_mode="transactional"))
    body = PROBE + script(
        r"""
        step_start() {
            echo x > f
            probe put httk_workflow_put f results/f
            probe remove httk_workflow_remove old --missing-ok
            probe newline httk_workflow_put f $'bad\nname'
            probe put_again httk_workflow_put f results/g
            httk_workflow_succeed
        }
        """
    )
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    assert seen["put"] == (0, "op-0001") and seen["remove"] == (0, "op-0002") and seen["put_again"] == (0, "op-0003")
    assert seen["newline"][0] == 2  # a control character in the destination is refused
    operations = json.loads((attempt.ready / "transaction" / "manifest.json").read_bytes())["operations"]
    assert [operation["id"] for operation in operations] == ["op-0001", "op-0002", "op-0003"]


def test_a_second_process_refuses_two_drafts(make_attempt, runners):
    attempt = make_attempt("start")
    (attempt.control / "outcome.tmp.one").mkdir()
    (attempt.control / "outcome.tmp.two").mkdir()
    result = runners.bash("step_start() { httk_workflow_succeed; }")
    assert result.returncode == 2
    assert "more than one unpublished draft" in result.stderr


def test_terminal_calls_publish_the_canonical_documents(make_attempt, runners):
    cases = {
        "httk_workflow_fail relax_diverged 'site 3' --details '{\"site\": 3}' --retryable": (
            "fail",
            {"failure": {"code": "relax_diverged", "message": "site 3", "details": {"site": 3}, "retryable": True}},
        ),
        "httk_workflow_fail bare": (
            "fail",
            {"failure": {"code": "bare", "message": "", "details": {}, "retryable": False}},
        ),
        "httk_workflow_retry 'timed out'": ("retry", {"reason": "timed out"}),
        "httk_workflow_pause": ("pause", {"reason": ""}),
        "httk_workflow_advance relax --state '{\"k\": 1}' --priority -2": (
            "advance",
            {"next_step": "relax", "priority": -2},
        ),
        "httk_workflow_succeed": ("succeed", {}),
    }
    for call, (action, members) in cases.items():
        attempt = make_attempt("start")
        result = runners.bash(f"step_start() {{ {call}; }}\nstep_relax() {{ :; }}", steps="start relax")
        assert result.returncode == 0, result.stderr
        assert attempt.outcome() == attempt.expected(action, ["relax", "start"], **members)
        if action == "advance":
            assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"k": 1}


def test_spawn_runner_references_and_prepared_payloads(make_attempt, runners, tmp_path):
    attempt = make_attempt("start")
    sha = "cd" * 32
    prepared = tmp_path / "prepared"
    prepare_job_payload(prepared, JobSpec(name="Child", workflow="other", runner_path="files/run"), durable=False)
    (prepared / "input.txt").write_text("x", encoding="utf-8")
    (prepared / ".httk-job").mkdir()
    (prepared / ".httk-job" / "state.json").write_text("{}", encoding="utf-8")
    body = (
        "step_start() {\n"
        f"    httk_workflow_spawn --label ws --step any --runner ws:tools/run.sh@{sha} >/dev/null\n"
        f"    httk_workflow_spawn --label inst --step any --runner installed:bin/run@{sha} >/dev/null\n"
        f"    httk_workflow_spawn --label prep --payload {prepared} --placement project/b >/dev/null\n"
        "    httk_workflow_succeed\n"
        "}"
    )
    assert runners.bash(body).returncode == 0
    entries = {entry["label"]: entry for entry in attempt.spawned()["children"]}
    jobs = {
        label: json.loads((attempt.ready / "children" / entry["payload"] / "job.json").read_bytes())
        for label, entry in entries.items()
    }
    assert jobs["ws"]["runner"] == {"source": "workspace", "path": "tools/run.sh", "sha256": sha}
    assert jobs["inst"]["runner"] == {"source": "installed", "path": "bin/run", "sha256": sha}
    assert jobs["prep"]["workflow"] == "other" and entries["prep"]["placement"] == "project/b"
    copied = attempt.ready / "children" / entries["prep"]["payload"]
    assert (copied / "input.txt").exists() and not (copied / ".httk-job").exists()


# --------------------------------------------------------------------------- doing


def test_run_reports_the_exit_class(make_attempt, runners):
    attempt = make_attempt("start")
    body = PROBE + script(
        r"""
        step_start() {
            probe ok httk_workflow_run -- true
            probe nonzero httk_workflow_run -- sh -c 'exit 3'
            probe timeout httk_workflow_run --timeout 0.3 -- sleep 10
            probe missing httk_workflow_run -- /nonexistent/program
            probe usage httk_workflow_run --timeout
            probe output httk_workflow_run --report r.json -- echo hi
            httk_workflow_succeed
        }
        """
    )
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    assert {name: status for name, (status, _) in seen.items()} == {
        "ok": 0,
        "nonzero": 22,
        "timeout": 124,
        "missing": 125,
        "usage": 2,
        "output": 0,
    }
    assert seen["output"][1] == "hi"
    report = json.loads((attempt.workdir / "r.json").read_bytes())
    assert (report["format"], report["argv"], report["exit_class"]) == (
        "httk-workflow-process-report",
        ["echo", "hi"],
        0,
    )


def test_workdir_apply_is_one_replayable_batch(make_attempt, runners):
    attempt = make_attempt("start")
    attempt.workdir.mkdir(parents=True, exist_ok=True)
    (attempt.workdir / "old.txt").write_text("old", encoding="utf-8")
    (attempt.workdir / "scratch").mkdir()
    body = PROBE + script(
        r"""
        step_start() {
            echo new > /tmp/httk-unused-$$ && rm /tmp/httk-unused-$$
            printf 'INCAR' > source.txt
            httk_workflow_workdir_apply --write INCAR source.txt --remove scratch --rename old.txt kept.txt
            probe escape httk_workflow_workdir_apply --write ../x source.txt
            probe missing httk_workflow_workdir_apply --write x absent.txt
            probe usage httk_workflow_workdir_apply --rename a
            httk_workflow_succeed
        }
        """
    )
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    assert (attempt.workdir / "INCAR").read_text() == "INCAR"
    assert (attempt.workdir / "kept.txt").read_text() == "old"
    assert not (attempt.workdir / "scratch").exists() and not (attempt.workdir / "old.txt").exists()
    assert len(list((attempt.workdir / ".httk-runner" / "workdir-applied").iterdir())) == 1
    seen = probes(result.stdout)
    assert seen["escape"][0] == seen["missing"][0] == seen["usage"][0] == 2


def test_main_replays_a_sealed_batch_before_the_handler_runs(make_attempt, runners):
    attempt = make_attempt("start")
    sealed = attempt.workdir / ".httk-runner" / "workdir-ready" / "batch-1"
    (sealed / "files").mkdir(parents=True)
    (sealed / "files" / "0001").write_text("ENCUT = 520\n", encoding="utf-8")
    operations = [{"op": "write", "path": "INCAR", "staged": "files/0001"}]
    document = {"format": "httk-workflow-workdir-batch", "format_version": 1, "id": "batch-1", "operations": operations}
    (sealed / "ops.json").write_bytes(codec.encode(document))
    result = runners.bash("step_start() { grep -q 520 INCAR; httk_workflow_succeed; }")
    assert result.returncode == 0, result.stderr
    assert attempt.outcome()["action"] == "succeed"
    assert (attempt.workdir / ".httk-runner" / "workdir-applied" / "batch-1").is_dir()


def test_batch_runs_many_commands_in_one_start_and_stops_at_the_first_failure(make_attempt, runners):
    attempt = make_attempt("start")
    body = PROBE + script(
        r"""
        step_start() {
            probe first httk_workflow_batch <<'EOF'
        # comments and blank lines are skipped

        httk_workflow_state_set a 1
        state_set b '"two words"'
        ["httk_workflow_state_get", "b"]
        httk_calc '2 * 21'
        EOF
            probe second httk_workflow_batch <<'EOF'
        state_get a
        state_get missing
        state_set never 1
        EOF
            probe broken httk_workflow_batch <<'EOF'
        state_set c 'unterminated
        EOF
            probe unknown httk_workflow_batch <<'EOF'
        frobnicate
        EOF
            probe spawned httk_workflow_batch <<'EOF'
        spawn --label x --step start
        spawn --label y --step start
        gather start
        EOF
        }
        """
    )
    result = runners.bash(body)
    assert result.returncode == 0, result.stderr
    seen = probes(result.stdout)
    assert seen["first"] == (0, "two words\n42")
    assert seen["second"] == (1, "1")
    assert seen["broken"][0] == seen["unknown"][0] == 2
    assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"a": 1, "b": "two words"}
    assert attempt.outcome()["join"]["children"] == ["x", "y"]


# --------------------------------------------------------------------------- utilities and job preparation


def test_calc_template_and_compression(runners, tmp_path, monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "INCAR.tmpl").write_text("ENCUT = {{ encut }}\nMAGMOM = {{ moments }}\n", encoding="utf-8")
    (tmp_path / "values.json").write_text('{"encut": 520, "moments": [1, 2]}', encoding="utf-8")
    (tmp_path / "big.txt").write_text("x" * 1000, encoding="utf-8")
    script = PROBE + "\n".join(
        [
            f'source "{LIB}"',
            f"cd {tmp_path}",
            "probe calc httk_calc '2 * (3 + 4)'",
            "probe calc_float httk_calc 'ceil(n / 4) + 0.5' n=10",
            "probe calc_zero httk_calc '1 / 0'",
            "probe calc_code httk_calc '__import__(\"os\")'",
            "probe calc_variable httk_calc 'n + 1' n=abc",
            'probe render httk_template_render INCAR.tmpl \'{"encut": 520, "moments": [1, 2]}\'',
            "probe render_file httk_template_render INCAR.tmpl values.json INCAR",
            "probe render_missing httk_template_render INCAR.tmpl '{\"encut\": 1}'",
            "probe compress httk_compress --method gz big.txt",
            "probe compress_again httk_compress big.txt",
            "probe decompress httk_decompress --remove big.txt.gz",
            "probe decompress_bad httk_decompress big.txt",
            "probe compress_xz httk_compress --method xz --remove big.txt",
        ]
    )
    result = subprocess.run(["bash", "-c", script], env=bash_env(), capture_output=True, text=True)
    seen = probes(result.stdout)
    assert seen["calc"] == (0, "14")
    assert seen["calc_float"] == (0, "3.5")
    assert seen["calc_zero"][0] == seen["calc_code"][0] == seen["calc_variable"][0] == 2
    assert seen["render"] == (0, "ENCUT = 520\nMAGMOM = [1,2]")
    assert seen["render_file"] == (0, "")
    assert (tmp_path / "INCAR").read_text() == "ENCUT = 520\nMAGMOM = [1,2]\n"
    assert seen["render_missing"] == (1, "")  # a placeholder without a value is absent, as documented
    # Silent, like every status 1 (spec 002: an absent answer never looks like a broken call).
    missing = subprocess.run(
        ["bash", "-c", f"source {LIB}; cd {tmp_path}; httk_template_render INCAR.tmpl '{{\"encut\": 1}}'"],
        env=bash_env(), capture_output=True, text=True,
    )
    assert (missing.returncode, missing.stdout, missing.stderr) == (1, "", "")
    assert seen["compress"] == (0, "") and seen["compress_again"][0] == 2
    assert seen["decompress"][0] == 2  # big.txt is still there: decompressing would overwrite it
    assert seen["decompress_bad"][0] == 2
    assert seen["compress_xz"] == (0, "")
    assert not (tmp_path / "big.txt").exists() and (tmp_path / "big.txt.xz").exists()
    assert gzip.decompress((tmp_path / "big.txt.gz").read_bytes()) == b"x" * 1000


def test_job_prepare_writes_the_job_json_python_writes(tmp_path, monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    sha = "ef" * 32
    spec = JobSpec(
        name="Si vacancies",
        workflow="defects",
        runner_source="workspace",
        runner_path="defects/run.sh",
        runner_sha256=sha,
        initial_step="characterize",
        inputs={"encut": 520, "supercell": [2, 2, 2]},
        priority=3,
        capabilities=("gpu",),
        workdir_mode="isolated",
        data_mode="transactional",
        maximum_attempts_per_activation=None,
        maximum_total_attempts=9,
        retry_on=("scf",),
        resources={"cores": 4},
        declarations={"workflow": {"v": 1}},
        tag="si-vacancies",
    )
    python = prepare_job_payload(tmp_path / "python", spec, durable=False)
    script = (
        f'source "{LIB}"\n'
        f"httk_workflow_job_prepare {tmp_path / 'bash'} --name 'Si vacancies' --workflow defects "
        f"--runner-source workspace --runner-path defects/run.sh --runner-sha256 {sha} "
        "--initial-step characterize --inputs '{\"encut\": 520}' --input 'supercell=[2,2,2]' --priority 3 "
        "--capability gpu --workdir-mode isolated --data-mode transactional "
        "--maximum-attempts-per-activation null --maximum-total-attempts 9 --retry-on scf "
        "--resources '{\"cores\": 4}' --declaration 'workflow={\"v\": 1}' --tag si-vacancies\n"
    )
    result = subprocess.run(["bash", "-c", script], env=bash_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{tmp_path / 'bash'}\n"
    assert (tmp_path / "bash" / "job.json").read_bytes() == (python / "job.json").read_bytes()
    refused = subprocess.run(
        ["bash", "-c", f'source "{LIB}"; httk_workflow_job_prepare {tmp_path / "x"} --name n --workflow w'],
        env=bash_env(),
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--runner-path" in refused.stderr


def test_every_public_function_is_a_thin_call_or_pure_bash():
    """No function but the runner plumbing carries logic of its own: everything else is the bridge."""
    listed = subprocess.run(
        ["bash", "-c", f'source "{LIB}"; declare -F'], capture_output=True, text=True, check=True
    ).stdout.split()
    public = sorted(name for name in listed if name.startswith("httk_"))
    thin = re.compile(r"^(httk_\w+)\(\) \{ _httk_call (\w+) \"\$@\" \|\| return; \}$", re.M)
    wrappers = {name: command for name, command in thin.findall(LIB.read_text(encoding="utf-8"))}
    assert set(public) - set(wrappers) == {"httk_workflow_log", "httk_workflow_main", "httk_workflow_runner"}
    from httk.workflow.shell_bridge import COMMANDS, command_name

    assert all(command_name(name) == command and command in COMMANDS for name, command in wrappers.items())


# --------------------------------------------------------------------------- the guide's example runs


GUIDE = ROOT / "docs" / "sdks" / "native_bash_api.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DEFECTS_SH = ROOT / "examples" / "defects" / "defects.sh"


def guide_blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(GUIDE.read_text(encoding="utf-8")) if lang == language]


def test_the_guide_shows_the_example_runner_and_its_description(tmp_path):
    assert guide_blocks("bash")[0] == DEFECTS_SH.read_text(encoding="utf-8")
    console = guide_blocks("console")[0].splitlines()
    assert console[0] == "$ bash defects.sh --describe"
    env = {key: value for key, value in bash_env().items() if not key.startswith("HTTK_WORKFLOW_")}
    env["HTTK_WORKFLOW_PYTHON"] = sys.executable
    described = subprocess.run(["bash", str(DEFECTS_SH), "--describe"], cwd=tmp_path, env=env, capture_output=True)
    assert described.stdout.decode() == console[1] + "\n"
    for block in guide_blocks("bash")[2:]:
        assert subprocess.run(["bash", "-n"], input=block, text=True).returncode == 0, block


def test_the_guides_submission_script_drives_the_campaign_through_a_real_manager(tmp_path):
    """The page's publish-prepare-submit-run script, verbatim, with the stand-ins on PATH and site 1 diverging."""
    from httk.workflow.operations import inspection
    from httk.workflow.workspace import Workspace

    script = guide_blocks("bash")[1]
    assert "httk workflow run" in script
    (tmp_path / "defects.sh").write_bytes(DEFECTS_SH.read_bytes())
    env = {key: value for key, value in os.environ.items() if not key.startswith("HTTK_")}
    venv_bin = os.path.dirname(sys.executable)
    env.update(
        PATH=os.pathsep.join([venv_bin, str(DEFECTS_SH.parent / "bin"), env["PATH"]]),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        HTTK_WORKFLOW_PYTHON=sys.executable,
        DEMO_DIVERGE="1",
    )
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    workspace = Workspace(tmp_path / "workflow-workspace")
    kinds = {job["tag"]: job["kind"] for job in inspection.list_jobs(workspace.handle)}
    assert kinds == {
        "si-vacancies": "failed",
        "site-0": "succeeded",
        "site-1": "failed",
        "site-2": "succeeded",
        "site-3": "succeeded",
    }
    parent = inspection.resolve_job(workspace.handle, "si-vacancies")
    report = inspection.show_job(workspace.handle, parent)
    assert report["failure"]["code"] == "campaign_incomplete"
    assert report["failure"]["details"] == {"failed": ["site-1"]}
    workdir = tmp_path / "workflow-workspace" / ".httk-workflow" / "workdirs" / parent.job_id
    campaign = json.loads((workdir / "campaign.json").read_bytes())
    assert sorted(campaign) == ["site-0", "site-2", "site-3"] and campaign["site-2"]["energy_ev"] == -10.5
    (event,) = [json.loads(line) for line in (workdir / ".httk-runner" / "runlog.jsonl").read_bytes().splitlines()]
    assert (event["label"], event["message"]) == ("triage", "1 of 4 sites did not relax")
