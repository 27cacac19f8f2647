"""An unknown remote name is refused in one line that suggests the close configured name, or lists them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_support import Cli

SEE = "see 'httk workflow remote list' and 'remote add'"


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` with its bytes (``None`` for a directory)."""
    return {str(path.relative_to(root)): None if path.is_dir() else path.read_bytes() for path in root.rglob("*")}


@pytest.fixture
def configured(cli: Cli, tmp_path: Path, payload: Path) -> str:
    """Remotes ``kappa`` and ``lumi``, and a local workspace ``ws`` with one submitted job; returns its path."""
    for name in ("kappa", "lumi"):
        cli("remote", "add", name, "--template", "ssh-slurm")
    path = str(tmp_path / "ws")
    cli("workspace", "init", path)
    cli("job", "submit", path, str(payload), "--placement", "p", "--tag", "one")
    return path


@pytest.mark.parametrize("args", [
    ["remote", "show", "kapa"],
    ["remote", "check", "kapa"],
    ["run", "kapa:runs"],
    ["transfer", "{ws}", "kapa:runs", "--kind", "submitted"],
    ["job", "list", "kapa:runs"],
    ["workspace", "init", "kapa:/scratch/runs"],
])
def test_a_misspelt_remote_names_the_close_one_exits_2_and_writes_nothing(cli, tmp_path, configured, args):
    line = refused_writing_nothing(cli, tmp_path, configured, args)
    assert line == f"error: no remote named 'kapa' (did you mean 'kappa'?); {SEE}"


def refused_writing_nothing(cli, tmp_path, configured: str, args: list[str]) -> str:
    """The one refusal line of ``args`` (``{ws}``: the configured workspace), checking that nothing was written."""
    before = tree(tmp_path)
    line = cli.refused(*[arg.format(ws=configured) for arg in args])
    assert tree(tmp_path) == before
    return line


def test_a_name_close_to_none_lists_the_configured_remotes(cli, tmp_path, configured):
    before = tree(tmp_path)
    line = cli.refused("transfer", configured, "nowhere:runs", "--kind", "submitted")
    assert line == f"error: no remote named 'nowhere' (configured: kappa, lumi); {SEE}"
    assert tree(tmp_path) == before


def test_with_no_remote_configured_the_line_is_as_before(cli, tmp_path):
    line = cli.refused("remote", "show", "kapa")
    assert line == f"error: no remote named 'kapa'; {SEE}"
    assert not cli.config_home.exists()  # nothing written, not even the remote directory


def test_an_unreadable_remotes_directory_drops_the_suggestion_not_the_line(cli, tmp_path, configured, monkeypatch):
    # The tests run as root, for whom a mode-0o100 directory is readable: scandir fails as it would for a user
    # (EACCES) while the remote's own path is still looked up for real (not there: the name is unknown).
    remotes, scandir = os.fspath(cli.remotes), os.scandir

    def refusing(path: str = ".") -> object:
        if os.fspath(path) == remotes:
            raise PermissionError(13, "Permission denied", path)
        return scandir(path)

    before = tree(tmp_path)
    monkeypatch.setattr(os, "scandir", refusing)
    line = cli.refused("remote", "show", "kapa")
    monkeypatch.undo()
    assert line == f"error: no remote named 'kapa'; {SEE}"
    assert tree(tmp_path) == before


@pytest.mark.parametrize("args", [
    ["transfer", "{ws}", "kappa", "--kind", "submitted"],
    ["transfer", "kappa", "{ws}"],
    ["workspace", "status", "kappa"],
])
def test_a_remote_name_without_its_colon_says_how_its_workspaces_are_written(cli, tmp_path, configured, args):
    line = refused_writing_nothing(cli, tmp_path, configured, args)
    assert line == ("error: kappa: neither a directory nor a registered workspace name; see 'httk workflow workspace "
                    "list' (kappa is a configured remote: its default workspace is written 'kappa:', one there "
                    "'kappa:NAME')")
    # A name that is no remote keeps the plain line.
    assert cli.refused("workspace", "status", "nosuch").endswith("see 'httk workflow workspace list'")
