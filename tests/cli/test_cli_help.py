"""Every command has --help; the console scripts are installed; the alias tree shares command objects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from httk.workflow.cli.main import httk, taskmanager, workflow


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), (*path, name))


def child(group: click.Group, name: str) -> click.Command | None:
    return group.get_command(click.Context(group), name)


COMMANDS = [path for path, _ in walk(httk)] + [("--taskmanager--", *path) for path, _ in walk(taskmanager)]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "httk")
def test_every_command_has_help(path):
    root = httk
    if path and path[0] == "--taskmanager--":
        root, path = taskmanager, path[1:]
    result = CliRunner().invoke(root, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage:")
    command = root
    for name in path:
        command = child(command, name)
    summary = command.get_short_help_str(limit=200)
    assert summary and summary in " ".join(result.stdout.split())
    if not isinstance(command, click.Group):
        assert "Exit status:" in result.stdout


def test_expected_command_tree():
    paths = {" ".join(path) for path, _ in walk(httk)}
    for expected in (
        "workflow workspace init",
        "workflow workspace status",
        "workflow workspace policy show",
        "workflow workspace policy set",
        "workflow workspace settings show",
        "workflow workspace settings set",
        "workflow workspace settings unset",
        "workflow runner publish",
        "workflow job submit",
        "workflow job list",
        "workflow job show",
        "workflow job log",
        "workflow manager run",
        "workflow run",
    ):
        assert expected in paths


def test_taskmanager_aliases_are_the_same_command_objects():
    groups = workflow.commands
    assert child(taskmanager, "init") is groups["workspace"].commands["init"]
    assert child(taskmanager, "submit") is groups["job"].commands["submit"]
    assert child(taskmanager, "status") is groups["workspace"].commands["status"]
    assert child(taskmanager, "run") is groups["run"] is groups["manager"].commands["run"]
    request = groups["job"].commands.get("request")
    assert child(taskmanager, "request") is request
    listed = taskmanager.list_commands(click.Context(taskmanager))
    assert listed == sorted(["init", "run", "status", "submit", *(["request"] if request else [])])


def test_root_group_creates_its_context_when_none_is_supplied(tmp_path):
    result = CliRunner().invoke(
        httk, ["workflow", "workspace", "init", str(tmp_path / "ws"), "--json"], env={"XDG_DATA_HOME": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "ws"


def script(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.skip(f"console script {name} is not installed next to {sys.executable}")
    return str(path)


def test_console_scripts_run(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for name in ("httk", "httk-taskmanager"):
        done = subprocess.run([script(name), "--help"], capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0 and "Usage:" in done.stdout, done.stderr
    target = tmp_path / "ws"
    done = subprocess.run(
        [script("httk"), "workflow", "workspace", "init", str(target), "--name", "alpha"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (target / ".httk-workflow" / "format.json").is_file()
    done = subprocess.run(
        [script("httk-taskmanager"), "status", str(target), "--json"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "alpha"
    done = subprocess.run(
        [script("httk-taskmanager"), "init", str(tmp_path / "other")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and "initialized" in done.stdout, done.stderr
    refused = subprocess.run(
        [script("httk"), "workflow", "workspace", "status", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1


@pytest.mark.parametrize("path", [("transfer",), ("job", "new"), ("workflow", "list"), ("workflow", "show"),
                                  ("workspace", "list")], ids=" ".join)
def test_the_campaign_commands_show_a_whole_example_command_line(path):
    """Each example line is one unwrapped command a user can copy: ``httk workflow`` and the command's path."""
    result = CliRunner().invoke(workflow, [*path, "--help"], terminal_width=60)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip() in ("Example:", "Examples:"))
    block = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        block.append(line.strip())
    # Every line of the block is a whole command: none was rewrapped at the terminal width.
    prefix = "httk workflow " + " ".join(path)
    assert block and all(line == prefix or line.startswith(prefix + " ") for line in block), block


def _resolves(words: list[str]) -> bool:
    """Whether ``httk workflow WORDS...`` reaches a command that is not a group (options and arguments may follow)."""
    command: click.Command | None = workflow
    for word in words:
        if not isinstance(command, click.Group):
            return True
        command = child(command, word)
        if command is None:
            return False
    return not isinstance(command, click.Group)


LEAVES = [(root_name, path) for root_name, root in (("httk", httk), ("httk-taskmanager", taskmanager))
          for path, command in walk(root) if not isinstance(command, click.Group) and not command.hidden]


@pytest.mark.parametrize(("root_name", "path"), LEAVES, ids=lambda value: " ".join(value) if isinstance(value, tuple)
                         else value)
def test_every_command_help_shows_an_example_of_itself(root_name, path):
    """Each help page has an ``Example(s):`` block; every line is ``httk workflow`` and a command that exists.

    One of them runs the very command (an alias shows the canonical spelling). A hidden
    command (``transfer-remote``, run by ``transfer`` itself) is not for people.
    """
    root = httk if root_name == "httk" else taskmanager
    block = _example_block(root, root_name, path, width=200)
    assert block and all(words[:2] == ["httk", "workflow"] and _resolves(words[2:]) for words in block), block
    command = root
    for name in path:
        command = child(command, name)
    canonical = [words for words in block if _target(words[2:]) is command]
    assert canonical, f"no example of {root_name} {' '.join(path)} runs that command: {block}"


def _example_block(root: click.Group, root_name: str, path: tuple[str, ...], *, width: int) -> list[list[str]]:
    """The words of each line of the first ``Example(s):`` block of ``path --help`` (comments dropped)."""
    result = CliRunner().invoke(root, [*path, "--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    starts = [index for index, line in enumerate(lines) if line.strip() in ("Example:", "Examples:")]
    assert starts, f"'{root_name} {' '.join(path)} --help' shows no example"
    block = []
    for line in lines[starts[0] + 1:]:
        if not line.strip():
            break
        block.append(line.split("#")[0].split())
    return block


def _target(words: list[str]) -> click.Command | None:
    command: click.Command | None = workflow
    for word in words:
        if not isinstance(command, click.Group):
            break
        command = child(command, word)
    return command


GROUPS = [(root_name, path) for root_name, root in (("httk", httk), ("httk-taskmanager", taskmanager))
          for path, command in walk(root) if isinstance(command, click.Group)]


def _resolve(root: click.Group, words: list[str]) -> tuple[tuple[str, ...], click.Command | None]:
    """The command names ``words`` reaches from ``root`` and the command they end at."""
    command: click.Command | None = root
    path: list[str] = []
    for word in words:
        if not isinstance(command, click.Group):
            break
        command = child(command, word)
        path.append(word)
        if command is None:
            break
    return tuple(path), command


@pytest.mark.parametrize(("root_name", "path"), GROUPS, ids=lambda value: " ".join(value) if isinstance(value, tuple)
                         else value)
def test_every_group_help_shows_an_example_of_its_commands(root_name, path):
    """A group's help (``httk workflow job --help``...) has an ``Example(s):`` block too (developers' guide:
    every command has --help with an example); each line runs a command of that group, unwrapped."""
    root = httk if root_name == "httk" else taskmanager
    block = _example_block(root, root_name, path, width=80)
    assert block
    for words in block:
        assert words[0] == root_name, block
        reached, command = _resolve(root, words[1:])
        assert command is not None and not isinstance(command, click.Group), words
        assert reached[:len(path)] == path, f"{words} is not a command of '{root_name} {' '.join(path)}'"
