"""``httk workflow collect``: stream the results of finished jobs, one JSON object per job.

Spec: 000 "Inspecting jobs".
"""

from __future__ import annotations

import attrs
import click

from .. import codec
from ..domain.lifecycle import StateKind
from ..operations import collect as results
from ..operations.inspection import placement_note
from .context import AppContext, pass_app
from .progress import progress
from .remote_refs import remote_aware
from .workspace_cmds import WORKSPACE_ARG


@click.command("collect")
@WORKSPACE_ARG
@click.option("--kind", "kinds", multiple=True, type=click.Choice([kind.value for kind in StateKind]),
              help="Collect these kinds (default: succeeded, failed and cancelled).")
@click.option("--placement", help="Only jobs at or below this placement.")
@click.option("--raw", is_flag=True, help="Stream the stored JobRecord documents instead of summaries.")
# collect always prints JSON lines; --json is accepted as the explicit spelling (same output).
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines (the default and only output; accepted "
              "for symmetry with the other commands).")
@pass_app
@remote_aware(("collect",))
def collect(app: AppContext, workspace: str | None, kinds: tuple[str, ...], placement: str | None, raw: bool,
            as_json: bool) -> None:
    """Stream one JSON object per job: CollectedJob summaries, or JobRecords with --raw.

    \b
    Exit status:
      0  success
      2  refused (bad usage, not a workspace)

    \b
    Example:
      httk workflow collect runs --kind succeeded > succeeded.jsonl
    """
    handle = app.open_workspace(workspace)
    chosen = [StateKind(kind) for kind in kinds] or None
    stream = (results.collect_raw if raw else results.collect)(handle, kinds=chosen, placement=placement)
    collected = 0
    with progress("collect", unit="job") as bar:  # stdout is JSON lines already; the line is stderr's
        for item in stream:
            click.echo(codec.dumps(attrs.asdict(item)))
            bar.update()
            collected += 1
    note = placement_note(handle, placement) if not collected else None
    if note:
        click.echo(f"note: {note}", err=True)
