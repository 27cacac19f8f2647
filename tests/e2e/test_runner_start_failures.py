"""A runner that cannot start, or dies on import, says why in its failure; precheck sees the first kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from httk.workflow import JobSpec, prepare_job_payload

HTTK = str(Path(sys.executable).with_name("httk"))


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
