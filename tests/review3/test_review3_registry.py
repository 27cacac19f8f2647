"""Review 3: REMOTE:PATH parsing, the remote registry's files and settings, 'remote check' exit codes (local)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from review3_support import Cli, one_error_line

from httk.workflow.services.remotes import RemoteReference, SettingSpec, split_reference

HTTK = str(Path(sys.executable).parent / "httk")


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


# -- REMOTE:PATH from the text alone --------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kappa:", RemoteReference("kappa", "")),
        ("kappa:/a:b", RemoteReference("kappa", "/a:b")),
        ("kappa:runs", RemoteReference("kappa", "runs")),
        ("kappa:a b\nc", RemoteReference("kappa", "a b\nc")),
        ("k.1-x_y:-rf", RemoteReference("k.1-x_y", "-rf")),
        ("Kappa:/x", None),
        ("KAPPA:", None),
        ("./kappa:x", None),
        ("/abs/kappa:x", None),
        ("rel/kappa:x", None),
        ("kappa", None),
        (":x", None),
        ("-x:y", None),
        (".k:y", None),
        ("", None),
        (None, None),
        ("a" * 49 + ":x", None),
    ],
)
def test_split_reference(text: str | None, expected: RemoteReference | None) -> None:
    assert split_reference(text) == expected


def test_a_local_directory_named_like_a_reference_is_still_remote(cli: Cli, tmp_path: Path, monkeypatch) -> None:
    # Documented: the text decides, nothing local is consulted; './kappa:ws' is the local spelling.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kappa:ws").mkdir()
    line = one_error_line(cli("workspace", "status", "kappa:ws"))
    assert line == "error: no remote named 'kappa'; see 'httk workflow remote list' and 'remote add'"
    result = cli("workspace", "status", "./kappa:ws")
    assert result.exit_code == 2 and "not an httk-workflow workspace" in result.stderr


def test_uppercase_remote_name_is_refused_and_uppercase_reference_is_local(cli: Cli) -> None:
    line = one_error_line(cli("remote", "add", "Kappa", "--template", "local"))
    assert "invalid remote name 'Kappa'" in line
    result = cli("workspace", "status", "Kappa:/nowhere")
    assert result.exit_code == 2 and "not an httk-workflow workspace" in result.stderr


def test_empty_path_reference_uses_the_remotes_default_workspace(cli: Cli) -> None:
    assert cli("remote", "add", "here", "--template", "local").exit_code == 0
    assert cli("remote", "configure", "here", "--set", f"httk_command={HTTK}").exit_code == 0
    # Forwarded with this test's XDG homes (LocalTransport inherits the environment of the process).
    result = cli("workspace", "status", "here:", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["path"].endswith("/workspaces/default")


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
        assert fragment in one_error_line(cli(*argv))


def test_missing_remotes_directory_lists_nothing(cli: Cli) -> None:
    result = cli("remote", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["remotes"] == []


def test_stray_file_in_remotes_directory_does_not_break_list(cli: Cli) -> None:
    assert cli("remote", "add", "good", "--template", "local").exit_code == 0
    shutil.copy(cli.remotes / "good.json", cli.remotes / "Good.json")
    result = cli("remote", "list", "--json")
    assert result.exit_code == 0, result.stderr
    assert [row["name"] for row in json.loads(result.stdout)["remotes"]] == ["good"]


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
    assert cli("remote", "add", "k", "--template", "local").exit_code == 0
    line = one_error_line(cli("remote", "configure", "k", "--set", "command_timeout=nan"))
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
    assert cli("remote", "add", "k", "--template", "local").exit_code == 0
    before = (cli.remotes / "k.json").read_bytes()
    assert fragment in one_error_line(cli("remote", "configure", "k", "--set", assignment))
    assert (cli.remotes / "k.json").read_bytes() == before


def test_key_filename_is_never_read_into_output(cli: Cli, tmp_path: Path) -> None:
    key = tmp_path / "id_test"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETMATERIAL\n-----END OPENSSH PRIVATE KEY-----\n")
    assert cli("remote", "add", "c", "--template", "ssh-slurm").exit_code == 0
    result = cli("remote", "configure", "c", "--set", "host=127.0.0.1", "--set", "port=1",
                 "--set", f"key_filename={key}", "--set", "connect_timeout=1")
    assert result.exit_code == 0
    outputs = [result, cli("remote", "show", "c", "--json"), cli("remote", "check", "c"), cli("remote", "list")]
    assert outputs[2].exit_code == 1
    for output in outputs:
        assert "SECRETMATERIAL" not in output.stdout + output.stderr


# -- remote check exit codes (local template: the adapter runs on this machine) -------------------
def check(cli: Cli, *sets: str) -> tuple[int, dict]:
    if not (cli.remotes / "k.json").exists():
        assert cli("remote", "add", "k", "--template", "local").exit_code == 0
    if sets:
        assert cli("remote", "configure", "k", *[f"--set={s}" for s in sets]).exit_code == 0
    result = cli("remote", "check", "k", "--json")
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
    assert cli("remote", "add", "c", "--template", "ssh-slurm").exit_code == 0
    result = cli("remote", "check", "c")
    assert result.exit_code == 1
    assert "failed checks: configuration" in result.stderr


def test_remote_check_unreachable_ssh_is_1_naming_connect(cli: Cli) -> None:
    assert cli("remote", "add", "c", "--template", "ssh-slurm").exit_code == 0
    cli("remote", "configure", "c", "--set", "host=127.0.0.1", "--set", "port=1", "--set", "connect_timeout=1")
    result = cli("remote", "check", "c")
    assert result.exit_code == 1
    assert "failed checks: connect" in result.stderr


def test_remote_check_unknown_remote_is_2(cli: Cli) -> None:
    assert "no remote named 'nope'" in one_error_line(cli("remote", "check", "nope"))
