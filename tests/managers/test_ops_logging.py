"""What a manager says and leaves behind: banner, summary, log file, manifest, heartbeat (spec 000 "Run").

One banner line and one closing summary line on stdout whatever the log level;
the complete info-level record in ``.httk-workflow/managers/ID/log`` (or
``--log-file``), optionally as JSON objects; ``manager.json`` and
``heartbeat.json`` describe what the manager serves and whether it is alive.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

RUN = "publish '\"action\":\"succeed\"'"


def _manager_dir(ops, manager) -> Path:
    return Path(ops.handle.layout.managers) / manager.manager_id


@pytest.mark.parametrize("level", ["info", "debug", "warning", "error"])
def test_one_banner_and_one_summary_on_stdout(ops, level):
    ops.job(RUN)
    ops.job(RUN, pool="vasp")
    manager = ops.run("--log-level", level)
    lines = manager.stdout.splitlines()
    assert len(lines) == 2, manager.stdout
    banner, summary = lines
    manager_id = manager.manager_id
    assert banner.startswith(f"httk-workflow manager {manager_id}: workspace {ops.root}; ")
    assert f"log {_manager_dir(ops, manager)}/log" in banner
    assert "pools default; capabilities -; executors path; workers 1" in banner
    assert summary.startswith(f"httk-workflow manager {manager_id} idle: 1 succeeded, 0 failed, 0 cancelled; ")
    assert "not claimable here: 1 need pool vasp" in summary


def test_the_log_file_records_every_claim_launch_and_commit(ops):
    job = ops.job(RUN)
    manager = ops.run()
    text = (_manager_dir(ops, manager) / "log").read_text()
    for needle in (f"registered {job}", f"claimed {job}", f"launched {job}", f"committed {job}: succeeded"):
        assert needle in text, text
    # The console shows warnings and errors only at the default level.
    assert "claimed" not in manager.stderr and "launched" not in manager.stderr


def test_json_logs_and_log_file(ops, tmp_path):
    job = ops.job(RUN)
    log_file = tmp_path / "logs" / "manager.jsonl"
    manager = ops.run("--json-logs", "--log-file", str(log_file), "--placement-prefix", "p",
                      "--placement-prefix", "nowhere")
    assert f"log {log_file}" in manager.stdout.splitlines()[0]
    assert not (_manager_dir(ops, manager) / "log").exists()
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert records and all(set(record) == {"time", "level", "logger", "message"} for record in records)
    messages = [record["message"] for record in records]
    assert any(message.startswith(f"claimed {job}") for message in messages)
    assert any(message.startswith(f"committed {job}") for message in messages)
    # The console is JSON too: the prefix warning is one object per line on stderr.
    console = [json.loads(line) for line in manager.stderr.splitlines() if line.strip()]
    assert [record["level"] for record in console] == ["warning"]
    assert "'nowhere'" in console[0]["message"]
    # stdout keeps its two plain lines.
    assert len(manager.stdout.splitlines()) == 2


def test_manifest_and_heartbeat_describe_the_manager(ops):
    ops.job(RUN, placement="p/q")
    manager = ops.run("--pool", "default", "--pool", "vasp", "--capability", "gpu", "--capability", "bigmem",
                      "--placement-prefix", "p", "--lease-seconds", "42", "--workers", "3")
    directory = _manager_dir(ops, manager)
    manifest = json.loads((directory / "manager.json").read_text())
    assert manifest["format"] == "httk-workflow-manager" and manifest["format_version"] == 1
    assert manifest["manager_id"] == manager.manager_id
    assert manifest["pools"] == ["default", "vasp"]
    assert manifest["capabilities"] == ["gpu", "bigmem"]
    assert manifest["executors"] == ["path"]
    assert manifest["placement_prefixes"] == ["p"]
    assert manifest["host"] == socket.gethostname()
    assert manifest["pid"] == manager.pid
    assert manifest["uid"] == os.getuid()
    assert manifest["lease_seconds"] == 42.0 and manifest["workers"] == 3
    assert manifest["workspace"] == str(ops.root)

    beat = json.loads((directory / "heartbeat.json").read_text())
    assert beat["manager_id"] == manager.manager_id and beat["lease_seconds"] == 42.0
    assert beat["stopped"] is True  # written once more at a clean exit
    assert beat["time"] >= manifest["started_at"]


def test_a_live_manager_keeps_its_heartbeat_fresh(ops):
    manager = ops.start("--idle", "--lease-seconds", "1")
    path = Path(ops.handle.layout.managers) / manager.manager_id / "heartbeat.json"
    ops.wait_until(path.exists, 10, "the first heartbeat")
    first = json.loads(path.read_text())["time"]
    ops.wait_until(lambda: json.loads(path.read_text())["time"] > first + 0.2, 10, "a later heartbeat")
    beat = json.loads(path.read_text())
    assert beat["stopped"] is False
    assert ops.heartbeat_age(manager.manager_id) < 1.0
    manager.signal(15)
    assert manager.wait(20) == 0
    assert json.loads(path.read_text())["stopped"] is True


@pytest.mark.parametrize("level", ["info", "INFO", "debug"])
def test_log_level_info_or_lower_shows_the_record_on_the_console_too(ops, level):
    """Spec 000 "Run": ``--log-level`` raises or lowers both the console and the file (info was clamped to
    warnings on the console)."""
    job = ops.job(RUN)
    manager = ops.run("--log-level", level)
    for needle in (f"claimed {job}", f"committed {job}: succeeded"):
        assert needle in manager.stderr, manager.stderr
        assert needle in (_manager_dir(ops, manager) / "log").read_text()


def test_log_level_warning_raises_the_file_as_well(ops):
    job = ops.job(RUN)
    manager = ops.run("--log-level", "warning")
    text = (_manager_dir(ops, manager) / "log").read_text()
    assert f"claimed {job}" not in text and f"claimed {job}" not in manager.stderr


def test_job_debug_log_level_shows_the_private_managers_log(ops):
    """Spec 000 "The foreground debug runner": quiet by default, ``--log-level`` raises the console log."""
    quiet = ops.job(RUN)
    done = ops.httk("job", "debug", str(ops.root), quiet)
    assert "claimed" not in done.stdout + done.stderr
    loud = ops.job(RUN)
    done = ops.httk("job", "debug", str(ops.root), loud, "--log-level", "info")
    assert f"claimed {loud}" in done.stderr, done.stderr


def test_every_log_level_option_refuses_an_unknown_level(ops):
    job = ops.job(RUN)
    before = sorted(path.name for path in Path(ops.handle.layout.managers).iterdir())
    for command in (("run", str(ops.root)), ("manager", "run", str(ops.root)), ("job", "debug", str(ops.root), job)):
        done = ops.httk(*command, "--log-level", "bogus", code=2)
        assert "'bogus' is not one of 'debug', 'info', 'warning', 'error'" in done.stderr, done.stderr
    assert sorted(path.name for path in Path(ops.handle.layout.managers).iterdir()) == before
    assert ops.kind(job) == "submitted"
