"""``httk workflow remote``: configure remotes and check them; ``manager status REMOTE:WS --job ID``.

A remote is made from a packaged template (``local``, ``local-slurm``,
``ssh-slurm``) and configured with ``--set key=value``; every key and value is
checked against the template. ``remote check`` runs the template's adapter
script on the target and exits 1 naming each failed check. Spec: 000 "Running
on a remote".
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

from ..bootstrap import remote_adapters
from ..ports import TransportError
from ..services.remotes import Remote, RemoteError, split_reference
from .context import AppContext, pass_app
from .manager_cmds import manager
from .remote_refs import open_session, remote_registry
from .render import EXIT_CODES, Group, emit_json, emit_pairs, emit_table

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
EXIT_CODES_CHECK = (
    "\b\nExit status:\n  0  every check passed\n  1  a check failed (each failed check is named)\n"
    "  2  refused or bad input (one 'error: ...' line on stderr)"
)


@click.group("remote", cls=Group)
def remote() -> None:
    """Configure and check the machines workspaces and managers can live on."""


def _summary(item: Remote) -> dict[str, Any]:
    settings = item.settings
    return {
        "name": item.name,
        "template": item.template.name,
        "transport": item.template.transport,
        "batch": item.template.batch,
        "settings": settings,
        "chosen": sorted(item.chosen),
        "missing": item.missing(),
    }


def _show(item: Remote) -> None:
    summary = _summary(item)
    emit_pairs([(key, summary[key]) for key in ("name", "template", "transport", "batch")])
    for key, spec in sorted(item.template.specs.items()):
        value = summary["settings"].get(key)
        origin = "set" if key in item.chosen else ("required, not set" if spec.required else "default")
        shown = "-" if value is None else json.dumps(value)
        click.echo(f"  {key:<20} {shown}  ({origin})")


@remote.command("add", epilog=EXIT_CODES)
@click.argument("name")
@click.option("--template", "template_name", required=True, help="local, local-slurm or ssh-slurm.")
@JSON_OPTION
@pass_app
def add(app: AppContext, name: str, template_name: str, as_json: bool) -> None:
    """Add remote NAME made from a template (its settings start at the template's defaults)."""
    item = remote_registry(app).add(name, template_name)
    if as_json:
        emit_json(_summary(item))
        return
    click.echo(f"added remote {name} (template {template_name}: {item.template.description})")
    if item.missing():
        sets = " ".join(f"--set {key}=..." for key in item.missing())
        click.echo(f"next: httk workflow remote configure {name} {sets}")


@remote.command("configure", epilog=EXIT_CODES)
@click.argument("name")
@click.option("--set", "assignments", multiple=True, required=True, metavar="KEY=VALUE",
              help="Set a setting (repeatable); KEY= returns it to the template's default.")
@JSON_OPTION
@pass_app
def configure(app: AppContext, name: str, assignments: tuple[str, ...], as_json: bool) -> None:
    """Change settings of remote NAME; an unknown key or a value of the wrong type is refused."""
    item = remote_registry(app).configure(name, assignments)
    if as_json:
        emit_json(_summary(item))
        return
    _show(item)


@remote.command("show", epilog=EXIT_CODES)
@click.argument("name")
@JSON_OPTION
@pass_app
def show(app: AppContext, name: str, as_json: bool) -> None:
    """Show remote NAME: its template and every setting with where the value comes from."""
    item = remote_registry(app).get(name)
    if as_json:
        emit_json(_summary(item))
        return
    _show(item)


@remote.command("list", epilog=EXIT_CODES)
@JSON_OPTION
@pass_app
def list_remotes(app: AppContext, as_json: bool) -> None:
    """The configured remotes, and the templates a new one can be made from."""
    registry = remote_registry(app)
    rows = [_summary(registry.get(name)) for name in registry.names()]
    if as_json:
        emit_json({"remotes": rows, "templates": registry.template_names()})
        return
    if rows:
        emit_table(["name", "template", "host"], [[r["name"], r["template"], r["settings"].get("host", "-")]
                                                   for r in rows])
    else:
        click.echo("no remotes; add one with 'httk workflow remote add NAME --template TEMPLATE'")
    click.echo(f"templates: {', '.join(registry.template_names())}")


@remote.command("remove", epilog=EXIT_CODES)
@click.argument("name")
@pass_app
def remove(app: AppContext, name: str) -> None:
    """Forget remote NAME here; nothing on the remote machine is touched."""
    remote_registry(app).remove(name)
    click.echo(f"removed remote {name} (its workspaces are untouched)")


@remote.command("check", epilog=EXIT_CODES_CHECK)
@click.argument("name")
@JSON_OPTION
@pass_app
def check(app: AppContext, name: str, as_json: bool) -> None:
    """Check remote NAME: configuration, connection, httk there, batch commands, a writable workspace root."""
    registry = remote_registry(app)
    item = registry.get(name)
    checks, report = run_checks(app, item)
    failed = [entry["name"] for entry in checks if entry["ok"] is False]
    if as_json:
        emit_json({"remote": name, "ok": not failed, "checks": checks, "report": report})
    else:
        for entry in checks:
            verdict = {True: "ok", False: "FAILED", None: "skipped"}[entry["ok"]]
            click.echo(f"{verdict:<8} {entry['name']:<15} {entry['detail']}")
    if failed:
        click.echo(f"remote {name}: failed checks: {', '.join(failed)}", err=True)
        click.get_current_context().exit(1)


def run_checks(app: AppContext, item: Remote) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The checks in order; later ones are not attempted once the connection fails."""
    checks: list[dict[str, Any]] = []

    def note(check_name: str, ok: bool | None, detail: str) -> None:
        checks.append({"name": check_name, "ok": ok, "detail": detail})

    missing = item.missing()
    note("configuration", not missing, f"{', '.join(missing)} not set" if missing else "complete")
    settings = item.settings
    if missing:
        return checks, None
    if not settings.get("check_connectivity", True):
        note("connect", None, "check_connectivity is off: the target was not contacted")
        return checks, None
    transport, _batch = remote_adapters(app.container, item)
    httk_command = shlex.split(str(settings.get("httk_command", "httk")))
    argv = ["sh", "-s", "--", "--root", str(settings.get("workspace_root", "")), "--", *httk_command]
    try:
        result = transport.run(argv, input=remote_registry(app).adapter_script(item.template),
                               timeout=float(settings.get("command_timeout", 300)))
    except TransportError as error:
        note("connect", False, str(error))
        return checks, None
    finally:
        transport.close()
    report = _last_json_line(result.stdout)
    if report is None:
        problem = result.stderr.strip()[:200] or "no output"
        note("connect", False, f"the adapter printed no report (exit {result.returncode}): {problem}")
        return checks, None
    note("connect", True, f"{_where(item)} (host {report.get('host')})")
    httk = report.get("httk", {})
    here = _local_version()
    if httk.get("version"):
        note("httk", True, f"{httk.get('path')} version {httk['version']} (this machine: {here})")
    elif httk.get("path"):
        note("httk", False, f"{httk.get('path')} is there but '{httk.get('command')} --version' fails")
    else:
        note("httk", False, f"{httk.get('command')!r} not found there; install httk-workflow or set httk_command")
    commands = report.get("batch", {}).get("commands", {})
    absent = [command for command, path in commands.items() if not path]
    batch_name = report.get("batch", {}).get("system")
    note("batch", not absent, f"{batch_name}: " + (f"missing {', '.join(absent)}" if absent else
                                                    f"{', '.join(commands)} found"))
    root = report.get("workspace_root", {})
    state = "writable" if root.get("writable") else ("not writable" if root.get("exists") else "does not exist")
    note("workspace_root", bool(root.get("writable")), f"{root.get('path')} {state}")
    return checks, report


def _where(item: Remote) -> str:
    settings = item.settings
    if item.template.transport != "ssh":
        return "this machine"
    user = f"{settings['username']}@" if settings.get("username") else ""
    return f"{user}{settings.get('host')}:{settings.get('port', 22)}"


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _local_version() -> str:
    # Imported here: importlib.metadata costs every other command's start-up time.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("httk-workflow")
    except PackageNotFoundError:
        return "unknown"


# -- manager status ------------------------------------------------------------------------------
@manager.command("status", epilog=EXIT_CODES)
@click.argument("workspace", metavar="REMOTE:WORKSPACE")
@click.option("--job", "job_ids", multiple=True, required=True, help="A batch job id 'run' printed (repeatable).")
@JSON_OPTION
@pass_app
def manager_status(app: AppContext, workspace: str, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Ask the remote's batch system about manager jobs that 'run REMOTE:WORKSPACE' submitted."""
    reference = split_reference(workspace)
    if reference is None:
        raise RemoteError(
            f"{workspace}: manager status asks a remote's batch system (REMOTE:WORKSPACE); "
            "for the managers of a local workspace see 'httk workflow workspace managers'"
        )
    with open_session(app, reference.remote) as session:
        statuses = session.batch.status(list(job_ids))
        batch_name = session.batch.name
    jobs = {job_id: {"state": s.state, "finished": s.finished, "succeeded": s.succeeded}
            for job_id, s in statuses.items()}
    if as_json:
        emit_json({"remote": reference.remote, "batch": batch_name, "jobs": jobs})
        return
    for job_id, entry in jobs.items():
        outcome = {True: ", succeeded", False: ", did not succeed", None: ""}[entry["succeeded"]]
        ending = f" (finished{outcome})" if entry["finished"] else ""
        click.echo(f"{batch_name} job {job_id} on {reference.remote}: {entry['state']}{ending}")
