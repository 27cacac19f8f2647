"""``httk workflow precheck``: a read-only readiness report for the pending jobs of a workspace.

Spec: 000 "Readiness and transfer environment advisories".
"""

from __future__ import annotations

import click

from ..operations import precheck as readiness
from .context import AppContext, pass_app
from .remote_refs import remote_aware
from .render import emit_json
from .workspace_cmds import WORKSPACE_ARG

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")


@click.command("precheck")
@WORKSPACE_ARG
@click.option("--runner-search-path", "search_paths", multiple=True, help="Roots for installed runner references.")
@JSON_OPTION
@pass_app
@remote_aware(("precheck",))
def precheck(app: AppContext, workspace: str | None, search_paths: tuple[str, ...], as_json: bool) -> None:
    """Read-only readiness report for pending jobs: settings, runner references, claimability by live managers.

    \b
    Exit status:
      0  nothing found that would stop a pending job
      1  a broken runner, an unclaimable job, an unreadable job.json or a required
         setting that resolves to nothing
      2  refused (bad usage, not a workspace)

    \b
    Example:
      httk workflow precheck runs --runner-search-path ~/runners
    """
    handle = app.open_workspace(workspace)
    report = readiness.precheck(handle, uid=app.container.process().uid(),
                                search_paths=[app.absolute(path) for path in search_paths], environ=app.environ)
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
