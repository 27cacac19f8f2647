"""A batch system from outside the tree: tests/plugins/httk-workflow-toybatch, installed beside the package.

The Makefile's test-extras step installs it as a distribution of its own; nothing in
httk-workflow names it. Its one module and one entry point are enough for the generated
templates (``local-toy``, ``ssh-toy``), ``remote check``, the settings check and ``run``.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from remote_support import HTTK, ROOT, wait_until, write_payload

PLUGIN = ROOT / "tests" / "plugins" / "httk-workflow-toybatch"


@pytest.fixture(autouse=True)
def installed():
    if "toy" not in {entry.name for entry in entry_points(group="httk.workflow.batch_systems")}:
        pytest.fail(f"the plug-in of {PLUGIN.relative_to(ROOT)} is not installed: 'make test' installs it "
                    f"(or: .venv/bin/python -m pip install --no-deps ./{PLUGIN.relative_to(ROOT)})")


@pytest.fixture
def kappa(cli, tmp_path):
    cli("remote", "add", "kappa", "--template", "local-toy")
    cli("remote", "configure", "kappa", "--set", f"httk_command={HTTK}", "--set", f"workspace_root={tmp_path}")
    return "kappa"


def test_the_package_does_not_name_the_plugin():
    named = [path for path in (ROOT / "src").rglob("*.py") if re.search(r"\btoy(batch)?\b", path.read_text())]
    assert named == []


def test_its_templates_exist_and_check_looks_for_its_declared_commands(cli, kappa):
    templates = cli.json("remote", "list")["templates"]
    assert {"local-toy", "ssh-toy"} <= set(templates)
    shown = cli.json("remote", "show", kappa)
    assert (shown["transport"], shown["batch"]) == ("local", "toy")
    assert "Seconds one remote command (httk, sh, nohup, kill) may take." in cli("remote", "show", kappa).stdout \
        or shown["settings"]["command_timeout"] == 300
    report = cli.json("remote", "check", kappa)
    assert report["ok"] is True, report
    assert report["report"]["batch"]["system"] == "toy"
    assert set(report["report"]["batch"]["commands"]) == {"sh", "nohup", "kill"}
    assert "ok       batch           toy: sh, nohup, kill found" in cli("remote", "check", kappa).stdout


def test_settings_and_run_go_through_the_plugin(cli, kappa, tmp_path):
    path = tmp_path / "runs"
    cli("workspace", "init", f"{kappa}:{path}")
    refused = cli("workspace", "settings", "set", f"{kappa}:{path}", "toy.label", "Bad Label", code=2)
    assert "setting toy.label must be a label ([a-z0-9-])" in refused.stderr
    assert "settings.json" not in {item.name for item in (path / ".httk-workflow").iterdir()} or \
        "toy.label" not in (path / ".httk-workflow" / "settings.json").read_text()
    cli("workspace", "settings", "set", f"{kappa}:{path}", "toy.label", "night-run")
    key = cli("job", "submit", str(path), str(write_payload(tmp_path / "payload")), "--placement", "p").stdout.strip()

    submitted = cli("run", f"{kappa}:{path}", "--idle-timeout", "60").stdout
    match = re.search(r"toy job (toy-\d+)", submitted)
    assert match, submitted
    job_id = match[1]

    def finished():
        entry = cli.json("manager", "status", f"{kappa}:{path}", "--job", job_id)["jobs"][job_id]
        return entry if entry["finished"] else None

    assert wait_until(finished, 120, f"toy manager {job_id} exiting")["state"] == "DONE"
    assert cli.json("job", "show", str(path), key)["kind"] == "succeeded"
    scripts = list(Path(path, ".httk-workflow", "batch").glob("toy-job.*.sh"))
    assert len(scripts) == 1 and "#TOY --label=night-run\n" in scripts[0].read_text()
