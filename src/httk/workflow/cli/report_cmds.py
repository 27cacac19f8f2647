"""``workspace report``, ``workspace diff`` and ``workspace status --at``: looking at a campaign.

``report`` builds the document (:mod:`~httk.workflow.operations.report`), draws
its charts and page here (:mod:`.report_charts`, :mod:`.report_html`) and
publishes the directory atomically; with ``--watch`` it does so again every N
seconds. On ``REMOTE:WS`` the remote's httk builds the document (``report
--json``, so the remote needs no plotting library and writes nothing), it comes
back as that one output, the remote's batch system is asked about the manager jobs
submitted there, and the page is drawn and published here. ``diff`` and
``status --at`` read the journal (:mod:`~httk.workflow.operations.history`).
Spec: docs/report.md.
"""

from __future__ import annotations

import datetime
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .. import codec
from ..operations import history
from ..operations.remotes import RemoteReference, split_reference
from ..operations.report import (
    ReportError,
    build_report,
    check_document,
    check_target,
    publish,
    remote_batch,
)
from .context import AppContext, pass_app
from .progress import progress
from .remote_refs import remote_aware, rooted
from .render import EXIT_CODES, CliError, emit_json, emit_table

if TYPE_CHECKING:
    from ..store.workspaces import WorkspaceHandle

_RELATIVE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Where a local workspace's report goes when ``--out`` is not given.
DEFAULT_OUT = ".httk-workflow/report"


def parse_instant(text: str, option: str, now: float) -> float:
    """``text`` as epoch seconds: ISO 8601 (no zone: UTC), ``@EPOCH``, or an age such as ``90m``, ``2h``, ``1d``."""
    value = text.strip()
    relative = _RELATIVE.match(value)
    if relative:
        return now - float(relative.group(1)) * _UNITS[relative.group(2)]
    if value.startswith("@"):
        try:
            return float(value[1:])
        except ValueError:
            pass
    else:
        try:
            parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=datetime.UTC)
            return parsed.timestamp()
    raise CliError(f"{option} {text!r}: not an instant; give ISO 8601 ('2026-12-01T14:00', UTC unless a zone is "
                   "given), '@EPOCH_SECONDS', or an age such as '90m', '2h', '1d'")


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def collected(error: history.HistoryCollected) -> CliError:
    """The refusal of an instant before the kept history, with the horizon as a date."""
    return CliError(f"{error.option}: the journal before {_iso(error.horizon)} was collected by 'workspace gc' "
                    f"(policy retention.journal_days); give {error.option} {_iso(error.horizon)} or later")


def _history_note(past: dict[str, Any]) -> str | None:
    if not past["collected"]:
        return None
    return (f"note: journal history before {_iso(past['complete_since'])} was collected by 'workspace gc'; "
            "what is shown starts there")


# -- workspace report --------------------------------------------------------------------------------
@click.command("report", epilog=EXIT_CODES)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@click.option("--out", "out_dir", metavar="DIR",
              help=f"Publish the report here (default: WORKSPACE/{DEFAULT_OUT}; required for REMOTE:WS). An existing "
                   "DIR must be empty or an earlier report: it is replaced whole.")
@click.option("--watch", type=click.FloatRange(min=1.0), metavar="SECONDS",
              help="Publish again every SECONDS until interrupted; the page reloads itself at that interval.")
@click.option("--durable/--no-durable", default=True, help="Synchronize the published files to storage (default).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report document (report.json) on stdout; without --out nothing is written.")
@pass_app
def report(app: AppContext, workspace: str | None, out_dir: str | None, watch: float | None, durable: bool,
           as_json: bool) -> None:
    """Publish a static dashboard of a workspace: index.html, report.json and SVG charts, viewable from disk.

    \b
    Example:
      httk workflow workspace report runs --out ~/public_html/runs --watch 300
    """
    reference = split_reference(workspace)
    if reference is not None and out_dir is None:
        raise CliError(f"{workspace}: give --out DIR, the directory on this machine the remote's report is "
                       "published in")
    if reference is not None:
        reference = rooted(app, reference)
    target = app.absolute(out_dir) if out_dir else None
    fs = app.container.fs()
    if target is not None:
        try:
            check_target(fs, target)  # refused before anything is read or written
        except ReportError as error:
            raise CliError(str(error)) from None
    if watch is None:
        _report_once(app, fs, workspace, reference, target, watch=None, durable=durable, as_json=as_json)
        return
    try:
        while True:
            target = _report_once(app, fs, workspace, reference, target, watch=watch, durable=durable,
                                  as_json=as_json)
            _pause(watch, as_json)
    except KeyboardInterrupt:  # how a watch ends; a publication it cut short left the earlier report in place
        click.echo("stopped watching", err=True)


def _report_once(
    app: AppContext, fs: Any, workspace: str | None, reference: RemoteReference | None, target: str | None, *,
    watch: float | None, durable: bool, as_json: bool,
) -> str | None:
    """Build, publish and announce one report; returns where it went (the default is known once it is built)."""
    document = _remote_document(app, reference) if reference else _local_document(app, workspace, as_json)
    if target is None and not as_json:
        target = f"{document['workspace']['path']}/{DEFAULT_OUT}"
    if target is not None:
        _publish(fs, target, document, refresh=watch, durable=durable)
    if as_json:
        emit_json(document)
    else:
        click.echo(_summary(document, target))
        note = _history_note(document["history"])
        if note:
            click.echo(note, err=True)
    return target


def _pause(seconds: float, as_json: bool) -> None:
    with progress("next report", total=int(seconds), unit="s", as_json=as_json) as bar:
        for _ in range(int(seconds)):
            time.sleep(1)
            bar.update()
        time.sleep(seconds - int(seconds))


