"""``httk workflow job why`` and ``httk workflow workspace managers``.

Spec: 000 "Inspecting jobs", "Readiness and transfer environment advisories".
"""

from __future__ import annotations

import attrs
import click

from .. import codec
from ..domain.lifecycle import StateKind
from ..operations import collect as results
from ..operations import diagnosis, inspection
from ..operations import precheck as readiness
from .context import AppContext, pass_app
from .job_cmds import JSON_OPTION, job, split_workspace
from .remote_refs import remote_aware
from .render import EXIT_CODES, emit_json
from .workspace_cmds import WORKSPACE_ARG, workspace


@job.command("why", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@JSON_OPTION
@pass_app
@remote_aware(("job", "why"), "args", trailing=1)
def why(app: AppContext, args: tuple[str, ...], as_json: bool) -> None:
    """Answer "why is this job not running?" for its current state."""
    workspace_path, selector = split_workspace(click.get_current_context(), args, "JOB")
    handle = app.open_workspace(workspace_path)
    marker = inspection.resolve_job(handle, selector)
    report = diagnosis.why(handle, marker, app.container.process())
    if as_json:
        emit_json(report)
        return
    click.echo(f"{report['job']}: {report['summary']}")
    for line in report["lines"]:
        click.echo(f"  {line}")


@workspace.command("managers", epilog=EXIT_CODES)
@WORKSPACE_ARG
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "managers"))
def managers(app: AppContext, workspace: str | None, as_json: bool) -> None:
    """One line per registered manager, live or stale, with what it serves."""
    handle = app.open_workspace(workspace)
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


@click.command("precheck")
@WORKSPACE_ARG
@click.option("--runner-search-path", "search_paths", multiple=True, help="Roots for installed runner references.")
@JSON_OPTION
@pass_app
@remote_aware(("precheck",))
def precheck(app: AppContext, workspace: str | None, search_paths: tuple[str, ...], as_json: bool) -> None:
    """Read-only readiness report for pending jobs: runner references and claimability by live managers.

    \b
    Exit status:
      0  nothing found that would stop a pending job
      1  a broken runner, an unclaimable job or an unreadable job.json
      2  refused (bad usage, not a workspace)
    """
    handle = app.open_workspace(workspace)
    report = readiness.precheck(handle, uid=app.container.process().uid(),
                                search_paths=[app.absolute(path) for path in search_paths])
    if as_json:
        emit_json(report)
    else:
        for notice in report["notices"]:
            click.echo(f"notice: {notice}")
        for job_report in report["jobs"]:
            for finding in job_report["findings"]:
                click.echo(f"{job_report['job']} {finding['check']}: {finding['status']}: {finding['message']}")
        click.echo(f"precheck {report['workspace']}: {len(report['jobs'])} pending job(s); "
                   + ("problems found" if report["failed"] else "no blocking problem"))
    raise SystemExit(1 if report["failed"] else 0)


@click.command("collect")
@WORKSPACE_ARG
@click.option("--kind", "kinds", multiple=True, type=click.Choice([kind.value for kind in StateKind]),
              help="Collect these kinds (default: succeeded, failed and cancelled).")
@click.option("--placement", help="Only jobs at or below this placement.")
@click.option("--raw", is_flag=True, help="Stream the stored JobRecord documents instead of summaries.")
@pass_app
@remote_aware(("collect",))
def collect(app: AppContext, workspace: str | None, kinds: tuple[str, ...], placement: str | None, raw: bool) -> None:
    """Stream one JSON object per job: CollectedJob summaries, or JobRecords with --raw.

    \b
    Exit status:
      0  success
      2  refused (bad usage, not a workspace)
    """
    handle = app.open_workspace(workspace)
    chosen = [StateKind(kind) for kind in kinds] or None
    stream = (results.collect_raw if raw else results.collect)(handle, kinds=chosen, placement=placement)
    for item in stream:
        click.echo(codec.dumps(attrs.asdict(item)))
