"""Review 2: the command line on a damaged registry; --json is one value; documented exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from httk.workflow.bootstrap import Container
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk


class _Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
        self.registry = tmp_path / "xdg" / "httk-workflow" / "registry.json"

    def __call__(self, *args: str):
        return CliRunner().invoke(httk, ["workflow", *args], obj=AppContext(Container()), env=self.env)


@pytest.fixture
def cli(tmp_path: Path) -> _Cli:
    return _Cli(tmp_path)


@pytest.fixture
def ws(cli: _Cli, tmp_path: Path) -> str:
    path = str(tmp_path / "ws")
    assert cli("workspace", "init", path).exit_code == 0
    return path


def _one_error_line(result) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@pytest.mark.parametrize("content", ["{not json", "[1]", '{"workspaces": []}'])
@pytest.mark.parametrize(
    "args", [("workspace", "list"), ("workspace", "list", "--json"), ("workspace", "status", "ws")]
)
def test_unreadable_registry_is_one_error_line(cli, ws, content, args):
    cli.registry.write_text(content)
    _one_error_line(cli(*args))


def test_registry_entry_with_non_string_path_is_refused(cli, ws):
    document = json.loads(cli.registry.read_text())
    document["workspaces"]["ws"] = 5
    cli.registry.write_text(json.dumps(document))
    _one_error_line(cli("workspace", "status", "ws"))


@pytest.mark.parametrize(
    "args",
    [
        ("workspace", "gc", "{ws}", "--json"),
        ("workspace", "gc", "{ws}", "--dry-run", "--json"),
        ("workspace", "fsck", "{ws}", "--json"),
        ("workspace", "status", "{ws}", "--json"),
        ("workspace", "settings", "show", "{ws}", "--json"),
        ("job", "list", "{ws}", "--json"),
    ],
)
def test_json_output_is_one_value(cli, ws, args):
    result = cli(*(arg.format(ws=ws) for arg in args))
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)


@pytest.mark.parametrize("selector", ["nonexistent", "../x", "/etc", ""])
def test_unknown_job_selector_is_exit_2(cli, ws, selector):
    _one_error_line(cli("job", "show", ws, selector))


@pytest.mark.parametrize(("key", "value"), [("retention.attempt_control_days", '"abc"'), ("retention", "[1]")])
def test_bad_retention_policy_is_refused_and_gc_still_runs(cli, ws, key, value):
    _one_error_line(cli("workspace", "policy", "set", ws, key, value))
    result = cli("workspace", "gc", ws, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["retention"] == {}


@pytest.mark.parametrize("name", ["a b", "../x", "A.B", ""])
def test_odd_setting_names_are_refused(cli, ws, name):
    _one_error_line(cli("workspace", "settings", "set", ws, name, "1"))
