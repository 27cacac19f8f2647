"""A runner that cannot start, or dies on import, says why in its failure; precheck sees the first kind.

The manager and precheck resolve a runner with one rule: unresolvable or refused by the
safety property is ``runner_unavailable``, resolvable with another digest ``runner_mismatch``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from httk.workflow import JobSpec, prepare_job_payload

HTTK = str(Path(sys.executable).with_name("httk"))


@pytest.fixture(autouse=True)
def private_homes(tmp_path, monkeypatch):
    """The ``httk`` subprocesses inherit these: no test touches the real per-user registry."""
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / "home" / name.lower()))


def httk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, timeout=120)


def payload(tmp_path: Path, name: str, body: str, mode: int) -> Path:
    directory = tmp_path / f"payload-{name}"
    prepare_job_payload(directory, JobSpec(name=name, workflow="w", runner_path=name, tag=name.replace(".", "-")))
    (directory / name).write_text(body)
    (directory / name).chmod(mode)
    return directory


def test_unstartable_and_crashing_runners_name_their_cause(tmp_path):
    ws = str(tmp_path / "ws")
    assert httk("workspace", "init", ws).returncode == 0
    keys = {}
    for name, body, mode in [
        ("noexec", "#!/bin/sh\nexit 0\n", 0o644),
        ("noshebang", "echo hi\n", 0o755),
        ("imports.py", "import numpyz_does_not_exist\n", 0o644),
    ]:
        source = str(payload(tmp_path, name, body, mode))
        keys[name] = httk("job", "submit", ws, source, "--placement", "p").stdout.strip()
    report = httk("precheck", ws, "--json")
    assert report.returncode == 1
    broken = {job["job"]: job["findings"][0]["status"] for job in json.loads(report.stdout)["jobs"]}
    assert broken[keys["noexec"]] == "broken" and broken[keys["noshebang"]] == "broken"
    assert broken[keys["imports.py"]] == "ok"
    assert httk("run", ws).returncode == 0
    for name in ("noexec", "noshebang"):
        shown = json.loads(httk("job", "show", ws, keys[name], "--json").stdout)
        assert shown["kind"] == "failed" and shown["failure"]["code"] == "runner_unavailable", shown
        assert "stderr:" in shown["failure"]["message"]
        log = json.loads(httk("job", "log", ws, keys[name], "--json").stdout)
        assert max(entry.get("total_attempts", 0) for entry in log) == 1  # not retried: it can never start
    shown = json.loads(httk("job", "show", ws, keys["imports.py"], "--json").stdout)
    assert shown["failure"]["code"] == "runner_exit"
    assert "ModuleNotFoundError" in shown["failure"]["message"]


def job_of(ws: str, key: str) -> dict:
    return json.loads(httk("job", "show", ws, key, "--json").stdout)


def runner_findings(ws: str) -> dict[str, dict]:
    report = json.loads(httk("precheck", ws, "--json").stdout)
    return {job["job"]: job["findings"][0] for job in report["jobs"]}


def workspace_runner_job(tmp_path: Path) -> tuple[str, str, Path, dict]:
    """A workspace with a published runner ``relax.sh`` and a submitted job pinning it: (ws, key, runner, reference)."""
    ws = str(tmp_path / "ws")
    assert httk("workspace", "init", ws).returncode == 0
    runner = tmp_path / "relax.sh"
    runner.write_text("#!/bin/bash\nexit 0\n")
    reference = json.loads(httk("runner", "publish", str(runner), "--workspace", ws).stdout)
    source = tmp_path / "payload-ws"
    prepare_job_payload(source, JobSpec(name="w", workflow="w", runner_path="relax.sh", runner_source="workspace",
                                        runner_sha256=reference["sha256"], tag="ws-runner"))
    key = httk("job", "submit", ws, str(source), "--placement", "p").stdout.strip()
    return ws, key, runner, reference


def test_a_workspace_runner_whose_name_now_holds_other_bytes_is_a_mismatch(tmp_path):
    ws, key, runner, reference = workspace_runner_job(tmp_path)
    # The pinned object is gone (a clean-up) and the name was republished with other bytes.
    shutil.rmtree(Path(ws) / ".httk-workflow" / "runners" / "objects" / reference["sha256"])
    runner.write_text("#!/bin/bash\nexit 1\n")
    assert httk("runner", "publish", str(runner), "--workspace", ws, "--replace").returncode == 0
    finding = runner_findings(ws)[key]
    assert finding["status"] == "broken" and "runner_mismatch" in finding["message"], finding
    assert httk("run", ws).returncode == 0
    shown = job_of(ws, key)
    assert shown["kind"] == "failed" and shown["failure"]["code"] == "runner_mismatch", shown
    assert reference["sha256"] in shown["failure"]["message"]


def test_a_workspace_runner_without_object_or_name_is_unavailable(tmp_path):
    ws, key, runner, reference = workspace_runner_job(tmp_path)
    shutil.rmtree(Path(ws) / ".httk-workflow" / "runners")
    finding = runner_findings(ws)[key]
    assert finding["status"] == "broken" and "runner_unavailable" in finding["message"], finding
    assert "runner publish" in finding["message"]
    assert httk("run", ws).returncode == 0
    assert job_of(ws, key)["failure"]["code"] == "runner_unavailable"


def unsafe_payloads(tmp_path: Path, ws: str) -> dict[str, str]:
    """Submitted jobs whose payload runner :func:`plant` makes one the safety property refuses, keyed by what.

    Each is submitted with a safe runner in place (submission refuses a payload that lacks
    it, or links to it): the unsafe one is planted in the workspace copy afterwards.
    """
    keys = {}
    for case in ("symlink", "linked-dir", "group-writable", "tree-world-writable"):
        source = tmp_path / f"payload-{case}"
        runner_path = {"linked-dir": "bin/run.sh", "tree-world-writable": "tool"}.get(case, "run.sh")
        prepare_job_payload(source, JobSpec(name=case, workflow="w", runner_path=runner_path, tag=case))
        runner_file = source / ("tool/run.sh" if case == "tree-world-writable" else runner_path)
        runner_file.parent.mkdir(parents=True, exist_ok=True)
        runner_file.write_text("#!/bin/bash\nexit 0\n")
        submitted = httk("job", "submit", ws, str(source), "--placement", "p")
        assert submitted.returncode == 0, submitted.stderr
        keys[case] = submitted.stdout.strip()
    return keys


def plant(ws: str, key: str, tmp_path: Path, case: str) -> None:
    """Shape the workspace copy of the payload the way ``case`` says (after submission copied it)."""
    payload = Path(ws) / "p" / key
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "run.sh").write_text("#!/bin/bash\ntouch \"$HTTK_WORKFLOW_WORKSPACE_DIR/ran\"\n")
    if case == "symlink":
        (payload / "run.sh").unlink()
        (payload / "run.sh").symlink_to(outside / "run.sh")
    elif case == "linked-dir":
        shutil.rmtree(payload / "bin")
        (payload / "bin").symlink_to(outside)
    elif case == "group-writable":
        (payload / "run.sh").write_text("#!/bin/bash\ntouch \"$HTTK_WORKFLOW_WORKSPACE_DIR/ran\"\n")
        (payload / "run.sh").chmod(0o775)
    else:
        (payload / "tool" / "run.sh").write_text("#!/bin/bash\ntouch \"$HTTK_WORKFLOW_WORKSPACE_DIR/ran\"\n")
        (payload / "tool" / "run.sh").chmod(0o646)


def test_an_unsafe_payload_runner_is_never_executed_and_the_reason_is_shown(tmp_path):
    ws = str(tmp_path / "ws")
    assert httk("workspace", "init", ws).returncode == 0
    keys = unsafe_payloads(tmp_path, ws)
    for case, key in keys.items():
        plant(ws, key, tmp_path, case)
    wording = {"symlink": "is a symbolic link", "linked-dir": "reached through the symbolic link",
               "group-writable": "writable by group or others", "tree-world-writable": "writable by group or others"}
    findings = runner_findings(ws)
    for case, key in keys.items():
        assert findings[key]["status"] == "broken", (case, findings[key])
        assert wording[case] in findings[key]["message"], (case, findings[key])
    assert httk("run", ws).returncode == 0
    assert not (Path(ws) / "ran").exists()  # no refused runner ran
    for case, key in keys.items():
        failure = job_of(ws, key)["failure"]
        assert failure["code"] == "runner_unavailable" and wording[case] in failure["message"], (case, failure)
        why = httk("job", "why", ws, key).stdout
        assert wording[case] in why, (case, why)
    assert "chmod go-w" in job_of(ws, keys["group-writable"])["failure"]["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account needs root")
def test_a_payload_runner_owned_by_another_account_is_never_executed(tmp_path):
    ws = str(tmp_path / "ws")
    assert httk("workspace", "init", ws).returncode == 0
    source = payload(tmp_path, "run.sh", "#!/bin/bash\ntouch \"$HTTK_WORKFLOW_WORKSPACE_DIR/ran\"\n", 0o755)
    key = httk("job", "submit", ws, str(source), "--placement", "p").stdout.strip()
    os.chown(Path(ws) / "p" / key / "run.sh", 65534, -1)
    finding = runner_findings(ws)[key]
    assert finding["status"] == "broken" and "owned by uid 65534" in finding["message"], finding
    assert httk("run", ws).returncode == 0
    assert not (Path(ws) / "ran").exists()
    failure = job_of(ws, key)["failure"]
    assert failure["code"] == "runner_unavailable" and "owned by uid 65534" in failure["message"]


@pytest.mark.parametrize(
    ("layout_case", "wording"),
    [("runner-tree", "owned by uid 2000"), ("directory-on-the-way", "owned by uid 2000"),
     ("tree-entry", "owned by uid 2000"), ("ours", None)],
)
def test_the_shared_resolution_refuses_another_accounts_runner(layout_case, wording):
    """The rule itself, on the in-memory filesystem, so it is exercised without root."""
    from httk.workflow.store.layout import Layout
    from httk.workflow.store.runners import RunnerUnavailable, resolve_runner
    from httk.workflow.testing import InMemoryFilesystem

    fs = InMemoryFilesystem(uid=1000)
    payload = "/ws/p/job"
    fs.makedirs(f"{payload}/sub/tool")
    fs.write_atomic(f"{payload}/sub/tool/run.sh", b"#!/bin/sh\n", durable=False)
    owned_by_other = {"runner-tree": f"{payload}/sub/tool", "directory-on-the-way": f"{payload}/sub",
                      "tree-entry": f"{payload}/sub/tool/run.sh"}.get(layout_case)
    if owned_by_other is not None:
        fs.chown(owned_by_other, 2000)
    spec = JobSpec(name="j", workflow="w", runner_path="sub/tool")
    if wording is None:
        assert resolve_runner(fs, Layout.at("/ws"), payload, spec, (), uid=1000) == f"{payload}/sub/tool"
        return
    with pytest.raises(RunnerUnavailable, match=wording) as refused:
        resolve_runner(fs, Layout.at("/ws"), payload, spec, (), uid=1000)
    assert refused.value.failure.code == "runner_unavailable"
