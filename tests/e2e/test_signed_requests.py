"""Operator identity: signed requests carry an operator_key into the journal; tampered ones are quarantined."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from httk.workflow.adapters.signing import Ed25519Signer, Ed25519Verifier, SignatureError, create_identity

HTTK = str(Path(sys.executable).with_name("httk"))


def test_signature_round_trip_and_tamper(tmp_path):
    created = create_identity(tmp_path)
    assert oct(os.stat(created["private_key"]).st_mode & 0o777) == "0o600"
    signer = Ed25519Signer(Path(created["private_key"]))
    signature = signer.sign(b"payload")
    assert Ed25519Verifier().verify(b"payload", signature) == created["key_id"]
    with pytest.raises(SignatureError):
        Ed25519Verifier().verify(b"payload!", signature)
    with pytest.raises(FileExistsError):
        create_identity(tmp_path)


def run(env, *args):
    return subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=env, timeout=60)


def test_signed_and_tampered_requests(tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}
    assert run(env, "config", "init").returncode == 0
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / "run.sh").write_text("#!/bin/bash\nexit 0\n")
    from httk.workflow import JobSpec, prepare_job_payload

    prepare_job_payload(payload, JobSpec(name="s", workflow="w", runner_path="run.sh"))
    ws = str(tmp_path / "ws")
    assert run(env, "workspace", "init", ws).returncode == 0
    good = run(env, "job", "submit", ws, str(payload), "--placement", "a").stdout.strip()
    bad = run(env, "job", "submit", ws, str(payload), "--placement", "b").stdout.strip()
    assert run(env, "job", "request", ws, good, "pause", "--operator", "me", "--reason", "ok").returncode == 0
    assert run(env, "job", "request", ws, bad, "pause", "--operator", "me", "--reason", "ok").returncode == 0
    ready = Path(ws) / ".httk-workflow" / "requests" / "ready"
    for path in ready.iterdir():
        document = json.loads(path.read_text())
        if document["job_key"] == bad:
            document["operator"] = "mallory"
            path.write_text(json.dumps(document))
    assert run(env, "run", ws).returncode == 0
    log = json.loads(run(env, "job", "log", ws, good, "--json").stdout)
    assert log[-1]["event"] == "operator_pause" and log[-1]["operator_key"].startswith("ed25519:")
    quarantined = sorted((Path(ws) / ".httk-workflow" / "requests" / "quarantine").iterdir())
    assert [path.name for path in quarantined] == [quarantined[0].name, f"{quarantined[0].name}.audit.json"]
    assert json.loads(quarantined[0].read_text())["operator"] == "mallory"  # the entry as it was published
    assert "signature rejected" in json.loads(quarantined[1].read_text())["quarantine_reason"]
