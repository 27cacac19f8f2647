"""``httk workflow workflow list|show``: the named workflows a job can be started from.

The catalog is the shipped workflows (the package's ``workflows/`` directory)
plus the workspace's own (runner directories published as
``workflows/<name>``); ``show`` asks the runner for its steps. ``job new``
(in :mod:`.job_cmds`) starts a job from one. A refusal prints one ``error:``
line, exits 2 and writes nothing. Spec: 000 "Running on a remote";
docs/vasp_runners.md "Shipped workflows".
"""

from __future__ import annotations

from typing import Any

import click

from ..operations.workflows import Catalog, Workflow, WorkflowError, describe
from ..store.workspaces import WorkspaceHandle
from ..workflows import SHIPPED_WORKFLOWS
from .context import AppContext, pass_app
from .remote_refs import remote_aware
from .render import EXIT_CODES, Group, emit_json, emit_pairs, emit_table, refuse, value_text

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")


@click.group("workflow", cls=Group)
def workflow_group() -> None:
    """List and describe the workflows a job can be started from (see 'job new').

    \b
    Examples:
      httk workflow workflow list
      httk workflow workflow show vasp-relax runs
    """


def catalog(handle: WorkspaceHandle) -> Catalog:
    return Catalog(handle, SHIPPED_WORKFLOWS)


@workflow_group.command("list", epilog=EXIT_CODES)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@JSON_OPTION
@pass_app
@remote_aware(("workflow", "list"))
def list_workflows(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """List the shipped workflows and the workspace's own (a workspace one shadows a shipped one).

    \b
    Examples:
      httk workflow workflow list
      httk workflow workflow list kappa:runs
    """
    # A new user lists the shipped workflows before anything is submitted: the catalog
    # lives in a workspace, so the per-user default is created here as a first submit would.
    handle = app.open_workspace(workspace, create=True)
    entries = catalog(handle).entries()
    if as_json:
        emit_json([_summary(entry) for entry in entries])
        return
    rows = []
    for entry in entries:
        source = f"{entry.source} (shadows shipped)" if entry.shadows_shipped else entry.source
        rows.append([entry.name, source, f"BROKEN: {entry.problem}" if entry.problem else entry.summary])
    emit_table(["workflow", "source", "summary"], rows)


def _summary(entry: Workflow) -> dict[str, Any]:
    return {
        "name": entry.name, "source": entry.source, "summary": entry.summary, "initial_step": entry.initial_step,
        "problem": entry.problem, "shadows_shipped": entry.shadows_shipped,
    }


@workflow_group.command("show", epilog=EXIT_CODES)
@click.argument("name")
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@JSON_OPTION
@pass_app
@remote_aware(("workflow", "show"))
def show_workflow(app: AppContext, name: str, workspace: str | None, as_json: bool) -> None:
    """Show one workflow: its steps (from the runner's --describe), inputs and the settings it reads.

    \b
    Example:
      httk workflow workflow show vasp-relax runs
    """
    handle = app.open_workspace(workspace, create=True)  # as ``workflow list``
    try:
        entry = catalog(handle).get(name)
        # This environment as it is: ``--describe`` runs where the user runs this command.
        launch = app.container.launch(base_env=app.environ)
        description = describe(handle, entry, app.container.process(), launch)
    except WorkflowError as error:
        refuse(str(error))
    settings = handle.settings()
    report = {
        **entry.to_json(),
        "steps": list(description.steps),
        "settings": {
            setting: {**declared, "set": setting in settings, "value": settings.get(setting)}
            for setting, declared in entry.settings.items()
        },
    }
    if as_json:
        emit_json(report)
        return
    emit_pairs([
        ("workflow", entry.name),
        ("source", entry.source + (" (shadows the shipped one)" if entry.shadows_shipped else "")),
        ("summary", entry.summary),
        ("runner", entry.location),
        ("steps", ", ".join(report["steps"])),
        ("initial step", entry.initial_step),
    ])
    click.echo("inputs:")
    for spec in entry.inputs:
        if spec.required:
            need = "required"
        elif spec.has_default:
            need = f"default {value_text(spec.default)}"
        else:
            need = "optional"
        where = f", staged as {spec.destination}" if spec.destination else ""
        click.echo(f"  {spec.name} ({spec.type}, {need}{where}): {spec.description}")
    click.echo("settings:")
    for setting, declared in report["settings"].items():
        state = f"set to {value_text(declared['value'])}" if declared["set"] else (
            "NOT SET (required)" if declared.get("required") else "not set")
        click.echo(f"  {setting}: {state}; {declared.get('description', '')}")
    if entry.options:
        click.echo("runner options (workflow.json):")
        for option, value in entry.options.items():
            click.echo(f"  {option} = {value_text(value)}")
