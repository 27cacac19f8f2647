"""``httk workflow job why`` and ``httk workflow workspace managers``.

Spec: 000 "Inspecting jobs", "Readiness and transfer environment advisories".
"""

from __future__ import annotations

import click

from ..services import diagnosis, inspection
from .context import AppContext, pass_app
from .job_cmds import JSON_OPTION, job, split_workspace
from .render import EXIT_CODES, emit_json
from .workspace_cmds import WORKSPACE_ARG, workspace


@job.command("why", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@JSON_OPTION
@pass_app
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
