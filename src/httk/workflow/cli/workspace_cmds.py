"""``httk workflow workspace``: init, status, managers, names, policy, settings, fsck and gc.

Commands parse, call a service, render. Policy values are JSON and validated on
write (an unknown key is refused); a setting's value is JSON when it parses and
the plain string otherwise, so ``'"srun -n 32"'`` and ``"srun -n 32"`` store the
same thing. ``list``/``default``/``forget``/``delete`` manage this machine's
workspace names. Spec: 000 "Initialize a workspace", "Workspace policy",
"Application settings", "Inspect and control", "Readiness and transfer environment
advisories", "Checking and repairing a workspace".
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from ..operations import inspection
from ..operations.registry import DEFAULT_NAME, RegistryError
from ..store.layout import Layout
from .context import AppContext, pass_app
from .lazy import LazyGroup
from .progress import progress
from .remote_refs import remote_aware
from .render import EXIT_CODES, Group, emit_json, emit_pairs, emit_table, flatten, refuse, value_text

WORKSPACE_ARG = click.argument("workspace", required=False, metavar="[WORKSPACE]")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
#: ``workspace managers`` prints a list, and says so.
JSON_VALUE_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")


#: ``workspace report`` and ``workspace diff`` read the journal history; imported when used.
@click.group("workspace", cls=LazyGroup, lazy={"report": "report_cmds:report", "diff": "report_cmds:diff"})
def workspace() -> None:
    """Create, inspect and configure workspaces.

    \b
    Examples:
      httk workflow workspace init ./runs --name runs
      httk workflow workspace status runs
      httk workflow workspace fsck runs
    """


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
    """Create a workspace at PATH, or adopt the existing one there unchanged.

    With REMOTE:PATH, a relative PATH goes below the remote's workspace_root (when set).

    \b
    Example:
      httk workflow workspace init ./runs --name runs
    """
    target = app.absolute(path)
    # Only for the wording: init itself adopts an existing workspace unchanged.
    existed = app.container.fs().exists(Layout.at(target).format_file)
    wanted = name or os.path.basename(target)
    registered = app.registry.lookup(wanted)
    if wanted == DEFAULT_NAME and name is not None and registered != target and not app.registry.registered(wanted):
        raise RegistryError(
            f"the name {wanted!r} means the local default workspace (now {registered}); choose another --name "
            "('httk workflow workspace default NAME' records which workspace it means)"
        )
    if registered is not None and registered != target and name is not None:
        raise RegistryError(
            f"workspace name {wanted!r} is already registered for {registered}; choose another --name "
            f"or 'httk workflow workspace forget {wanted}' first"
        )
    handle = app.workspaces.init(target, name=name, durable=durable)
    if registered is None:
        app.registry.register(wanted, handle.root)
    elif registered != target and target != app.default_workspace():  # the per-user default needs no name
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
@click.option("--at", "at", metavar="TIMESTAMP", help="The counts at that instant, from the journal (ISO 8601, "
              "@EPOCH_SECONDS, or an age such as 2h); refused before what 'workspace gc' kept.")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "status"))
def status(app: AppContext, workspace: str | None, at: str | None, as_json: bool) -> None:
    """Count the jobs of a workspace per state kind (now, or --at an earlier instant).

    \b
    Examples:
      httk workflow workspace status runs
      httk workflow workspace status runs --at 2026-01-31T12:00:00Z
    """
    if at is not None:
        from . import report_cmds  # imported here: the history is read only with --at

        return report_cmds.status_at(app, workspace, at, as_json)
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
        click.echo(f"{len(report['damage'])} damaged: run 'httk workflow workspace fsck {report['reference']}'")
    if report.get("damage_unchecked"):
        click.echo(f"{report['damage_unchecked']} more active jobs were counted, not checked for damage "
                   f"(status reads {inspection.STATUS_CHECK_LIMIT}): 'httk workflow workspace fsck "
                   f"{report['reference']}' checks every job")
    for held in report.get("unfinished_transfers") or ():
        if held.get("problem"):
            click.echo(f"transfer ledger {held['transfer_id']} does not read ({held['problem']}): "
                       f"'httk workflow workspace fsck {report['reference']}' reports what it holds")
            continue
        jobs = len(held["jobs"])
        click.echo(f"{jobs} job{'' if jobs == 1 else 's'} held by unfinished transfer {held['transfer_id']} to "
                   f"{held['destination']} (at step {held['step']}): finish it with '{held['resume']}'")


@workspace.command("managers", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_VALUE_OPTION
@pass_app
@remote_aware(("workspace", "managers"))
def managers(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """One line per registered manager, live or stale, with what it serves.

    \b
    Example:
      httk workflow workspace managers runs
    """
    handle = app.open_workspace(workspace)
    from ..operations import diagnosis  # imported by the commands that diagnose: status never pays for it

    found = diagnosis.managers(handle)
    if as_json:
        emit_json(found)
        return
    for manager in found:
        age = manager["heartbeat_age"]
        state = "live" if manager["live"] else ("stopped" if manager["stopped"] else "stale")
        click.echo(
            f"{manager['manager_id']} {state} host={manager.get('host')} pid={manager.get('pid')} "
            f"heartbeat={'never' if age is None else f'{age:.0f}s ago'} pools={','.join(manager.get('pools') or [])} "
            f"capabilities={','.join(manager.get('capabilities') or []) or '-'} "
            f"executors={','.join(manager.get('executors') or [])} "
            f"prefixes={','.join(manager.get('placement_prefixes') or []) or '-'}"
        )
    if not found:
        click.echo("no manager has registered with this workspace")


# -- this machine's workspace names -------------------------------------------------------------
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
    recorded = app.registry.default()
    chosen = recorded or DEFAULT_NAME
    # 'default' not registered by that name is the recorded default's other name (Registry.entries).
    alias = recorded if recorded and recorded != DEFAULT_NAME and not app.registry.registered(DEFAULT_NAME) else None
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
        same = f"  (the recorded default, {alias})" if alias and row["name"] == DEFAULT_NAME else ""
        click.echo(f"{mark} {row['name']:<20} {row['path']}{missing}{same}")


@workspace.command("default", epilog=EXIT_CODES)
@click.argument("name", required=False)
@click.option("--unset", is_flag=True, help="Go back to the per-user default workspace.")
@JSON_OPTION
@pass_app
def default(app: AppContext, name: str | None, unset: bool, as_json: bool) -> None:
    """Show, or record, the workspace used when a command omits WORKSPACE or names it 'default'.

    NAME 'default' (unless a workspace is registered by that name) is --unset.

    \b
    Examples:
      httk workflow workspace default runs
      httk workflow workspace default --unset
    """
    if unset and name is not None:
        # Either meaning could be the intended one; neither is guessed (and registry.json is not written).
        refuse(f"workspace default: give NAME ({name}) or --unset, not both; "
               "'--unset' alone goes back to the per-user default")
    previous = app.registry.default() or DEFAULT_NAME
    if unset:
        app.registry.set_default(None)
    elif name is not None:
        app.registry.set_default(name)
    chosen = app.registry.default() or DEFAULT_NAME
    if as_json:
        emit_json({"default": chosen, "path": app.registry.lookup(chosen), "previous": previous,
                   "changed": chosen != previous})
        return
    click.echo(f"{chosen} {app.registry.lookup(chosen)}")


@workspace.command("forget", epilog=EXIT_CODES)
@click.argument("name")
@JSON_OPTION
@pass_app
def forget(app: AppContext, name: str, as_json: bool) -> None:
    """Deregister NAME; the workspace directory itself is left untouched.

    \b
    Example:
      httk workflow workspace forget runs
    """
    path = app.registry.forget(name)
    if as_json:
        emit_json({"forgot": name, "path": path})
        return
    click.echo(f"forgot {name} ({path} is untouched)")


@workspace.command("delete", epilog=EXIT_CODES)
@click.argument("reference")
@click.option("--force", is_flag=True, help="Required: really destroy the workspace and everything in it.")
@JSON_OPTION
@pass_app
def delete(app: AppContext, reference: str, force: bool, as_json: bool) -> None:
    """Destroy a workspace (by name or path) and deregister it. Refused while a manager is live.

    \b
    Example:
      httk workflow workspace delete runs --force
    """
    handle = app.open_workspace(reference)
    if not force:
        raise RegistryError(f"deleting {handle.root} destroys every job in it; pass --force to confirm")
    from ..operations import diagnosis

    live = [manager["manager_id"] for manager in diagnosis.managers(handle) if manager["live"]]
    if live:
        raise RegistryError(f"{handle.root} is served by live manager(s) {', '.join(live)}; stop them first")
    name = app.registry.name_of(handle.root)
    app.container.fs().rmtree(handle.root)
    if name is not None and (name != DEFAULT_NAME or app.registry.registered(name)):
        app.registry.forget(name)
    if as_json:
        emit_json({"deleted": handle.root, "forgot": name})
        return
    click.echo(f"deleted {handle.root}" + (f" and forgot {name}" if name else ""))


# -- policy ------------------------------------------------------------------------------------
@workspace.group("policy", cls=Group)
def policy() -> None:
    """Show or change the workspace's engine policy (format.json).

    \b
    Examples:
      httk workflow workspace policy show runs
      httk workflow workspace policy set runs lease_seconds 1800
    """


@policy.command("show", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "policy", "show"))
def policy_show(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """Show the four policy tunables.

    \b
    Example:
      httk workflow workspace policy show runs
    """
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
    """Set policy KEY (dotted for retention.*) to the JSON VALUE; null removes a retention limit.

    \b
    Example:
      httk workflow workspace policy set runs retention.journal_days 90
    """
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
    """Show or change the workspace's application settings (settings.json).

    \b
    Examples:
      httk workflow workspace settings show runs
      httk workflow workspace settings set runs vasp.command '"srun -n 32 vasp_std"'
    """


@settings.command("show", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "settings", "show"))
def settings_show(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """Show every application setting.

    \b
    Example:
      httk workflow workspace settings show runs
    """
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
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "settings", "set"))
def settings_set(app: AppContext, workspace: str, name: str, value: str, as_json: bool) -> None:
    """Set setting NAME to VALUE (JSON, or a plain string when it is not valid JSON).

    \b
    Examples:
      httk workflow workspace settings set runs manager.workers 8
      httk workflow workspace settings set kappa:runs slurm.partition batch
    """
    handle = app.open_workspace(workspace)
    parsed = parse_setting_value(value)
    handle.set_setting(name, parsed)
    if as_json:
        emit_json({"workspace": handle.root, "name": name, "value": parsed})
        return
    click.echo(f"{name} = {json.dumps(parsed, sort_keys=True, ensure_ascii=False)}")


@settings.command("unset", epilog=EXIT_CODES)
@click.argument("workspace")
@click.argument("name")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "settings", "unset"))
def settings_unset(app: AppContext, workspace: str, name: str, as_json: bool) -> None:
    """Remove setting NAME (a name that is not set is not an error).

    \b
    Example:
      httk workflow workspace settings unset runs slurm.partition
    """
    handle = app.open_workspace(workspace)
    removed = handle.unset_setting(name)
    if as_json:
        emit_json({"workspace": handle.root, "name": name, "removed": bool(removed)})
        return
    click.echo(f"{name} unset" if removed else f"{name} was not set")


# -- checking, repairing and collecting -------------------------------------------------------
FSCK_EXIT = """\b
Exit status:
  0  the workspace is clean, or everything found was repaired
  1  something is left for an operator
  2  refused (bad usage, not a workspace)"""


@workspace.command("fsck", epilog=FSCK_EXIT)
@WORKSPACE_ARG
@click.option(
    "--repair",
    is_flag=True,
    help="Re-point damaged markers at the last good frame of their job, restore missing markers from the journal, "
    "and respell misspelt marker names.",
)
@click.option(
    "--quarantine-unrepairable",
    is_flag=True,
    help="With --repair: move markers with no readable older frame, and whatever holds a marker name without "
    "being an empty file (directory, symlink, FIFO, bytes), into .httk-workflow/quarantine/; the latter's marker "
    "is then restored.",
)
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "fsck"))
def fsck(app: AppContext, workspace: str | None, repair: bool, quarantine_unrepairable: bool, as_json: bool) -> None:
    """Verify that every job has one marker that resolves to its journal frame; nothing is written without --repair.

    Safe against a live workspace: a suspected duplicate or missing marker is read
    again, within the visibility deadline, before it is reported.

    \b
    Examples:
      httk workflow workspace fsck runs
      httk workflow workspace fsck runs --repair
    """
    if quarantine_unrepairable and not repair:
        raise click.UsageError("--quarantine-unrepairable needs --repair")
    from ..operations.fsck import Fsck  # imported by its command: the read commands start without it

    handle = app.open_workspace(workspace)
    with progress("fsck", unit="marker", as_json=as_json) as bar:
        report = Fsck(handle, repair=repair, quarantine=quarantine_unrepairable, progress=bar.update).run()
    if as_json:
        emit_json(report)
    else:
        for problem in report["problems"]:
            job = f" job {problem['job']}" if problem["job"] else ""
            click.echo(f"{problem['code']}:{job} {problem['message']} [{problem['action']}] ({problem['path']})")
        held = report.get("unfinished_transfers") or []
        for transfer in held:  # a warning: it does not change the exit status
            click.echo(f"warning {transfer['code']}: {transfer['message']} ({transfer['path']})")
        found, left = len(report["problems"]), report["left_for_operator"]
        state = "clean" if report["clean"] else f"{found} problem(s), {left} left"
        state += f"; {len(held)} unfinished transfer(s) (a warning)" if held else ""
        click.echo(f"fsck {report['workspace']}: {report['markers_checked']} markers checked; {state}")
    raise SystemExit(1 if report["left_for_operator"] else 0)


@workspace.command("gc")
@WORKSPACE_ARG
@click.option("--dry-run", is_flag=True, help="List what would be collected; remove nothing.")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "gc"))
def gc(app: AppContext, workspace: str | None, dry_run: bool, as_json: bool) -> None:
    """Collect aged attempt control directories, trash, journal history, transfer ledgers and
    stopped managers' directories under policy.retention; prune empty placement mirrors.

    A retention limit left unset means keep; empty placement mirrors are pruned on every
    run and counted apart. Safe against a live workspace: no marker or payload is touched,
    and a manager that may still be live keeps its directory.

    \b
    Exit status:
      0  success
      2  refused (bad usage, not a workspace)

    \b
    Example:
      httk workflow workspace gc runs --dry-run
    """
    from ..operations.gc import GarbageCollector  # imported by its command, as fsck

    handle = app.open_workspace(workspace)
    with progress("gc", unit="entry", as_json=as_json) as bar:
        report = GarbageCollector(handle, dry_run=dry_run, progress=bar.update,
                                  process=app.container.process()).run()
    if as_json:
        emit_json(report)
        return
    verb, pruned = ("would remove", "would prune") if dry_run else ("removed", "pruned")
    for item in report["removed"]:
        click.echo(f"{verb} {item['category']}: {item['path']}")
    for item in report["pruned"]:
        click.echo(f"{pruned} {item['category']}: {item['path']}")
    for item in report["left"]:
        click.echo(f"left {item['category']}: {item['path']} ({item['reason']})")
    if not report["retention"]:
        click.echo("no retention limits are set: only empty placement mirrors are collected "
                   "(see 'workspace policy set ... retention.*')")
    click.echo(f"gc {report['workspace']}: {verb} {report['count']} item(s); "
               f"{pruned} {report['pruned_count']} empty placement mirror(s)")
