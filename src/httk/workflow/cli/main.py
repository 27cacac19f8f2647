"""The command trees of the console scripts: ``httk`` (group ``workflow``) and ``httk-taskmanager``.

The command groups are loaded lazily: ``httk workflow`` knows each command only
as ``module:attribute`` (:data:`WORKFLOW_COMMANDS`) and imports that module when
the command is asked for (:class:`.lazy.LazyGroup`), so ``workspace status``
imports the workspace commands and what they use, not the whole tree; ``--help``
still lists every command (it asks for each). A command registered eagerly with
``workflow.add_command`` works as before and wins over a lazy entry of the same name.

``httk-taskmanager`` is an alias tree: its ``init``, ``submit``, ``run``,
``status`` and ``request`` (once ``job request`` exists) are the very command
objects of the canonical spelling, looked up when invoked, so the two spellings
cannot disagree. Spec: 000 (every command is spelled ``httk workflow ...``; the
alias maps onto the same tree).

The console scripts enter through :mod:`.entry`, which imports this module with
the garbage collector paused and freezes what exists afterwards (a start-up
saving); importing this module itself changes nothing process-wide.
"""

from __future__ import annotations

import click

from .context import ensure_app
from .lazy import LazyGroup
from .render import Group

#: ``httk workflow NAME`` -> ``module:attribute`` (relative to this package) of its command. A new
#: command group is registered here (imported only when used), or eagerly with ``workflow.add_command``.
WORKFLOW_COMMANDS: dict[str, str] = {
    "collect": "collect_cmds:collect",
    "config": "config_cmds:config",
    "job": "job_cmds:job",
    "manager": "manager_cmds:manager",
    "precheck": "precheck_cmds:precheck",
    "remote": "remote_cmds:remote",
    "run": "manager_cmds:run",
    "runner": "runner_cmds:runner",
    "transfer": "transfer_cmds:transfer",
    "transfer-remote": "transfer_cmds:transfer_remote",
    "v1": "v1_cmds:v1",
    "workflow": "workflow_cmds:workflow_group",
    "workspace": "workspace_cmds:workspace",
}


@click.group("httk", cls=Group)
@click.version_option(package_name="httk-workflow")
@click.pass_context
def httk(ctx: click.Context) -> None:
    """httk command line.

    \b
    Examples:
      httk workflow workspace init ./runs --name runs
      httk workflow job submit runs ./prepared-job --placement project-a
      httk workflow run runs --workers 8
    """
    ensure_app(ctx)


@httk.group("workflow", cls=LazyGroup, lazy=WORKFLOW_COMMANDS)
def workflow() -> None:
    """Filesystem-native workflow task manager: workspaces, jobs, runners, managers.

    \b
    Examples:
      httk workflow workspace init ./runs --name runs
      httk workflow job submit runs ./prepared-job --placement project-a
      httk workflow run runs --workers 8
      httk workflow workspace status runs
    """


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
        command = command.get_command(click.Context(command), name)
    return command


class AliasGroup(Group):
    """A group whose commands are looked up in the ``workflow`` tree when asked for.

    Resolving at call time rather than import time means an alias whose target is
    registered later (``job request``) appears without this module knowing when,
    and an alias imports only its own command's module.
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
    """Task manager shortcuts: aliases of 'httk workflow' commands.

    \b
    Examples:
      httk-taskmanager init ./runs
      httk-taskmanager submit runs ./prepared-job --placement project-a
      httk-taskmanager run runs --workers 8
    """
    ensure_app(ctx)
