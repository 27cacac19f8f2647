"""``httk workflow remote``: the registry of remotes, its files and settings, the templates, REMOTE:PATH
detection, and ``remote check``'s exit codes (the ``local`` template runs its adapter on this machine)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from remote_support import HTTK, ROOT

from cli_support import Cli
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.adapters.plugins import EntryPointCatalog
from httk.workflow.operations.remotes import (
    Remote,
    RemoteError,
    RemoteReference,
    RemoteRegistry,
    SettingSpec,
    split_reference,
)

ADAPTER = ROOT / "adapters" / "adapter"


FIRST_PARTY = {"local", "local-slurm", "local-pbs", "ssh-local", "ssh-slurm", "ssh-pbs"}


def registry_at(tmp_path: Path) -> RemoteRegistry:
    return RemoteRegistry(PosixFilesystem(), str(tmp_path), EntryPointCatalog(), str(ADAPTER))


def test_templates_are_every_transport_times_every_batch_system(tmp_path):
    registry = registry_at(tmp_path)
    catalog = registry.catalog
    names = registry.template_names()
    assert FIRST_PARTY <= set(names)
    assert len(names) == len(catalog.transport_names()) * len(catalog.batch_system_names())
    for name in names:
        template = registry.template(name)
        assert template.name == name
        assert {"httk_command", "workspace_root", "check_connectivity", "command_timeout"} <= set(template.specs)
        assert template.commands == catalog.batch_system(template.batch).commands
    ssh = registry.template("ssh-slurm")
    assert (ssh.transport, ssh.batch) == ("ssh", "slurm")
    # port has no default: unset means ~/.ssh/config's Port, else 22.
    assert ssh.specs["host"].required and "port" not in ssh.defaults()
    assert registry.template("local").description.startswith("This machine; a manager runs as a detached")
    for bad in ("pbs", "ssh-", "ssh-nope", "local-local", "-slurm"):
        with pytest.raises(RemoteError, match=f"no remote template {bad!r}( \\(did you mean '[a-z-]+'\\?\\))?; "
                                              "templates: local, "):
            registry.template(bad)
    # A typo names the template it is one of.
    with pytest.raises(RemoteError, match=r"^no remote template 'ssh-slrum' \(did you mean 'ssh-slurm'\?\); "):
        registry.template("ssh-slrum")
    with pytest.raises(RemoteError, match=r"^no remote template 'pbs'; "):  # too far from any: no guess
        registry.template("pbs")


def test_one_generic_adapter_program_serves_every_template(tmp_path):
    registry = registry_at(tmp_path)
    assert ADAPTER.stat().st_mode & stat.S_IXUSR, f"{ADAPTER} is not executable"
    scripts = {registry.adapter_script(registry.template(name)) for name in registry.template_names()}
    assert scripts == {ADAPTER.read_text()} and ADAPTER.read_text().startswith("#!/bin/sh\n")
    # The copied per-template directories are gone: the top level holds the program and its README.
    assert sorted(path.name for path in ADAPTER.parent.iterdir()) == ["README.md", "adapter"]


def test_the_adapter_program_takes_every_variable_part_as_an_argument(tmp_path):
    """Its ``check`` looks up the declared commands with ``command -v``; a word with quotes stays a word."""
    odd = tmp_path / "it's \"odd\""
    odd.mkdir()
    argv = ["sh", "-s", "--", "check", "--root", str(odd), "--batch", "x", "--command", "sh",
            "--command", "no-such-program-$(touch INJECTED)", "--", "no-such-httk"]
    done = subprocess.run(argv, input=ADAPTER.read_text(), capture_output=True, text=True, cwd=tmp_path, check=True)
    report = json.loads(done.stdout)
    assert report["batch"] == {"system": "x", "commands": {"sh": shutil.which("sh"),
                                                             "no-such-program-$(touch INJECTED)": None}}
    assert report["workspace_root"] == {"path": str(odd), "exists": True, "writable": True}
    assert report["httk"] == {"command": "no-such-httk", "path": None, "version": None}
    assert not (tmp_path / "INJECTED").exists()
    refused = subprocess.run(["sh", "-s", "--", "probe"], input=ADAPTER.read_text(), capture_output=True, text=True)
    assert refused.returncode == 2 and json.loads(refused.stdout)["format"] == "httk-workflow-adapter-error"


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
    assert "port" not in reset["settings"] and "port" not in reset["chosen"]
    text = cli("remote", "show", "kappa").stdout
    assert "host" in text and "kappa.example.org" in text and "(default)" in text
    listing = cli.json("remote", "list")
    assert [row["name"] for row in listing["remotes"]] == ["kappa"]
    assert FIRST_PARTY <= set(listing["templates"])
    assert "removed remote kappa" in cli("remote", "remove", "kappa").stdout
    assert cli.json("remote", "list")["remotes"] == []
    # Every remote command has --json, remove too.
    cli("remote", "add", "lumi", "--template", "ssh-slurm")
    assert cli.json("remote", "remove", "lumi") == {"name": "lumi", "removed": True}
    assert cli.json("remote", "list")["remotes"] == []


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("hots=x", "template ssh-slurm has no setting 'hots' (did you mean 'host'?); it knows check_connectivity"),
        ("zzz=x", "template ssh-slurm has no setting 'zzz'; it knows check_connectivity"),
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


# -- REMOTE:PATH from the text alone --------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kappa:", RemoteReference("kappa", "")),
        ("kappa:/a:b", RemoteReference("kappa", "/a:b")),
        ("kappa:runs", RemoteReference("kappa", "runs")),
        ("kappa:/scratch/runs", RemoteReference("kappa", "/scratch/runs")),
        ("my-hpc.2:a:b", RemoteReference("my-hpc.2", "a:b")),
        ("kappa:a b\nc", RemoteReference("kappa", "a b\nc")),
        ("k.1-x_y:-rf", RemoteReference("k.1-x_y", "-rf")),
        ("Kappa:/x", None),
        ("Kappa:runs", None),
        ("KAPPA:", None),
        ("./kappa:x", None),
        ("./kappa:runs", None),
        ("/abs/kappa:x", None),
        ("/abs/kappa:runs", None),
        ("rel/kappa:x", None),
        ("dir/kappa:runs", None),
        ("kappa", None),
        ("runs", None),
        (":x", None),
        ("-x:y", None),
        (".k:y", None),
        ("", None),
        (None, None),
        ("a" * 49 + ":x", None),
    ],
)
def test_split_reference_edge_cases(text: str | None, expected: RemoteReference | None) -> None:
    assert split_reference(text) == expected


def test_a_local_directory_named_like_a_reference_is_still_remote(cli: Cli, tmp_path: Path, monkeypatch) -> None:
    # Documented: the text decides, nothing local is consulted; './kappa:ws' is the local spelling.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kappa:ws").mkdir()
    line = cli.refused("workspace", "status", "kappa:ws")
    assert line == "error: no remote named 'kappa'; see 'httk workflow remote list' and 'remote add'"
    assert "not an httk-workflow workspace" in cli("workspace", "status", "./kappa:ws", code=2).stderr


def test_uppercase_remote_name_is_refused_and_uppercase_reference_is_local(cli: Cli) -> None:
    line = cli.refused("remote", "add", "Kappa", "--template", "local")
    assert "invalid remote name 'Kappa'" in line
    assert "not an httk-workflow workspace" in cli("workspace", "status", "Kappa:/nowhere", code=2).stderr


def test_empty_path_reference_uses_the_remotes_default_workspace(cli: Cli) -> None:
    cli("remote", "add", "here", "--template", "local")
    cli("remote", "configure", "here", "--set", f"httk_command={HTTK}")
    # Forwarded with this test's XDG homes (LocalTransport inherits the environment of the process).
    # A read-only command creates no default workspace there either, and its hint names it REMOTE:PATH.
    default = cli.data_home / "httk-workflow" / "workspaces" / "default"
    refused = cli("workspace", "status", "here:", code=2).stderr
    assert f"'httk workflow workspace init here:{default}'" in refused and not default.exists()
    cli("workspace", "init", str(default))
    assert cli.json("workspace", "status", "here:")["path"] == str(default)


# -- registry files -----------------------------------------------------------------------------
def remote_document(name: str, **extra: object) -> dict:
    return {"format": "httk-workflow-remote", "format_version": 1, "name": name, "template": "local",
            "settings": {}, **extra}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"format":', "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1]", "expected an object"),
        (b"", "not JSON"),
        (json.dumps(remote_document("k", extra=1)).encode(), "$.extra: unknown member"),
        (json.dumps(remote_document("k", settings={"zzz": 1})).encode(), "has no setting 'zzz'"),
        (json.dumps(remote_document("k", settings={"command_timeout": "5"})).encode(), "expected a number"),
        (json.dumps(remote_document("k", settings={"command_timeout": 0})).encode(), "below the minimum"),
        (json.dumps(remote_document("k", settings={"httk_command": "a\nb"})).encode(), "must be one line"),
        (json.dumps(remote_document("k", settings={"check_connectivity": 1})).encode(), "expected a boolean"),
        (json.dumps(remote_document("other")).encode(), "$.name: expected 'k'"),
        (json.dumps(remote_document("k", format_version=2)).encode(), "$.format"),
        (json.dumps(remote_document("k", template="../local")).encode(), "no remote template '../local'"),
        (json.dumps(remote_document("k", settings=[])).encode(), "$.settings: expected an object"),
    ],
)
def test_corrupt_or_unknown_registry_file_is_one_error_line_exit_2(
    cli: Cli, content: bytes, fragment: str
) -> None:
    cli.remotes.mkdir(parents=True)
    (cli.remotes / "k.json").write_bytes(content)
    for argv in (["remote", "show", "k"], ["remote", "check", "k"], ["workspace", "status", "k:x"]):
        assert fragment in cli.refused(*argv)


def test_missing_remotes_directory_lists_nothing(cli: Cli) -> None:
    assert cli.json("remote", "list")["remotes"] == []


def test_stray_file_in_remotes_directory_does_not_break_list(cli: Cli) -> None:
    cli("remote", "add", "good", "--template", "local")
    shutil.copy(cli.remotes / "good.json", cli.remotes / "Good.json")
    assert [row["name"] for row in cli.json("remote", "list")["remotes"]] == ["good"]


# -- settings -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["abc", "", "0x10", "1e3", "true"])
def test_integer_setting_refuses_non_integers(text: str) -> None:
    spec = SettingSpec("port", "integer", minimum=1, maximum=65535)
    with pytest.raises(ValueError, match="setting port"):
        spec.parse(text)


@pytest.mark.parametrize("text", ["nan", "inf", "1e999"])
def test_number_setting_refuses_non_finite(text: str) -> None:
    spec = SettingSpec("command_timeout", "number", minimum=1)
    with pytest.raises(ValueError, match="setting command_timeout"):
        spec.parse(text)


def test_configure_nan_is_one_error_line(cli: Cli) -> None:
    cli("remote", "add", "k", "--template", "local")
    line = cli.refused("remote", "configure", "k", "--set", "command_timeout=nan")
    assert "command_timeout" in line


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [
        ("nokey", "expected key=value"),
        ("=x", "expected key=value"),
        ("zzz=1", "has no setting 'zzz'"),
        ("command_timeout=0", "below the minimum"),
        ("command_timeout=abc", "is not a number"),
        ("check_connectivity=maybe", "is not a boolean"),
    ],
)
def test_configure_refuses_bad_assignments_and_keeps_the_file(cli: Cli, assignment: str, fragment: str) -> None:
    cli("remote", "add", "k", "--template", "local")
    before = (cli.remotes / "k.json").read_bytes()
    assert fragment in cli.refused("remote", "configure", "k", "--set", assignment)
    assert (cli.remotes / "k.json").read_bytes() == before


def test_key_filename_is_never_read_into_output(cli: Cli, tmp_path: Path) -> None:
    key = tmp_path / "id_test"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETMATERIAL\n-----END OPENSSH PRIVATE KEY-----\n")
    cli("remote", "add", "c", "--template", "ssh-slurm")
    result = cli("remote", "configure", "c", "--set", "host=127.0.0.1", "--set", "port=1",
                 "--set", f"key_filename={key}", "--set", "connect_timeout=1")
    outputs = [result, cli("remote", "show", "c", "--json"), cli("remote", "check", "c", code=1),
               cli("remote", "list")]
    for output in outputs:
        assert "SECRETMATERIAL" not in output.stdout + output.stderr


# -- remote check exit codes (local template: the adapter runs on this machine) -------------------
def check(cli: Cli, *sets: str) -> tuple[int, dict]:
    if not (cli.remotes / "k.json").exists():
        cli("remote", "add", "k", "--template", "local")
    if sets:
        cli("remote", "configure", "k", *[f"--set={s}" for s in sets])
    result = cli("remote", "check", "k", "--json", code=None)
    return result.exit_code, {c["name"]: c["ok"] for c in json.loads(result.stdout)["checks"]}


def test_remote_check_passes_with_a_writable_root_with_spaces(cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "root with 'quote' $(x)"
    root.mkdir()
    code, checks = check(cli, f"httk_command={HTTK}", f"workspace_root={root}")
    assert (code, checks) == (0, {"configuration": True, "connect": True, "httk": True, "batch": True,
                                  "workspace_root": True})


def test_remote_check_fails_1_on_missing_httk_or_root(cli: Cli, tmp_path: Path) -> None:
    code, checks = check(cli, "httk_command=/nonexistent/httk", f"workspace_root={tmp_path}")
    assert (code, checks["httk"], checks["workspace_root"]) == (1, False, True)
    code, checks = check(cli, f"httk_command={HTTK}", f"workspace_root={tmp_path}/absent")
    assert (code, checks["httk"], checks["workspace_root"]) == (1, True, False)


def test_remote_check_without_connectivity_is_0_and_skipped(cli: Cli) -> None:
    code, checks = check(cli, "check_connectivity=no", "httk_command=/nonexistent/httk")
    assert (code, checks) == (0, {"configuration": True, "connect": None})


def test_remote_check_incomplete_ssh_remote_is_1(cli: Cli) -> None:
    cli("remote", "add", "c", "--template", "ssh-slurm")
    assert "failed checks: configuration" in cli("remote", "check", "c", code=1).stderr


def test_remote_check_unreachable_ssh_is_1_naming_connect(cli: Cli) -> None:
    cli("remote", "add", "c", "--template", "ssh-slurm")
    cli("remote", "configure", "c", "--set", "host=127.0.0.1", "--set", "port=1", "--set", "connect_timeout=1")
    assert "failed checks: connect" in cli("remote", "check", "c", code=1).stderr


def test_remote_check_unknown_remote_is_2(cli: Cli) -> None:
    assert "no remote named 'nope'" in cli.refused("remote", "check", "nope")


class FakeEntry:
    """An installed entry point: its name, its target, and whether it was imported."""

    def __init__(self, name: str, value: str, target: object = None) -> None:
        self.name, self.value, self.target, self.loaded = name, value, target, 0

    def load(self) -> object:
        self.loaded += 1
        return self.target


def test_the_catalog_imports_only_the_entry_named_and_refuses_a_clash():
    from httk.workflow.adapters.batch.slurm import SlurmBatchSystem
    from httk.workflow.ports import BatchSystemError

    slurm, other = FakeEntry("slurm", "a:Slurm", SlurmBatchSystem), FakeEntry("lsf", "b:Lsf", object())
    catalog = EntryPointCatalog(entries=lambda group: [slurm, other] if group.endswith("batch_systems") else [])
    assert catalog.batch_system_names() == ["lsf", "slurm"] and catalog.transport_names() == []
    catalog.check_setting("vasp.command", "srun vasp")  # not a batch system's setting: nothing imported
    catalog.check_setting("manager.workers", 4)
    assert (slurm.loaded, other.loaded) == (0, 0)
    with pytest.raises(BatchSystemError, match="unknown Slurm setting 'slurm.partiton'"):
        catalog.check_setting("slurm.partiton", "batch")
    assert catalog.batch_system("slurm") is SlurmBatchSystem and catalog.batch_system("nope") is None
    assert (slurm.loaded, other.loaded) == (1, 0)
    twice = EntryPointCatalog(entries=lambda group: [slurm, FakeEntry("slurm", "evil:Slurm")])
    with pytest.raises(BatchSystemError, match=r"entry point 'slurm' of .* is registered twice \(a:Slurm and "
                                               r"evil:Slurm\); uninstall one"):
        twice.batch_system_names()
    same = EntryPointCatalog(entries=lambda group: [slurm, FakeEntry("slurm", "a:Slurm")])
    assert same.batch_system_names() == ["slurm"]  # an editable install listed twice is no clash


def test_a_remote_whose_batch_system_was_uninstalled_says_so(cli, tmp_path):
    cli("remote", "add", "kappa", "--template", "ssh-slurm")
    path = tmp_path / "xdg-config" / "httk-workflow" / "remotes" / "kappa.json"
    path.write_text(path.read_text().replace('"ssh-slurm"', '"ssh-lsf"'))
    line = cli.refused("remote", "show", "kappa")
    assert line.startswith("error: remote kappa: no remote template 'ssh-lsf'; templates: local, ")
    assert line.endswith("reinstall the batch system or transport it names, or 'httk workflow remote remove kappa'")


@pytest.mark.parametrize(("root", "path", "expected"), [
    ("/scratch/rar", "walk-b1", "/scratch/rar/walk-b1"),
    ("/scratch/rar/", "a/walk-b1", "/scratch/rar/a/walk-b1"),
    ("~/runs", "walk-b1", "~/runs/walk-b1"),  # the remote's httk expands ~ there, as 'remote check' does
    ("/scratch/rar", "/elsewhere/walk-b1", "/elsewhere/walk-b1"),
    ("/scratch/rar", "~/walk-b1", "~/walk-b1"),
    ("", "walk-b1", "walk-b1"),  # '' = the login directory
    ("/scratch/rar", "", ""),  # the remote's default workspace
])
def test_workspace_init_puts_a_relative_path_below_workspace_root(tmp_path, root, path, expected):
    remote = Remote("k", registry_at(tmp_path).template("ssh-slurm"), {"workspace_root": root})
    assert remote.workspace_path(path, creating=True) == expected
    # Elsewhere a bare name is the remote registry's (init registered it); a path is where init put it.
    assert remote.workspace_path(path) == (path if "/" not in path else expected)


def test_a_workspace_root_of_another_users_home_is_refused_with_the_fix(tmp_path):
    remote = Remote("k", registry_at(tmp_path).template("ssh-slurm"), {"workspace_root": "~alice/scratch"})
    with pytest.raises(RemoteError, match=r"^remote k: workspace_root '~alice/scratch': only ~ and ~/ are expanded "
                                          r"there; give the absolute path \('httk workflow remote configure k "):
        remote.workspace_path("a/b")
