"""``httk workflow v1``: running unchanged httk v1 tasks (``v1 convert``).

``v1 convert DIR`` turns a v1 task directory (``ht.task.<taskset>.<id>.<step>.…``)
into a payload whose runner is the packaged v1 runner, in the claim pool
``taskset``; with ``--output`` it writes the payload there (submit it with
``job submit``), without it submits the job at ``--placement``. Serve such jobs
with ``httk workflow manager run --pool taskset``. Spec: 000 "Runner contract";
docs/v1_compatibility.md.
"""

from __future__ import annotations

import os

import click

from ..operations.submission import SubmissionError
from ..operations.v1_conversion import DEFAULT_PLACEMENT, ConversionError, convert
from .context import AppContext, pass_app
from .render import EXIT_CODES, Group, emit_json, refuse


@click.group("v1", cls=Group)
def v1() -> None:
    """Run unchanged httk v1 tasks (docs/v1_compatibility.md).

    \b
    Example:
      httk workflow v1 convert ./ht.task.any.si.start.0.unclaimed.3.waitstart --workspace runs
    """


@v1.command("convert", epilog=EXIT_CODES)
@click.argument("directory", metavar="DIR")
@click.option("--workspace", help="The workspace whose runner store gets the v1 runner (default workspace).")
@click.option("--output", help="Write the payload here (then 'job submit' it) instead of submitting it.")
@click.option("--placement", help=f"Where to submit it, without --output (default {DEFAULT_PLACEMENT}).")
@click.option("--pool", default="taskset", show_default=True, help="The job's claim pool.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")
@pass_app
def convert_command(
    app: AppContext, directory: str, workspace: str | None, output: str | None, placement: str | None, pool: str,
    as_json: bool,
) -> None:
    """Convert a v1 task directory into a payload run by the packaged v1 runner, and submit it.

    \b
    Examples:
      httk workflow v1 convert ht.task.any.si.start.0.unclaimed.3.waitstart --workspace WS
      httk workflow v1 convert ht.task.any.si.start.0.unclaimed.3.waitstart --output si-payload
      httk workflow manager run WS --pool taskset
    """
    if output is not None and placement is not None:
        refuse("--placement submits the job and --output only writes the payload; give one of them")
    handle = app.open_workspace(workspace, create=True)
    source = os.path.abspath(directory)
    target = os.path.abspath(output) if output is not None else None
    try:
        converted = convert(handle, source, output=target, placement=placement, pool=pool)
    except (ConversionError, SubmissionError) as error:
        refuse(str(error))
    submitted = converted.submitted
    if as_json:
        emit_json({
            "payload": converted.payload, "workspace": handle.root, "workflow_realization": "httk-v1",
            "step": converted.spec.initial_step, "pool": converted.spec.pool, "priority": converted.spec.priority,
            "runner": converted.spec.runner, "v1": converted.spec.inputs["v1"],
            "job_id": submitted.marker.job_id if submitted else None,
            "job_key": str(submitted.marker.key) if submitted else None,
        })
        return
    if submitted is not None:
        click.echo(str(submitted.marker.key))  # the tag--uuid key, as 'job submit' prints it
    else:
        click.echo(converted.payload)
