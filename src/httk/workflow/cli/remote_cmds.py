"""``httk workflow remote``: configure remotes and check them.

A remote is made from a template, one per installed (transport × batch system):
``local``, ``local-slurm``, ``ssh-slurm``, ``ssh-pbs``, and a plug-in's
``ssh-<name>``; it is configured with ``--set key=value``, every key and value
checked against the template. ``remote check`` runs the generic adapter program
on the target, which looks up the batch system's declared commands there with
``command -v``, and exits 1 naming each failed check. Spec: 000 "Running on a
remote".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..operations.remote_staging import ADAPTER_PATH
from ..operations.remotes import Remote, RemoteError
from ..ports import TransportError
from .context import AppContext, pass_app
from .render import EXIT_CODES, Group, emit_json, emit_pairs, emit_table

if TYPE_CHECKING:
    from ..operations.forwarding import RemoteSession

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
EXIT_CODES_CHECK = (
    "\b\nExit status:\n  0  every check passed\n  1  a check failed (each failed check is named)\n"
    "  2  refused or bad input (one 'error: ...' line on stderr)"
)


@click.group("remote", cls=Group)
def remote() -> None:
    """Configure and check the machines workspaces and managers can live on.

    \b
    Examples:
      httk workflow remote add kappa --template ssh-slurm
      httk workflow remote check kappa runs
    """


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
@click.option("--template", "template_name", required=True,
              help="TRANSPORT-BATCH: local, local-slurm, ssh-slurm, ssh-pbs, ... ('remote list' lists them).")
@JSON_OPTION
@pass_app
def add(app: AppContext, name: str, template_name: str, as_json: bool) -> None:
    """Add remote NAME made from a template (its settings start at the template's defaults).

    \b
    Example:
      httk workflow remote add kappa --template ssh-slurm
    """
    item = app.remotes.add(name, template_name)
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
    """Change settings of remote NAME; an unknown key or a value of the wrong type is refused.

    \b
    Example:
      httk workflow remote configure kappa --set host=kappa.example.org --set username=rar
    """
    item = app.remotes.configure(name, assignments)
    if as_json:
        emit_json(_summary(item))
        return
    _show(item)


@remote.command("show", epilog=EXIT_CODES)
@click.argument("name")
@JSON_OPTION
@pass_app
def show(app: AppContext, name: str, as_json: bool) -> None:
    """Show remote NAME: its template and every setting with where the value comes from.

    \b
    Example:
      httk workflow remote show kappa
    """
    item = app.remotes.get(name)
    if as_json:
        emit_json(_summary(item))
        return
    _show(item)


@remote.command("list", epilog=EXIT_CODES)
@JSON_OPTION
@pass_app
def list_remotes(app: AppContext, as_json: bool) -> None:
    """The configured remotes, and the templates a new one can be made from.

    \b
    Example:
      httk workflow remote list
    """
    registry = app.remotes
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
@JSON_OPTION
@pass_app
def remove(app: AppContext, name: str, as_json: bool) -> None:
    """Forget remote NAME here; nothing on the remote machine is touched.

    \b
    Example:
      httk workflow remote remove kappa
    """
    app.remotes.remove(name)
    if as_json:
        emit_json({"name": name, "removed": True})
        return
    click.echo(f"removed remote {name} (its workspaces are untouched)")


@remote.command("check", epilog=EXIT_CODES_CHECK)
@click.argument("name")
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@JSON_OPTION
@pass_app
def check(app: AppContext, name: str, workspace: str | None, as_json: bool) -> None:
    """Check remote NAME: configuration, connection, httk there, batch commands, workspace filesystems.

    WORKSPACE (a name or path there) is checked for being writable and for its free
    space; without it, every workspace registered there is. One line per check, with
    the fix.

    \b
    Example:
      httk workflow remote check kappa runs
    """
    registry = app.remotes
    item = registry.get(name)
    checks, report = run_checks(app, item, workspace)
    failed = list(dict.fromkeys(entry["name"] for entry in checks if entry["ok"] is False))
    if as_json:
        emit_json({"remote": name, "ok": not failed, "checks": checks, "report": report})
    else:
        for entry in checks:
            verdict = {True: "ok", False: "FAILED", None: "skipped"}[entry["ok"]]
            click.echo(f"{verdict:<8} {entry['name']:<15} {entry['detail']}")
    if failed:
        click.echo(f"remote {name}: failed checks: {', '.join(failed)}", err=True)
        click.get_current_context().exit(1)


#: ``sh -c PROBE httk-workflow PATH...``: per path one line ``EXISTS WORKSPACE WRITABLE FREE_KIB PATH``
#: (tab-separated, 1/0); the probe file it writes is removed at once.
PROBE = """for p do
  e=0 ws=0 w=0 f=
  if [ -d "$p" ]; then
    e=1
    [ -f "$p/.httk-workflow/format.json" ] && ws=1
    d=$p/.httk-workflow/tmp; [ -d "$d" ] || d=$p
    if (: > "$d/.httk-remote-check.$$") 2>/dev/null; then w=1; rm -f "$d/.httk-remote-check.$$"; fi
    f=$(df -Pk "$p" 2>/dev/null | awk 'NR==2 {print $4}')
  fi
  printf '%s\\t%s\\t%s\\t%s\\t%s\\n' "$e" "$ws" "$w" "$f" "$p"
done
"""
#: Below this much free space a workspace's check fails: attempts, journals and transfers need room.
LOW_FREE_BYTES = 100 * 1024 * 1024

Note = Callable[[str, "bool | None", str], None]


def run_checks(
    app: AppContext, item: Remote, workspace: str | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The checks in order, over one connection; later ones are not attempted once the connection fails."""
    checks: list[dict[str, Any]] = []

    def note(check_name: str, ok: bool | None, detail: str) -> None:
        checks.append({"name": check_name, "ok": ok, "detail": detail})

    missing = item.missing()
    sets = " ".join(f"--set {key}=..." for key in missing)
    note("configuration", not missing, f"{', '.join(missing)} not set; 'httk workflow remote configure {item.name} "
                                       f"{sets}'" if missing else "complete")
    settings = item.settings
    if missing:
        return checks, None
    if not settings.get("check_connectivity", True):
        note("connect", None, "check_connectivity is off: the target was not contacted")
        return checks, None
    session = app.open_session(item.name)
    transport = session.transport
    declared = [word for command in item.template.commands for word in ("--command", command)]
    argv = ["sh", "-s", "--", "check", "--root", str(settings.get("workspace_root", "")),
            "--batch", item.template.batch, *declared, "--", *session.httk_command]
    # The adapter looks for httk where the forwarded commands do (PATH, then ~/.local/bin).
    script = f"{ADAPTER_PATH}\n{app.remotes.adapter_script(item.template)}"
    try:
        try:
            result = transport.run(argv, input=script, timeout=session.timeout)
        except TransportError as error:
            note("connect", False, str(error))
            return checks, None
        report = _last_json_line(result.stdout)
        if report is None:
            problem = result.stderr.strip()[:200] or "no output"
            note("connect", False, f"the adapter printed no report (exit {result.returncode}): {problem}; "
                                   "the login shell there must be able to run 'sh -s'")
            return checks, None
        note("connect", True, f"{getattr(transport, 'where', 'this machine')} (host {report.get('host')})")
        httk_ok = _note_httk(note, item, report.get("httk", {}))
        _note_batch(note, item, report.get("batch", {}))
        root = report.get("workspace_root", {})
        if root.get("writable"):
            note("workspace_root", True, f"{root.get('path')} writable")
        else:
            state = "not writable" if root.get("exists") else "does not exist"
            note("workspace_root", False, f"{root.get('path')} {state}; create it or set workspace_root "
                                          f"('httk workflow remote configure {item.name} --set workspace_root=DIR')")
        try:
            _check_workspaces(note, session, workspace, httk_ok)
        except (TransportError, RemoteError) as error:
            note("workspace", False, str(error))
    finally:
        transport.close()
    return checks, report


def _note_httk(note: Note, item: Remote, httk: dict[str, Any]) -> bool:
    here = _local_version()
    configure = f"'httk workflow remote configure {item.name} --set httk_command=PATH'"
    if httk.get("version"):
        version = str(httk["version"])
        differ = "" if version == here else (
            "; the versions differ: forwarded commands need the same options on both sides, so upgrade the older")
        note("httk", True, f"{httk.get('path')} version {version} (this machine: {here}){differ}")
        return True
    if httk.get("path"):
        note("httk", False, f"{httk.get('path')} is there but '{httk.get('command')} --version' fails; reinstall "
                            f"httk-workflow there or fix httk_command with {configure}")
    else:
        note("httk", False, f"{httk.get('command')!r} not found there; install httk-workflow there "
                            f"('pipx install httk-workflow') or set httk_command with {configure}")
    return False


def _note_batch(note: Note, item: Remote, batch: dict[str, Any]) -> None:
    """Every command the batch system declares, found there (an absent report entry is missing)."""
    found = batch.get("commands", {})
    absent = [command for command in item.template.commands if not found.get(command)]
    if absent:
        note("batch", False, f"{item.template.batch}: missing {', '.join(absent)}; install the batch system's "
                             "client commands there, or put them on the PATH a remote command gets")
    else:
        note("batch", True, f"{item.template.batch}: {', '.join(item.template.commands)} found")


def _check_workspaces(note: Note, session: RemoteSession, workspace: str | None, httk_ok: bool) -> None:
    """One ``workspace`` line per workspace named or registered there: writable, free space."""
    remote = session.remote.name
    if workspace is not None and ("/" in workspace or workspace in (".", "..")):
        targets = {workspace: workspace}
    elif not httk_ok:
        if workspace is not None:
            note("workspace", None, f"{workspace}: httk resolves the name there, and it is missing")
        return
    else:
        rows = session.httk_json(["workflow", "workspace", "list", "--json"])
        chosen = (lambda row: row["name"] == workspace) if workspace is not None else (lambda row: row["exists"])
        targets = {str(row["name"]): str(row["path"]) for row in rows if chosen(row)}
        if workspace is not None and not targets:
            note("workspace", False, f"{workspace}: no workspace of that name is registered there; see "
                                     f"'httk workflow workspace list {remote}:'")
            return
    if not targets:
        return
    result = session.transport.run(["sh", "-c", PROBE, "httk-workflow", *targets.values()], timeout=session.timeout)
    probed = [line.split("\t", 4) for line in result.stdout.splitlines()]
    init = f"'httk workflow workspace init {remote}:PATH'"
    for (label, path), fields in zip(targets.items(), probed, strict=False):
        exists, is_workspace, writable, free_kib = (fields + ["", "", "", ""])[:4]
        head = path if label == path else f"{label} at {path}"
        free = int(free_kib) * 1024 if free_kib.isdigit() else None
        if exists != "1":
            note("workspace", False, f"{head} does not exist; create it with {init}")
        elif is_workspace != "1":
            note("workspace", False, f"{head} is not a workspace; initialize it with {init}")
        elif writable != "1":
            note("workspace", False, f"{head} is not writable by the user {remote} logs in as; fix its permissions")
        elif free is not None and free < LOW_FREE_BYTES:
            note("workspace", False, f"{head} has only {_size(free)} free; make room there (for example "
                                     f"'httk workflow workspace gc {remote}:{label}') or move the workspace")
        else:
            note("workspace", True, f"{head} writable, {_size(free) if free is not None else 'unknown space'} free")


def _size(count: int) -> str:
    """``count`` bytes for people: ``12.3 GiB``."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


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
