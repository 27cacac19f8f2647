"""``httk workflow job request``: publish one operator request for a manager to apply.

Spec: 000 "Inspect and control".
"""

from __future__ import annotations

import click

from ..bootstrap import operator_signer
from ..engine.requests import ACTIONS, publish_request
from ..operations import inspection
from .context import AppContext, pass_app
from .job_cmds import JSON_OPTION, job, split_workspace
from .remote_refs import remote_aware
from .render import EXIT_CODES, emit_json


@job.command("request", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB ACTION")
@click.option("--operator", required=True, help="Who is asking (recorded in the journal), e.g. \"$USER\".")
@click.option("--reason", default="", help="Why (recorded in the journal).")
@click.option("--step", help="The step for override_step.")
@click.option("--force", is_flag=True, help="override_step: publish even if the step is not a recorded runner step.")
@JSON_OPTION
@pass_app
@remote_aware(("job", "request"), "args", trailing=2)
def request(
    app: AppContext, args: tuple[str, ...], operator: str, reason: str, step: str | None, force: bool, as_json: bool
) -> None:
    """Ask the managers to pause, continue, cancel, or override_step a job.

    ACTION is one of pause, continue, cancel, override_step. The request captures the
    job's current marker and applies only while the job is still in that state, so a
    request that cannot apply to that state (a pause of a finished job, a continue that
    does not fit the retry budget, ...) is refused here and nothing is published.
    """
    ctx = click.get_current_context()
    if len(args) < 2:
        raise click.UsageError("expected [WORKSPACE] JOB ACTION", ctx)
    action = args[-1]
    if action not in ACTIONS:
        raise click.UsageError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}", ctx)
    workspace, selector = split_workspace(ctx, args[:-1], "JOB")
    handle = app.open_workspace(workspace)
    marker = inspection.resolve_job(handle, selector)
    view = handle.store.read_job(marker)
    document = publish_request(
        handle, view, action, operator=operator, reason=reason, step=step, force=force,
        warn=lambda line: click.echo(line, err=True),
        signer=operator_signer(app.environ),
    )
    if as_json:
        emit_json(document)
        return
    click.echo(f"request {document['request_id']}: {action} {document['job_key']} "
               f"(against {document['kind']} generation {document['generation']})")
