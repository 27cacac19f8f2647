"""The root of httk.workflow: its exports, their laziness, and what a runner's import pulls in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httk.workflow as root

HEAVY = ("click", "dependency_injector", "fabric", "cryptography")


def test_root_exports():
    assert set(root.__all__) >= {
        "Runner",
        "Attempt",
        "ChildSpec",
        "RunnerRef",
        "ChildResult",
        "JobSpec",
        "prepare_job_payload",
        "Failure",
        "Workspace",
        "supervision",
        "runtime_utils",
        "protocol",
        "runtime",
    }
    from httk.workflow import Failure, JobSpec, protocol, runtime
    from httk.workflow.domain.model import Failure as DomainFailure

    assert Failure is DomainFailure
    assert JobSpec is protocol.JobSpec
    assert root.ChildSpec is runtime.ChildSpec
    assert "Runner" in dir(root)


def test_importing_a_runner_stays_light():
    code = (
        "import json, sys\n"
        "from httk.workflow import Runner, ChildSpec\n"
        "print(json.dumps(sorted(m for m in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    modules = set(json.loads(result.stdout))
    heavy = {m for m in modules if m.split(".")[0] in HEAVY}
    assert heavy == set()
    lazy = {"httk.workflow.workspace", "httk.workflow.cli", "httk.workflow.services", "subprocess", "uuid"}
    assert modules.isdisjoint(lazy)


def test_unknown_root_attribute():
    try:
        root.does_not_exist  # noqa: B018
    except AttributeError as error:
        assert "does_not_exist" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_an_attempt_bound_bridge_call_loads_no_manager_side_module(make_attempt):
    """Each Bash call is a process: the frames, the lifecycle, OpenSSL and the submit limits stay out of it."""
    attempt = make_attempt("start")
    code = (
        "import json, sys\n"
        "from httk.workflow.shell_bridge import main\n"
        "status = main(['state_set', 'k', '1'])\n"
        "print(json.dumps([status, sorted(sys.modules)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, cwd=attempt.workdir)
    status, modules = json.loads(result.stdout)
    assert status == 0 and json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"k": 1}
    unwanted = {
        "httk.workflow.domain.frames",
        "httk.workflow.domain.lifecycle",
        "httk.workflow.domain.submit_limits",
        "hashlib",
        "signal",  # only Attempt.run needs it
        "tempfile",  # the attempt lock finds its directory without it (shutil, random: milliseconds a call)
    }
    assert unwanted.isdisjoint(modules), unwanted.intersection(modules)
    assert "cattrs" in modules  # context.json is still structured by the one converter


def test_the_bash_coprocess_loads_no_manager_side_module_either(make_attempt, tmp_path):
    """The co-process answers every call of an attempt: what it imports stays what one call imports."""
    attempt = make_attempt("start")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = (
        "import json, os, sys\n"
        "from httk.workflow.shell_bridge import Session, command_name, dispatch\n"
        "from httk.workflow.shell_serve import Server\n"
        "server = Server(dispatch, Session, command_name)\n"
        "reply = server.answer(0o22, os.getcwd(), dict(os.environ), ['state_set', 'k', '1'])\n"
        "print(json.dumps([reply.decode(), sorted(sys.modules)]))\n"
    )
    env = {**os.environ, "TMPDIR": str(scratch)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, cwd=attempt.workdir, env=env)
    reply, modules = json.loads(result.stdout)
    assert reply == "0\0i\0i\0"
    assert json.loads((attempt.payload / ".httk-job" / "state.json").read_bytes()) == {"k": 1}
    unwanted = {"httk.workflow.domain.frames", "httk.workflow.domain.lifecycle", "hashlib", "signal", "subprocess"}
    assert unwanted.isdisjoint(modules), unwanted.intersection(modules)
