"""``httk workflow remote``: the registry of remotes, its validation, the templates, REMOTE:PATH detection."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from remote_support import ROOT

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.services.remotes import RemoteReference, RemoteRegistry, split_reference

TEMPLATES = ROOT / "adapters"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kappa:/scratch/runs", RemoteReference("kappa", "/scratch/runs")),
        ("kappa:runs", RemoteReference("kappa", "runs")),
        ("kappa:", RemoteReference("kappa", "")),
        ("my-hpc.2:a:b", RemoteReference("my-hpc.2", "a:b")),
        ("./kappa:runs", None),
        ("/abs/kappa:runs", None),
        ("dir/kappa:runs", None),
        ("Kappa:runs", None),
        ("runs", None),
        ("", None),
        (None, None),
    ],
)
def test_a_remote_reference_is_recognized_from_its_text(text, expected):
    assert split_reference(text) == expected


def test_every_packaged_template_parses_and_its_adapter_is_executable(tmp_path):
    registry = RemoteRegistry(PosixFilesystem(), str(tmp_path), str(TEMPLATES))
    assert registry.template_names() == ["local", "local-slurm", "ssh-slurm"]
    for name in registry.template_names():
        template = registry.template(name)
        assert template.name == name
        assert {"httk_command", "workspace_root", "check_connectivity", "command_timeout"} <= set(template.specs)
        adapter = Path(template.adapter_path)
        assert adapter.stat().st_mode & stat.S_IXUSR, f"{adapter} is not executable"
        assert registry.adapter_script(template).startswith("#!/bin/sh\n")
    ssh = registry.template("ssh-slurm")
    assert (ssh.transport, ssh.batch) == ("ssh", "slurm")
    assert ssh.specs["host"].required and ssh.defaults()["port"] == 22


def test_the_adapter_scripts_differ_only_in_their_batch_lines():
    def body(name):
        return [
            line for line in (TEMPLATES / name / "adapter").read_text().splitlines()
            if not line.startswith(("BATCH_", "# adapter - ", '#    "batch"'))
        ]

    assert body("local") == body("local-slurm") == body("ssh-slurm")


def test_add_configure_show_list_remove(cli, tmp_path):
    assert "no remotes" in cli("remote", "list").stdout
    added = cli("remote", "add", "kappa", "--template", "ssh-slurm")
    assert "next: httk workflow remote configure kappa --set host=..." in added.stdout
    shown = cli.json(
        "remote", "configure", "kappa",
        "--set", "host=kappa.example.org", "--set", "username=rar", "--set", "port=2200",
        "--set", "check_connectivity=no", "--set", "connect_timeout=2.5",
    )  # fmt: skip
    assert shown["settings"]["host"] == "kappa.example.org" and shown["settings"]["port"] == 2200
    assert shown["settings"]["check_connectivity"] is False and shown["settings"]["connect_timeout"] == 2.5
    assert shown["settings"]["httk_command"] == "httk" and shown["missing"] == []
    document = json.loads((tmp_path / "xdg-config" / "httk-workflow" / "remotes" / "kappa.json").read_text())
    assert document == {
        "format": "httk-workflow-remote", "format_version": 1, "name": "kappa", "template": "ssh-slurm",
        "settings": {"check_connectivity": False, "connect_timeout": 2.5, "host": "kappa.example.org",
                     "port": 2200, "username": "rar"},
    }  # fmt: skip
    reset = cli.json("remote", "configure", "kappa", "--set", "port=")
    assert reset["settings"]["port"] == 22 and "port" not in reset["chosen"]
    text = cli("remote", "show", "kappa").stdout
    assert "host" in text and "kappa.example.org" in text and "(default)" in text
    listing = cli.json("remote", "list")
    assert [row["name"] for row in listing["remotes"]] == ["kappa"]
    assert listing["templates"] == ["local", "local-slurm", "ssh-slurm"]
    assert "removed remote kappa" in cli("remote", "remove", "kappa").stdout
    assert cli.json("remote", "list")["remotes"] == []


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("hots=x", "template ssh-slurm has no setting 'hots'; it knows check_connectivity"),
        ("port=abc", "setting port: 'abc' is not an integer"),
        ("port=70000", "setting port: 70000 is above the maximum 65535"),
        ("check_connectivity=maybe", "setting check_connectivity: 'maybe' is not a boolean"),
        ("host", "'host': expected key=value"),
    ],
)
def test_configure_refuses_what_the_template_does_not_allow(cli, assignment, message):
    cli("remote", "add", "kappa", "--template", "ssh-slurm")
    result = cli("remote", "configure", "kappa", "--set", assignment, code=2)
    assert result.stderr.startswith(f"error: {message}") and result.stderr.count("\n") == 1


def test_add_refuses_bad_names_unknown_templates_and_duplicates(cli):
    assert "invalid remote name 'Kappa'" in cli("remote", "add", "Kappa", "--template", "local", code=2).stderr
    assert "no remote template 'pbs'" in cli("remote", "add", "k", "--template", "pbs", code=2).stderr
    cli("remote", "add", "k", "--template", "local")
    assert "exists already" in cli("remote", "add", "k", "--template", "local", code=2).stderr
    assert "no remote named 'nope'" in cli("remote", "show", "nope", code=2).stderr


def test_a_hand_edited_document_with_a_bad_value_is_refused_naming_it(cli, tmp_path):
    cli("remote", "add", "k", "--template", "local")
    path = tmp_path / "xdg-config" / "httk-workflow" / "remotes" / "k.json"
    document = json.loads(path.read_text())
    document["settings"] = {"command_timeout": "soon"}
    path.write_text(json.dumps(document))
    error = cli("remote", "show", "k", code=2).stderr
    assert error.startswith(f"error: {path} @ $.settings: setting command_timeout: expected a number")


def test_check_names_missing_configuration_and_skips_the_target_when_told(cli):
    cli("remote", "add", "kappa", "--template", "ssh-slurm")
    failed = cli("remote", "check", "kappa", code=1)
    assert "FAILED   configuration   host not set" in failed.stdout
    assert failed.stderr == "remote kappa: failed checks: configuration\n"
    cli("remote", "configure", "kappa", "--set", "host=kappa.invalid", "--set", "check_connectivity=no")
    report = cli.json("remote", "check", "kappa")
    assert report["ok"] is True
    assert [(c["name"], c["ok"]) for c in report["checks"]] == [("configuration", True), ("connect", None)]


def test_a_remote_reference_never_touches_the_local_filesystem(cli, tmp_path, monkeypatch):
    # A local directory literally named like the reference must not be mistaken for it.
    monkeypatch.chdir(tmp_path)
    os.makedirs("nosuch:ws/.httk-workflow")
    error = cli("workspace", "status", "nosuch:ws", code=2).stderr
    assert error == "error: no remote named 'nosuch'; see 'httk workflow remote list' and 'remote add'\n"
    # job commands forward, so they name the missing remote too; workspace delete stays local-only.
    error = cli("job", "list", "nosuch:ws", code=2).stderr
    assert error == "error: no remote named 'nosuch'; see 'httk workflow remote list' and 'remote add'\n"
    error = cli("workspace", "delete", "nosuch:ws", "--force", code=2).stderr
    assert "nosuch:ws: this command works on local workspaces only" in error
    cli("remote", "add", "k", "--template", "local")
    assert "give the path on k after the colon" in cli("workspace", "init", "k:", code=2).stderr


def test_manager_status_needs_a_remote_reference(cli, tmp_path):
    error = cli("manager", "status", str(tmp_path), "--job", "1", code=2).stderr
    assert "manager status asks a remote's batch system (REMOTE:WORKSPACE)" in error
