"""The command tree loads lazily: a read command imports its own group's module, not the whole tree.

``httk workflow`` knows its commands as ``module:attribute`` (``cli.main.WORKFLOW_COMMANDS``)
until one is asked for; ``--help`` still lists them all, and a command added eagerly with
``add_command`` (how another module may register one) works beside the lazy ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
from click.testing import CliRunner

from httk.workflow.cli.lazy import LazyGroup
from httk.workflow.cli.main import WORKFLOW_COMMANDS, httk

#: Modules a read command has no use for: the rest of the tree, the engine, the writers and forwarders.
NOT_FOR_READING = (
    "httk.workflow.cli.job_cmds", "httk.workflow.cli.manager_cmds", "httk.workflow.cli.remote_cmds",
    "httk.workflow.cli.transfer_cmds", "httk.workflow.cli.report_cmds", "httk.workflow.cli.collect_cmds",
    "httk.workflow.engine.manager", "httk.workflow.operations.diagnosis", "httk.workflow.operations.gc",
    "httk.workflow.operations.debug", "httk.workflow.operations.submission", "httk.workflow.operations.forwarding",
)

PROBE = """
import json, sys
from httk.workflow.cli.main import httk
try:
    httk(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps(sorted(name for name in sys.modules if name.startswith("httk."))), file=sys.stderr)
"""


def imported_by(*args: str) -> set[str]:
    """The ``httk.*`` modules one invocation in a fresh interpreter imported."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True,
                          env=os.environ.copy())
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_workspace_status_imports_only_what_reading_needs(workspace):
    modules = imported_by("workflow", "workspace", "status", workspace)
    assert "httk.workflow.cli.workspace_cmds" in modules
    assert modules.isdisjoint(NOT_FOR_READING), sorted(modules & set(NOT_FOR_READING))


def test_job_list_imports_the_job_commands_only(workspace):
    modules = imported_by("workflow", "job", "list", workspace)
    assert "httk.workflow.cli.job_cmds" in modules and "httk.workflow.cli.workspace_cmds" not in modules
    assert modules.isdisjoint(set(NOT_FOR_READING) - {"httk.workflow.cli.job_cmds"})


def test_help_lists_every_command_of_the_table():
    listed = CliRunner().invoke(httk, ["workflow", "--help"]).stdout
    ctx = click.Context(httk)
    workflow = httk.get_command(ctx, "workflow")
    for name in WORKFLOW_COMMANDS:
        command = workflow.get_command(click.Context(workflow), name)
        assert command is not None and (command.hidden or f"  {name} " in listed), name


def test_an_eagerly_added_command_wins_and_is_listed_beside_the_lazy_ones():
    group = LazyGroup("g", lazy={"status": "workspace_cmds:status", "b": "workspace_cmds:workspace"})

    @click.command("a")
    def a() -> None:
        """An eager one."""

    group.add_command(a)
    group.add_command(a, "b")
    ctx = click.Context(group)
    assert group.list_commands(ctx) == ["a", "b", "status"]
    assert group.get_command(ctx, "b") is a
    assert group.get_command(ctx, "status").name == "status"
    assert group.get_command(ctx, "missing") is None
