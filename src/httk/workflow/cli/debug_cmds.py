"""``httk workflow job debug``: one job, in the foreground, through a private manager.

Spec: 000 "The foreground debug runner".
"""

from __future__ import annotations

import os

import click

from ..bootstrap import build_manager
from ..engine.manager import ManagerConfig
from ..operations import inspection
from ..operations.debug import DebugError, Debugger
from ..operations.submission import submit
from .context import AppContext, pass_app
from .job_cmds import job, split_workspace
from .remote_refs import LocalPaths, remote_aware

DEBUG_EXIT = """\b
Exit status:
  0  the job succeeded
  2  refused (bad usage or input)
  3  the job failed
  4  it stopped without finishing: paused, cancelled, or waiting without --follow-children"""


@job.command("debug", epilog=DEBUG_EXIT)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] PAYLOAD|JOB")
@click.option("--step", help="Start a fresh payload at this step instead of its initial step.")
@click.option("--placement", default="debug", show_default=True, help="Where a fresh payload is submitted.")
@click.option("--follow-children", is_flag=True, help="Also drive the children a waiting job spawned, then resume it.")
@click.option("--log-level", default="error", show_default=True, help="The private manager's console log level.")
@pass_app
@remote_aware(("job", "debug"), "args", trailing=1, local_paths=[LocalPaths("args", index=-1, kind="payload")],
              unbounded=True)
def debug(
    app: AppContext, args: tuple[str, ...], step: str | None, placement: str, follow_children: bool, log_level: str
) -> None:
    """Drive exactly one job to a stop in the foreground, streaming its attempts' output."""
    workspace_path, target = split_workspace(click.get_current_context(), args, "PAYLOAD|JOB")
    handle = app.open_workspace(workspace_path)
    candidate = app.absolute(target)
    if os.path.isdir(candidate) and os.path.exists(os.path.join(candidate, "job.json")):
        marker = submit(handle, candidate, placement).marker
        click.echo(f"[debug] submitted {marker.key} at {placement}")
    else:
        marker = inspection.resolve_job(handle, target)
    spec = handle.store.read_job(marker).spec
    if spec is None:
        raise DebugError(f"job {marker.key}: job.json is unreadable; run 'httk workflow workspace fsck'")
    config = ManagerConfig(
        workers=1,
        pools=(spec.pool,),
        capabilities=tuple(spec.capabilities),
        executors=(spec.executor,),
        poll_interval=0.1,
        log_level=log_level,
    )
    manager = build_manager(app.container, handle, config)
    debugger = Debugger(
        handle,
        manager,
        follow_children=follow_children,
        out=click.echo,
        err=lambda line: click.echo(line, err=True),
    )
    if step is not None:
        marker = debugger.override_step(marker, step)
    status = debugger.run(marker)
    final = inspection.show_job(handle, inspection.resolve_job(handle, marker.job_id))
    failure = final.get("failure") or {}
    detail = f": {failure.get('code')}: {failure.get('message')}" if final.get("kind") == "failed" else ""
    click.echo(f"[debug] {marker.key} ended {final.get('kind')}{detail}; see 'httk workflow job log' for the record")
    raise SystemExit(status)
