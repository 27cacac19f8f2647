"""``httk workflow job``: submit, list, show and log jobs.

``job submit [WORKSPACE] PAYLOAD`` and ``job show/log [WORKSPACE] JOB`` take one
or two positionals, because click cannot put an optional argument before a
required one; one positional means the default workspace. Inspection never
writes protocol state. Spec: 000 "Submit a job", "Inspecting jobs".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ..domain.lifecycle import StateKind
from ..operations import inspection
from ..operations.submission import submit as submit_payload
from .context import AppContext, pass_app
from .remote_refs import LocalPaths, remote_aware
from .render import (
    EXIT_CODES,
    EXIT_NEEDS_OPERATOR,
    Group,
    emit_json,
    emit_pairs,
    emit_table,
    exit_codes_damage,
    timestamp,
    value_text,
)

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")


@click.group("job", cls=Group)
def job() -> None:
    """Submit and inspect jobs."""


def split_workspace(ctx: click.Context, args: Sequence[str], what: str) -> tuple[str | None, str]:
    """``(workspace, value)`` from one or two positionals; anything else is a usage error."""
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    raise click.UsageError(f"expected [WORKSPACE] {what}, got {len(args)} arguments", ctx)


@job.command("submit", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] PAYLOAD")
@click.option("--placement", required=True, help="Relative path below the workspace, e.g. project-a/00/17.")
@click.option("--move", is_flag=True, help="Rename the payload into place (same filesystem) instead of copying.")
@click.option("--tag", help="Tag for the job key (default: the tag in job.json, if any).")
@click.option(
    "--allow-missing-runner",
    is_flag=True,
    help="Accept a job whose pinned workspace runner is not in the store yet (publish it before the job runs).",
)
@JSON_OPTION
@pass_app
@remote_aware(("job", "submit"), "args", trailing=1,
              local_paths=[LocalPaths("args", index=-1, kind="payload", required=True)])
def submit(
    app: AppContext,
    args: tuple[str, ...],
    placement: str,
    move: bool,
    tag: str | None,
    allow_missing_runner: bool,
    as_json: bool,
) -> None:
    """Submit a prepared payload directory and print the new job's key.

    Nothing is written when the submission is refused: a placement too long for the
    filesystem, --move across filesystems, or a pinned workspace runner the store lacks.
    """
    workspace, payload = split_workspace(click.get_current_context(), args, "PAYLOAD")
    handle = app.open_workspace(workspace)
    result = submit_payload(
        handle, app.absolute(payload), placement, move=move, tag=tag, allow_missing_runner=allow_missing_runner
    )
    if result.warning:
        click.echo(f"warning: {result.warning}", err=True)
    if as_json:
        marker = result.marker
        emit_json(
            {
                "job_key": str(marker.key),
                "job_id": marker.job_id,
                "kind": marker.kind.value,
                "placement": marker.placement,
                "priority": marker.priority,
                "payload": result.payload,
                "workspace": handle.root,
            }
        )
        return
    click.echo(str(result.marker.key))


@job.command("list", epilog=EXIT_CODES)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice([kind.value for kind in StateKind]),
    help="Only jobs of this state kind (repeatable).",
)
@click.option("--placement", help="Only jobs at or below this placement (whole path components).")
@JSON_OPTION
@pass_app
@remote_aware(("job", "list"))
def list_jobs(
    app: AppContext, workspace: str | None, kinds: tuple[str, ...], placement: str | None, as_json: bool
) -> None:
    """List jobs with their state kind, placement and priority."""
    handle = app.open_workspace(workspace)
    jobs = inspection.list_jobs(handle, kinds or None, placement)
    if as_json:
        emit_json(jobs)
        return
    if not jobs:
        click.echo("no jobs")
        return
    emit_table(
        ["job", "kind", "placement", "priority", "generation"],
        [[j["job_key"], j["kind"], j["placement"], j["priority"], j["generation"]] for j in jobs],
    )


@job.command("show", epilog=exit_codes_damage("state frame or job.json"))
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@JSON_OPTION
@pass_app
@remote_aware(("job", "show"), "args", trailing=1)
def show(app: AppContext, args: tuple[str, ...], as_json: bool) -> None:
    """Show one job: state, budgets, steps, failure, join children and paths.

    JOB is a job uuid, a complete tag--uuid key, or a unique prefix of either.
    """
    ctx = click.get_current_context()
    workspace, selector = split_workspace(ctx, args, "JOB")
    handle = app.open_workspace(workspace)
    report = inspection.show_job(handle, inspection.resolve_job(handle, selector))
    if as_json:
        emit_json(report)
    else:
        _show_text(report)
    if report["damage"] is not None or report["job_error"] is not None:
        ctx.exit(EXIT_NEEDS_OPERATOR)


def _show_text(report: dict[str, Any]) -> None:
    damage = report["damage"]
    runner = report["runner"] or {}
    pairs: list[tuple[str, Any]] = [
        ("job", report["job_key"]),
        ("kind", report["kind"]),
        ("placement", report["placement"]),
        ("priority", report["priority"]),
        ("generation", report["generation"]),
        ("record", report["record_ref"]),
        ("job digest", report["job_digest"]),
        ("name", report["name"]),
        ("workflow", report["workflow"]),
        (
            "runner",
            f"{runner.get('source')}:{runner.get('path')} sha256={runner.get('sha256') or '-'}" if runner else None,
        ),
        ("step", report["step"]),
        ("initial step", report["initial_step"]),
        ("runner steps", ", ".join(report.get("runner_steps") or []) or None),
        ("last change", _last_change(report)),
        ("pause requested", report.get("pause_requested")),
    ]
    if damage is not None:
        pairs.append(("damage", f"{damage['code']}: {damage['message']} (run 'httk workflow workspace fsck')"))
    if report["job_error"] is not None:
        pairs.append(("job.json", f"{report['job_error']['code']}: {report['job_error']['message']}"))
    failure = report.get("failure")
    if failure:
        pairs.append(("failure", f"{failure.get('code')}: {failure.get('message')}"))
    if report.get("reason"):
        pairs.append(("reason", report["reason"]))
    emit_pairs(pairs)
    budgets = report.get("budgets")
    if budgets:
        click.echo("budgets:")
        for name in ("maximum_attempts_per_activation", "maximum_total_attempts", "maximum_activations"):
            budget = budgets[name]
            limit = "unlimited" if budget["limit"] is None else budget["limit"]
            flag = "  EXHAUSTED" if budget["exhausted"] else ""
            click.echo(f"  {name}: {budget['used']} of {limit}{flag}")
        if budgets["retry_on"]:
            click.echo(f"  retry_on: {', '.join(budgets['retry_on'])}")
    join = report.get("join")
    if join is not None:
        click.echo(f"join: {value_text({k: v for k, v in join.items() if k != 'children'})}")
        for child in report.get("children") or []:
            click.echo(f"  {child.get('label') or '-'}  {child.get('job_key') or '-'}  {child['kind']}")
    click.echo("paths:")
    emit_pairs([(name, value) for name, value in report["paths"].items() if name != "workdir_exists"], "  ")


def _last_change(report: dict[str, Any]) -> str:
    """The newest transition, or why it cannot be known: the damage, and the command that checks it."""
    fsck = "run 'httk workflow workspace fsck'"
    if report["damage"] is not None:
        return f"unknown: the state frame is unreadable ({report['damage']['code']}); {fsck}"
    if report.get("event") is None:
        # Generation 0 has no frame: job.json stands in for it, and it could not be read.
        error = report["job_error"] or {"code": "unknown"}
        return f"unknown: job.json, which defines generation 0, is unreadable ({error['code']}); {fsck}"
    when = timestamp(report.get("created_at"))
    # The implicit generation-0 frame (the submission) records no time.
    return f"{report['event']} at {when}" if when != "-" else str(report["event"])


@job.command("log", epilog=exit_codes_damage("state frame"))
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@click.option("--limit", type=click.IntRange(min=1), help="Show only the newest N state frames.")
@JSON_OPTION
@pass_app
@remote_aware(("job", "log"), "args", trailing=1)
def log(app: AppContext, args: tuple[str, ...], limit: int | None, as_json: bool) -> None:
    """Show one job's state frames, oldest first, one line each."""
    ctx = click.get_current_context()
    workspace, selector = split_workspace(ctx, args, "JOB")
    handle = app.open_workspace(workspace)
    entries = inspection.job_log(handle, inspection.resolve_job(handle, selector), limit)
    if as_json:
        emit_json(entries)
    else:
        for entry in entries:
            click.echo(_log_line(entry))
    if any("damage" in entry for entry in entries):
        ctx.exit(EXIT_NEEDS_OPERATOR)


def _log_line(entry: dict[str, Any]) -> str:
    generation = entry.get("generation")
    head = f"g{generation if generation is not None else '?'}"
    if "damage" in entry:
        damage = entry["damage"]
        return f"{'-':20}  {head}  DAMAGED {damage['code']}: {damage['message']} ({entry['record_ref']})"
    parts = [
        timestamp(entry.get("created_at")).ljust(20),
        head,
        f"{entry.get('event')} -> {entry.get('kind')}",
        f"step={entry.get('step') or '-'}",
        f"attempt={entry.get('attempt_ordinal', 0)}",
    ]
    failure = entry.get("failure")
    if isinstance(failure, dict) and failure.get("code"):
        parts.append(f"failure={failure['code']}")
    if entry.get("operator"):
        parts.append(f"operator={entry['operator']}")
    if entry.get("reason"):
        parts.append(f"reason={value_text(entry['reason'])}")
    if entry.get("recovered_by_scan"):
        parts.append("(found by journal scan)")
    return "  ".join(parts)