def _local_document(app: AppContext, workspace: str | None, as_json: bool) -> dict[str, Any]:
    handle = app.open_workspace(workspace)
    with progress("reading the journal", unit="segment", as_json=as_json) as bar:
        return build_report(handle, progress=bar.update)


def _remote_document(app: AppContext, reference: RemoteReference) -> dict[str, Any]:
    """The remote builds the document (one ``report --json`` there); its batch system gives the jobs' states."""
    target = ["--", reference.path] if reference.path else []
    with app.open_session(reference.remote) as session:
        try:
            document = check_document(session.httk_json(["workflow", "workspace", "report", "--json", *target]))
        except ReportError as error:
            raise CliError(f"remote {reference.remote}: {error}") from None
        document["batch"] = remote_batch(document, session.batch, reference.remote)
    return document


def _publish(fs: Any, target: str, document: dict[str, Any], *, refresh: float | None, durable: bool) -> None:
    from .report_charts import ChartsUnavailable, render_charts  # matplotlib: this command's alone
    from .report_html import render_html

    try:
        charts = render_charts(document)
    except ChartsUnavailable as error:
        raise CliError(str(error)) from None
    files = {"report.json": (emit_text(document) + "\n").encode("utf-8"), **charts,
             "index.html": render_html(document, charts, refresh=refresh)}
    try:
        publish(fs, target, files, token=uuid.uuid4().hex[:12], durable=durable)
    except ReportError as error:
        raise CliError(str(error)) from None


def emit_text(document: dict[str, Any]) -> str:
    """The canonical JSON text of a document (what ``--json`` prints)."""
    return codec.dumps(document)


def _summary(document: dict[str, Any], target: str | None) -> str:
    counts = ", ".join(f"{kind} {count}" for kind, count in document["counts"].items() if count) or "no jobs"
    live = sum(1 for manager in document["managers"] if manager["live"])
    where = f" to {target}/index.html" if target else ""
    return (f"report of {document['workspace']['name']}{where}: {document['total']} jobs ({counts}); "
            f"{document['failures']['failed']} failed; {live} live manager(s)")


# -- workspace status --at / workspace diff ------------------------------------------------------------
def _from_journal(
    app: AppContext, workspace: str | None, when: str, option: str,
    answer: Callable[[history.History, float], dict[str, Any]], *, as_json: bool,
) -> tuple[WorkspaceHandle, float, dict[str, Any]]:
    """The workspace, the instant ``when`` names (``option`` in errors) and ``answer`` of its journal then."""
    handle = app.open_workspace(workspace)
    instant = parse_instant(when, option, handle.ports.clock.now())
    with progress("reading the journal", unit="segment", as_json=as_json) as bar:
        past = history.read_history(handle, progress=bar.update)
    try:
        result = answer(past, instant)
    except history.HistoryCollected as error:
        raise collected(error) from None
    return handle, instant, {"name": handle.name, "path": handle.root, **result}


def status_at(app: AppContext, workspace: str | None, at: str, as_json: bool) -> None:
    """``workspace status --at``: the counts per kind the journal says the workspace had at that instant."""
    handle, instant, result = _from_journal(app, workspace, at, "--at", history.status_at, as_json=as_json)
    created = handle.document.get("created_at")
    created = created if isinstance(created, int | float) and not isinstance(created, bool) else None
    # All zeros then is no finding about the jobs: the workspace did not exist yet.
    result["before_creation"] = created is not None and instant < created
    if as_json:
        emit_json(result)
        return
    before = f"; that is before this workspace was created ({_iso(created)})" if result["before_creation"] else ""
    click.echo(f"workspace {handle.name} at {handle.root}, as of {_iso(instant)} (from the journal){before}")
    rows = [[kind, count] for kind, count in result["counts"].items()]
    emit_table(["kind", "jobs"], [*rows, ["total", result["total"]]])
    arrived = result["arrived_later"]
    if arrived["jobs"]:
        # Not counted above: before its arrival a job's history is in the workspace it came from.
        click.echo(f"note: {arrived['jobs']} job(s) arrived by transfer later, the first at {_iso(arrived['first'])} "
                   f"(e.g. {arrived['examples'][0]}); before that they are counted where they came from", err=True)
    note = _history_note(result["history"])
    if note:
        click.echo(note, err=True)


@click.command("diff", epilog=EXIT_CODES)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@click.option("--since", "since", required=True, metavar="TIMESTAMP",
              help="ISO 8601 (UTC unless a zone is given), @EPOCH_SECONDS, or an age such as 90m, 2h, 1d.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_app
@remote_aware(("workspace", "diff"))
def diff(app: AppContext, workspace: str | None, since: str, as_json: bool) -> None:
    """What changed since TIMESTAMP, from the journal: jobs per transition, new jobs, new failures.

    \b
    Example:
      httk workflow workspace diff runs --since 2026-01-31T12:00:00Z
    """
    handle, instant, result = _from_journal(app, workspace, since, "--since", history.diff_since, as_json=as_json)
    if as_json:
        emit_json(result)
        return
    click.echo(f"workspace {handle.name} since {_iso(instant)}: {result['frames']} transition(s), "
               f"{result['new_jobs']} new job(s)")
    rows = [[row["from"], row["to"], row["jobs"], " ".join(row["examples"])] for row in result["transitions"]]
    if rows:
        emit_table(["from", "to", "jobs", "examples"], rows)
    for failure in result["new_failures"]:
        example = failure["examples"][0]
        click.echo(f"new failure {failure['code']}: {failure['jobs']} job(s), e.g. {example['job']}: "
                   f"{example['message'] or ''}".rstrip(": "))
    note = _history_note(result["history"])
    if note:
        click.echo(note, err=True)

