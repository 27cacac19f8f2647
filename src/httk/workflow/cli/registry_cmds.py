"""``httk workflow workspace list|default|forget|delete``: this machine's workspace names.

Spec: 000 "Initialize a workspace".
"""

from __future__ import annotations

import click

from ..operations.diagnosis import managers
from ..operations.registry import RegistryError
from .context import AppContext, pass_app
from .remote_refs import remote_aware
from .render import EXIT_CODES, emit_json
from .workspace_cmds import JSON_OPTION, workspace


@workspace.command("list", epilog=EXIT_CODES)
@click.argument("remote", required=False, metavar="[REMOTE:]")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "list"), "remote", bare=True)
def list_workspaces(app: AppContext, remote: str | None, as_json: bool) -> None:
    """This machine's registered workspace names and paths; with REMOTE: (e.g. kappa:), that remote's.

    \b
    Examples:
      httk workflow workspace list
      httk workflow workspace list kappa:
    """
    if remote is not None:
        raise RegistryError(f"{remote}: expected a remote followed by a colon, e.g. 'kappa:' "
                            "(see 'httk workflow remote list')")
    entries = app.registry.entries()
    chosen = app.registry.default() or "default"
    fs = app.container.fs()
    rows = [
        {"name": name, "path": path, "default": name == chosen,
         "exists": fs.exists(f"{path}/.httk-workflow/format.json")}
        for name, path in entries.items()
    ]
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        mark = "*" if row["default"] else " "
        missing = "" if row["exists"] else "  (not initialized yet)"
        click.echo(f"{mark} {row['name']:<20} {row['path']}{missing}")


@workspace.command("default", epilog=EXIT_CODES)
@click.argument("name", required=False)
@click.option("--unset", is_flag=True, help="Go back to the per-user default workspace.")
@pass_app
def default(app: AppContext, name: str | None, unset: bool) -> None:
    """Show, or record, the workspace used when a command omits WORKSPACE."""
    if unset:
        app.registry.set_default(None)
    elif name is not None:
        app.registry.set_default(name)
    chosen = app.registry.default() or "default"
    click.echo(f"{chosen} {app.registry.lookup(chosen)}")


@workspace.command("forget", epilog=EXIT_CODES)
@click.argument("name")
@pass_app
def forget(app: AppContext, name: str) -> None:
    """Deregister NAME; the workspace directory itself is left untouched."""
    path = app.registry.forget(name)
    click.echo(f"forgot {name} ({path} is untouched)")


@workspace.command("delete", epilog=EXIT_CODES)
@click.argument("reference")
@click.option("--force", is_flag=True, help="Required: really destroy the workspace and everything in it.")
@pass_app
def delete(app: AppContext, reference: str, force: bool) -> None:
    """Destroy a workspace (by name or path) and deregister it. Refused while a manager is live."""
    handle = app.open_workspace(reference)
    if not force:
        raise RegistryError(f"deleting {handle.root} destroys every job in it; pass --force to confirm")
    live = [manager["manager_id"] for manager in managers(handle) if manager["live"]]
    if live:
        raise RegistryError(f"{handle.root} is served by live manager(s) {', '.join(live)}; stop them first")
    name = app.registry.name_of(handle.root)
    app.container.fs().rmtree(handle.root)
    if name is not None and name != "default":
        app.registry.forget(name)
    click.echo(f"deleted {handle.root}" + (f" and forgot {name}" if name else ""))
