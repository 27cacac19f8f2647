"""``httk workflow workspace``: init, status, policy and application settings.

Commands parse, call a service, render. Policy values are JSON and validated on
write (an unknown key is refused); a setting's value is JSON when it parses and
the plain string otherwise, so ``'"srun -n 32"'`` and ``"srun -n 32"`` store the
same thing. Spec: 000 "Initialize a workspace", "Workspace policy", "Application
settings", "Inspect and control".
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from ..operations import inspection
from ..operations.registry import RegistryError
from ..store.layout import Layout
from .context import AppContext, pass_app
from .remote_refs import remote_aware
from .render import EXIT_CODES, Group, emit_json, emit_pairs, emit_table, flatten, refuse, value_text

WORKSPACE_ARG = click.argument("workspace", required=False, metavar="[WORKSPACE]")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")


@click.group("workspace", cls=Group)
def workspace() -> None:
    """Create, inspect and configure workspaces."""


@workspace.command("init", epilog=EXIT_CODES)
@click.argument("path")
@click.option("--name", help="The workspace's name (default: the directory's basename).")
@click.option(
    "--durable/--no-durable",
    default=True,
    help="Synchronize protocol publications to storage (default). --no-durable is for throwaway workspaces.",
)
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "init"), "path")
def init(app: AppContext, path: str, name: str | None, durable: bool, as_json: bool) -> None:
    """Create a workspace at PATH, or adopt the existing one there unchanged."""
    target = app.absolute(path)
    # Only for the wording: init itself adopts an existing workspace unchanged.
    existed = app.container.fs().exists(Layout.at(target).format_file)
    wanted = name or os.path.basename(target)
    registered = app.registry.lookup(wanted)
    if registered is not None and registered != target and name is not None:
        raise RegistryError(
            f"workspace name {wanted!r} is already registered for {registered}; choose another --name "
            f"or 'httk workflow workspace forget {wanted}' first"
        )
    handle = app.workspaces.init(target, name=name, durable=durable)
    if registered is None:
        app.registry.register(wanted, handle.root)
    elif registered != target:
        click.echo(f"note: the name {wanted!r} is registered for {registered}; this workspace is reachable "
                   "by its path only (give --name to register it)", err=True)
    report = {
        "name": handle.name,
        "path": handle.root,
        "workspace_id": handle.workspace_id,
        "durable": handle.durable,
    }
    if as_json:
        emit_json(report)
        return
    if existed and name is not None and name != handle.name:
        click.echo(f"note: the existing workspace keeps its name {handle.name!r}", err=True)
    verb = "adopted" if existed else "initialized"
    durability = "" if handle.durable else " (not durable)"
    click.echo(f"{verb} workspace {handle.name!r} at {handle.root}{durability}")


@workspace.command("status", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "status"))
def status(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """Count the jobs of a workspace per state kind."""
    handle = app.open_workspace(workspace)
    report = inspection.status(handle)
    if as_json:
        emit_json(report)
        return
    durability = "durable" if report["durable"] else "not durable"
    click.echo(f"workspace {report['name']} at {report['path']} ({durability}, id {report['workspace_id']})")
    rows = [[kind, count] for kind, count in report["counts"].items()]
    emit_table(["kind", "jobs"], [*rows, ["total", report["total"]]])
    for damage in report["damage"]:
        job = f" job {damage['job']}" if damage.get("job") else ""
        click.echo(f"damage {damage['code']}:{job} {damage['message']} ({damage['path']})")
    if report["damage"]:
        click.echo(f"{len(report['damage'])} damaged: run 'httk workflow workspace fsck {report['path']}'")


# -- policy ------------------------------------------------------------------------------------
@workspace.group("policy", cls=Group)
def policy() -> None:
    """Show or change the workspace's engine policy (format.json)."""


@policy.command("show", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "policy", "show"))
def policy_show(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """Show the four policy tunables."""
    handle = app.open_workspace(workspace)
    if as_json:
        emit_json(handle.policy)
        return
    emit_pairs(flatten(handle.policy))


def parse_policy_value(key: str, text: str) -> Any:
    """A policy value is JSON; a bare word is refused with the quoting that would make it one."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        refuse(f"policy {key}: value {text!r} is not JSON; quote it as JSON, e.g. '\"{text}\"' for a string")
    except ValueError as error:  # an integer beyond the interpreter's digit limit
        refuse(f"policy {key}: {str(error).split(';')[0]}")


@policy.command("set", epilog=EXIT_CODES)
@click.argument("workspace")
@click.argument("key")
@click.argument("value")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "policy", "set"))
def policy_set(app: AppContext, workspace: str, key: str, value: str, as_json: bool) -> None:
    """Set policy KEY (dotted for retention.*) to the JSON VALUE; null removes a retention limit."""
    handle = app.open_workspace(workspace)
    new_policy = handle.set_policy(key, parse_policy_value(key, value))
    if as_json:
        emit_json(new_policy)
        return
    shown = dict(flatten(new_policy)).get(key, new_policy.get(key))
    click.echo(f"{key} = {value_text(shown) if shown is not None else 'unset'}")


# -- settings ----------------------------------------------------------------------------------
@workspace.group("settings", cls=Group)
def settings() -> None:
    """Show or change the workspace's application settings (settings.json)."""


@settings.command("show", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "settings", "show"))
def settings_show(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """Show every application setting."""
    handle = app.open_workspace(workspace)
    values = handle.settings()
    if as_json:
        emit_json(values)
        return
    if not values:
        click.echo("no settings")
        return
    for name in sorted(values):
        click.echo(f"{name} = {json.dumps(values[name], sort_keys=True, ensure_ascii=False)}")


def parse_setting_value(text: str) -> Any:
    """JSON when ``text`` parses as JSON, else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except ValueError as error:  # an integer beyond the interpreter's digit limit
        refuse(f"setting value: {str(error).split(';')[0]}")


@settings.command("set", epilog=EXIT_CODES)
@click.argument("workspace")
@click.argument("name")
@click.argument("value")
@pass_app
@remote_aware(("workspace", "settings", "set"))
def settings_set(app: AppContext, workspace: str, name: str, value: str) -> None:
    """Set setting NAME to VALUE (JSON, or a plain string when it is not valid JSON)."""
    handle = app.open_workspace(workspace)
    parsed = parse_setting_value(value)
    handle.set_setting(name, parsed)
    click.echo(f"{name} = {json.dumps(parsed, sort_keys=True, ensure_ascii=False)}")


@settings.command("unset", epilog=EXIT_CODES)
@click.argument("workspace")
@click.argument("name")
@pass_app
@remote_aware(("workspace", "settings", "unset"))
def settings_unset(app: AppContext, workspace: str, name: str) -> None:
    """Remove setting NAME (a name that is not set is not an error)."""
    handle = app.open_workspace(workspace)
    removed = handle.unset_setting(name)
    click.echo(f"{name} unset" if removed else f"{name} was not set")
