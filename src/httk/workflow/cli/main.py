"""The console scripts: ``httk`` (group ``workflow``) and ``httk-taskmanager``.

``httk-taskmanager`` is an alias tree: its ``init``, ``submit``, ``run``,
``status`` and ``request`` (once ``job request`` exists) are the very command
objects of the canonical spelling, looked up when invoked, so the two spellings
cannot disagree. Spec: 000 (every command is spelled ``httk workflow ...``; the
alias maps onto the same tree).
"""

from __future__ import annotations

import click

from .config_cmds import config
from .context import ensure_app
from .debug_cmds import debug as _debug  # noqa: F401  (registers ``job debug``)
from .diagnosis_cmds import collect as _collect
from .diagnosis_cmds import precheck as _precheck
from .diagnosis_cmds import why as _why  # noqa: F401  (registers ``job why``, ``workspace managers``)
from .fsck_cmds import fsck as _fsck  # noqa: F401  (registers ``workspace fsck``)
from .job_cmds import job
from .manager_cmds import manager, run
from .registry_cmds import forget as _forget  # noqa: F401  (registers ``workspace list/default/forget/delete``)
from .remote_cmds import remote  # also registers ``manager status``
from .render import Group
from .request_cmds import request as _request  # noqa: F401  (registers ``job request``)
from .runner_cmds import runner
from .transfer_cmds import transfer, transfer_remote
from .workflow_cmds import workflow_group  # also registers ``job new``
from .workspace_cmds import workspace


@click.group("httk", cls=Group)
@click.version_option(package_name="httk-workflow")
@click.pass_context
def httk(ctx: click.Context) -> None:
    """httk command line."""
    ensure_app(ctx)


@httk.group("workflow", cls=Group)
def workflow() -> None:
    """Filesystem-native workflow task manager: workspaces, jobs, runners, managers."""


for _command in (workspace, job, runner, manager, remote, config, workflow_group):
    workflow.add_command(_command)
workflow.add_command(run, "run")
workflow.add_command(_precheck, "precheck")
workflow.add_command(_collect, "collect")
workflow.add_command(transfer, "transfer")
workflow.add_command(transfer_remote, "transfer-remote")
del _command


ALIASES: dict[str, tuple[str, ...]] = {
    "init": ("workspace", "init"),
    "submit": ("job", "submit"),
    "run": ("run",),
    "status": ("workspace", "status"),
    "request": ("job", "request"),
}


def _lookup(path: tuple[str, ...]) -> click.Command | None:
    command: click.Command | None = workflow
    for name in path:
        if not isinstance(command, click.Group):
            return None
        command = command.commands.get(name)
    return command


class AliasGroup(Group):
    """A group whose commands are looked up in the ``workflow`` tree when asked for.

    Resolving at call time rather than import time means an alias whose target is
    registered later (``job request``) appears without this module knowing when.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, path in ALIASES.items() if _lookup(path) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        path = ALIASES.get(cmd_name)
        return _lookup(path) if path is not None else None


@click.group("httk-taskmanager", cls=AliasGroup)
@click.version_option(package_name="httk-workflow")
@click.pass_context
def taskmanager(ctx: click.Context) -> None:
    """Task manager shortcuts: aliases of 'httk workflow' commands."""
    ensure_app(ctx)
