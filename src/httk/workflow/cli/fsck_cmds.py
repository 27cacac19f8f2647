"""``httk workflow workspace fsck``: check (and repair) that every marker resolves.

Spec: 000 "Checking and repairing a workspace".
"""

from __future__ import annotations

import click

from ..operations.fsck import Fsck
from ..operations.gc import GarbageCollector
from .context import AppContext, pass_app
from .remote_refs import remote_aware
from .render import emit_json
from .workspace_cmds import JSON_OPTION, WORKSPACE_ARG, workspace

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
    """
    if quarantine_unrepairable and not repair:
        raise click.UsageError("--quarantine-unrepairable needs --repair")
    handle = app.open_workspace(workspace)
    report = Fsck(handle, repair=repair, quarantine=quarantine_unrepairable).run()
    if as_json:
        emit_json(report)
    else:
        for problem in report["problems"]:
            job = f" job {problem['job']}" if problem["job"] else ""
            click.echo(f"{problem['code']}:{job} {problem['message']} [{problem['action']}] ({problem['path']})")
        found, left = len(report["problems"]), report["left_for_operator"]
        state = "clean" if report["clean"] else f"{found} problem(s), {left} left"
        click.echo(f"fsck {report['workspace']}: {report['markers_checked']} markers checked; {state}")
    raise SystemExit(1 if report["left_for_operator"] else 0)


@workspace.command("gc")
@WORKSPACE_ARG
@click.option("--dry-run", is_flag=True, help="List what would be collected; remove nothing.")
@JSON_OPTION
@pass_app
@remote_aware(("workspace", "gc"))
def gc(app: AppContext, workspace: str | None, dry_run: bool, as_json: bool) -> None:
    """Collect aged attempt control directories, trash and journal history under policy.retention.

    A retention limit left unset means keep. Safe against a live workspace: no marker or
    payload is touched.

    \b
    Exit status:
      0  success
      2  refused (bad usage, not a workspace)
    """
    handle = app.open_workspace(workspace)
    report = GarbageCollector(handle, dry_run=dry_run).run()
    if as_json:
        emit_json(report)
        return
    verb = "would remove" if dry_run else "removed"
    for item in report["removed"]:
        click.echo(f"{verb} {item['category']}: {item['path']}")
    if not report["retention"]:
        click.echo("no retention limits are set: nothing is collected (see 'workspace policy set ... retention.*')")
    click.echo(f"gc {report['workspace']}: {verb} {report['count']} item(s)")
