"""``httk workflow job``: submit, create, inspect, diagnose, control and debug jobs.

``job submit [WORKSPACE] PAYLOAD`` and ``job show/log/why [WORKSPACE] JOB`` take one
or two positionals, because click cannot put an optional argument before a
required one; one positional means the default workspace. Inspection never
writes protocol state; ``job request`` publishes one operator request for a
manager to apply; ``job debug`` drives one job in the foreground through a
private manager. Spec: 000 "Submit a job", "Inspecting jobs", "Inspect and
control", "The foreground debug runner".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import click

from ..domain.lifecycle import StateKind
from ..operations import inspection
from .context import AppContext, pass_app
from .remote_refs import LocalPaths, remote_aware
from .render import (
    EXIT_CODES,
    EXIT_CODES_SUBMIT,
    EXIT_NEEDS_OPERATOR,
    Group,
    emit_json,
    emit_pairs,
    emit_table,
    exit_codes_damage,
    log_level_option,
    log_levels,
    refuse,
    timestamp,
    value_text,
)

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")


@click.group("job", cls=Group)
def job() -> None:
    """Submit and inspect jobs.

    \b
    Examples:
      httk workflow job submit runs ./prepared-job --placement project-a
      httk workflow job list runs --kind failed
      httk workflow job why runs silicon
    """


def split_workspace(ctx: click.Context, args: Sequence[str], what: str) -> tuple[str | None, str]:
    """``(workspace, value)`` from one or two positionals; anything else is a usage error."""
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    raise click.UsageError(f"expected [WORKSPACE] {what}, got {len(args)} arguments", ctx)


@job.command("submit", epilog=EXIT_CODES_SUBMIT)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] PAYLOAD...")
@click.option("--placement", required=True, help="Relative path below the workspace, e.g. project-a/00/17.")
@click.option("--from-file", type=click.Path(dir_okay=False, allow_dash=True), metavar="LIST",
              help="Also submit the payloads LIST names, one directory per line ('-': stdin).")
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
    from_file: str | None,
    move: bool,
    tag: str | None,
    allow_missing_runner: bool,
    as_json: bool,
) -> None:
    """Submit prepared payload directories and print each new job's key.

    With more than one payload (or --from-file) the first positional is the workspace,
    and the batch is submitted with grouped syncs: a crash leaves each job submitted in
    full or absent, and one bad payload refuses the whole batch. Nothing is written
    when a submission is refused: a placement too long for the filesystem, --move
    across filesystems, a pinned workspace runner the store lacks, or a payload runner
    the payload lacks (or holds as a link, FIFO or device).

    \b
    httk workflow job submit WS ./payload --placement project-a/00/17
    httk workflow job submit WS ./p1 ./p2 ./p3 --placement project-a/00
    find prepared -name job.json -printf '%h\\n' | httk workflow job submit WS --from-file - --placement project-a

    \b
    Examples:
      httk workflow job submit runs ./prepared-job --placement project-a/00/17
      httk workflow job submit runs --from-file payloads.txt --placement project-a
    """
    # Imported by the commands that write: list, show and log start without submission or the engine.
    from ..operations.submission import submit as submit_payload
    from .bulk_submit import is_bulk, submit_bulk, submitted_json

    if is_bulk(args, from_file):
        submit_bulk(app, args, from_file, placement, move=move, tag=tag, allow_missing_runner=allow_missing_runner,
                    as_json=as_json)
        return
    workspace, payload = split_workspace(click.get_current_context(), args, "PAYLOAD")
    handle = app.open_workspace(workspace, create=True)
    result = submit_payload(
        handle, app.absolute(payload), placement, move=move, tag=tag, allow_missing_runner=allow_missing_runner
    )
    if result.warning:
        click.echo(f"warning: {result.warning}", err=True)
    if as_json:
        emit_json(submitted_json(result, handle.root))
        return
    click.echo(str(result.marker.key))


@job.command("new", epilog=EXIT_CODES)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@click.option("--workflow", "name", help="The workflow (see 'httk workflow workflow list').")
@click.option(
    "--input", "assignments", multiple=True, metavar="KEY=VALUE",
    help="One input (repeatable). A file input stages the named file; other values are JSON, else text.",
)
@click.option("--language", help="A workflow language instead of --workflow: jobflow (docs/jobflow.md).")
@click.option("--flow", "flow_reference", metavar="MODULE:FUNCTION",
              help="With --language: the function that returns the flow.")
@click.option("--tag", help="Tag for the job key, e.g. silicon.")
@click.option("--placement", help="Relative path below the workspace (default: the workflow name).")
@JSON_OPTION
@pass_app
@remote_aware(("job", "new"), local_paths=[LocalPaths("assignments", separator="=")])
def new(
    app: AppContext,
    workspace: str | None,
    name: str | None,
    assignments: tuple[str, ...],
    language: str | None,
    flow_reference: str | None,
    tag: str | None,
    placement: str | None,
    as_json: bool,
) -> None:
    """Create and submit a job from a workflow (or a jobflow flow) and print its job id.

    \b
    Examples:
      httk workflow job new --workflow vasp-relax --input structure=POSCAR --tag silicon
      httk workflow job new --language jobflow --flow mypackage.flows:make_flow
    """
    if language is not None or flow_reference is not None:
        from .language_cmds import new_language_job

        if name is not None or assignments:
            refuse("--language/--flow submit a flow; give either them or --workflow/--input, not both")
        new_language_job(app.open_workspace(workspace, create=True), language or "jobflow", flow_reference, tag=tag,
                         placement=placement, as_json=as_json)
        return
    if name is None:
        refuse("job new needs --workflow NAME (see 'httk workflow workflow list'), or --language jobflow --flow "
               "MODULE:FUNCTION")
    from ..operations.workflows import WorkflowError, new_job
    from .workflow_cmds import catalog

    handle = app.open_workspace(workspace, create=True)
    try:
        created = new_job(
            handle, catalog(handle), name, assignments, cwd=os.getcwd(), tag=tag, placement=placement,
            origin=app.origin,
        )
    except WorkflowError as error:
        refuse(str(error))
    for warning in (*created.warnings, *([created.submitted.warning] if created.submitted.warning else [])):
        click.echo(f"warning: {warning}", err=True)
    marker = created.submitted.marker
    if not as_json:
        click.echo(str(marker.key))  # the tag--uuid key, as 'job submit' prints it
        return
    emit_json({
        "job_id": marker.job_id,
        "job_key": str(marker.key),
        "kind": marker.kind.value,
        "placement": marker.placement,
        "workflow": created.workflow.name,
        "source": created.workflow.source,
        "runner": dict(created.runner),
        "inputs": dict(created.inputs),
        "staged": dict(created.staged),
        "payload": created.submitted.payload,
        "workspace": handle.root,
        "warnings": list(created.warnings),
    })


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
    """List jobs with their state kind, placement and priority.

    \b
    Example:
      httk workflow job list runs --kind ready --placement project-a
    """
    handle = app.open_workspace(workspace)
    jobs = inspection.list_jobs(handle, kinds or None, placement)
    note = inspection.placement_note(handle, placement) if not jobs else None
    if note:
        click.echo(f"note: {note}", err=True)
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

    \b
    Example:
      httk workflow job show runs silicon
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


def _realization_text(report: dict[str, Any]) -> str | None:
    kind, language = report.get("workflow_realization"), report.get("language")
    return f"{kind} ({language})" if kind and language else kind


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
        ("realization", _realization_text(report)),
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
    headlines = report.get("headlines")
    if headlines:
        # Spec 002: headline events are meant to be read first when the job is inspected.
        click.echo("headlines (latest attempt):")
        for event in headlines:
            click.echo(f"  {_headline_text(event)}")
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


def _headline_text(event: dict[str, Any]) -> str:
    """``TIME [STEP] LABEL: MESSAGE`` of one run-log headline event."""
    return f"{timestamp(event.get('time'))} [{event.get('step') or '-'}] {event.get('label')}: {event.get('message')}"


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
    # Generation 0 (the submission) has no frame: its time is the id reservation's, unknown for an imported job.
    return f"{report['event']} at {when}" if when != "-" else str(report["event"])


@job.command("log", epilog=exit_codes_damage("state frame"))
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@click.option("--limit", type=click.IntRange(min=1), help="Show only the newest N state frames.")
@JSON_OPTION
@pass_app
@remote_aware(("job", "log"), "args", trailing=1)
def log(app: AppContext, args: tuple[str, ...], limit: int | None, as_json: bool) -> None:
    """Show one job's state frames, oldest first, one line each.

    \b
    Example:
      httk workflow job log runs silicon --limit 20
    """
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


# -- diagnosis and control ------------------------------------------------------------------
@job.command("why", epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="[WORKSPACE] JOB")
@JSON_OPTION
@pass_app
@remote_aware(("job", "why"), "args", trailing=1)
def why(app: AppContext, args: tuple[str, ...], as_json: bool) -> None:
    """Answer "why is this job not running?" for its current state.

    \b
    Example:
      httk workflow job why runs silicon
    """
    workspace_path, selector = split_workspace(click.get_current_context(), args, "JOB")
    handle = app.open_workspace(workspace_path)
    marker = inspection.resolve_job(handle, selector)
    from ..operations import diagnosis

    report = diagnosis.why(handle, marker, app.container.process())
    if as_json:
        emit_json(report)
        return
    click.echo(f"{report['job']}: {report['summary']}")
    for line in report["lines"]:
        click.echo(f"  {line}")


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

    \b
    Examples:
      httk workflow job request runs silicon pause --operator "$USER" --reason inspection
      httk workflow job request runs silicon override_step --step relax --operator "$USER"
    """
    ctx = click.get_current_context()
    if len(args) < 2:
        raise click.UsageError("expected [WORKSPACE] JOB ACTION", ctx)
    action = args[-1]
    from ..domain.requests import ACTIONS  # the request rules and their records: only this command needs them

    if action not in ACTIONS:
        raise click.UsageError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}", ctx)
    workspace, selector = split_workspace(ctx, args[:-1], "JOB")
    handle = app.open_workspace(workspace)
    marker = inspection.resolve_job(handle, selector)
    from ..bootstrap import operator_signer
    from ..operations.requests import publish_request

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


# -- the foreground debug runner --------------------------------------------------------------
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
@log_level_option("Show the private manager's own log at this level (default: errors only on the console).")
@pass_app
@remote_aware(("job", "debug"), "args", trailing=1, local_paths=[LocalPaths("args", index=-1, kind="payload")],
              unbounded=True)
def debug(
    app: AppContext, args: tuple[str, ...], step: str | None, placement: str, follow_children: bool,
    log_level: str | None,
) -> None:
    """Drive exactly one job to a stop in the foreground, streaming its attempts' output.

    \b
    Examples:
      httk workflow job debug runs ./prepared-job --step relax
      httk workflow job debug runs silicon --follow-children
    """
    from ..bootstrap import build_manager
    from ..engine.manager import ManagerConfig
    from ..operations.debug import DebugError, Debugger, check_holder
    from ..operations.submission import submit as submit_payload

    workspace_path, target = split_workspace(click.get_current_context(), args, "PAYLOAD|JOB")
    candidate = app.absolute(target)
    fresh = os.path.isdir(candidate) and os.path.exists(os.path.join(candidate, "job.json"))
    handle = app.open_workspace(workspace_path, create=fresh)  # only a fresh payload is a first submission
    if fresh:
        marker = submit_payload(handle, candidate, placement).marker
        click.echo(f"[debug] submitted {marker.key} at {placement}")
    else:
        marker = inspection.resolve_job(handle, target)
        # Before the private manager exists, so that a refusal writes nothing.
        note = check_holder(handle, marker, app.container.process())
        if note is not None:
            click.echo(f"[debug] {note}")
    spec = handle.store.read_job(marker).spec
    if spec is None:
        raise DebugError(f"job {marker.key}: job.json is unreadable; run 'httk workflow workspace fsck'")
    config = ManagerConfig(
        workers=1,
        pools=(spec.pool,),
        capabilities=tuple(spec.capabilities),
        executors=(spec.executor,),
        poll_interval=0.1,
        **log_levels(log_level, console="error"),  # quiet by default: the job's own output stands out
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
