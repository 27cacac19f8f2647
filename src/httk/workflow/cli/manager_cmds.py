"""``httk workflow manager run`` and its short form ``httk workflow run``: start a task manager.

One command object serves both spellings (and ``httk-taskmanager run``), so
their options can never drift apart. The command only builds a
``ManagerConfig`` from its options and returns the manager's own exit status;
the composition root builds the manager. Without ``--workers`` the worker count
is the workspace setting ``manager.workers`` (else 1), for a local manager as for
one submitted to a remote. ``manager status REMOTE:WS [--job ID]`` asks a remote's
batch system about the managers ``run REMOTE:WS`` submitted (by default the ones
its ``.httk-workflow/batch`` records). Spec: 000 "Run",
"Scheduling", "Application settings", "Running on a remote".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..domain.model import check_placement
from ..domain.settings import resolve_workers
from ..operations.forwarding import manager_jobs, recorded_managers
from ..operations.remotes import RemoteError, split_reference
from .context import AppContext, pass_app
from .progress import manager_line
from .remote_refs import remote_aware, rooted
from .render import EXIT_CODES, EXIT_CODES_RUN, CliError, Group, emit_json, log_level_option, log_levels

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS: tuple[Callable[[Any], Any], ...] = (
    click.option(
        "--workers",
        type=click.IntRange(min=1),
        help="Concurrent attempts (default: the workspace setting manager.workers, else 1).",
    ),
    click.option(
        "--pool",
        "pools",
        multiple=True,
        metavar="POOL",
        help="Claim pool to serve (repeatable; default: default).",
    ),
    click.option("--capability", "capabilities", multiple=True, help="Capability to advertise (repeatable)."),
    click.option(
        "--placement-prefix",
        "placement_prefixes",
        multiple=True,
        help="Scan only this placement subtree (repeatable; default: the whole workspace).",
    ),
    click.option(
        "--lease-seconds",
        type=click.FloatRange(min=0, min_open=True),
        help="Claim lease (default: the policy's).",
    ),
    click.option(
        "--takeover-grace-factor",
        type=click.FloatRange(min=0),
        default=2.0,
        show_default=True,
        help="Leases of heartbeat silence after which an isolated attempt may be taken over.",
    ),
    click.option(
        "--unsafe-persistent-takeover",
        is_flag=True,
        help="Take over persistent-workdir attempts without proof that the process is gone.",
    ),
    click.option(
        "--unsafe-isolated-takeover",
        is_flag=True,
        help="Take over isolated-workdir attempts on lease expiry alone.",
    ),
    click.option(
        "--join-grace-seconds",
        type=click.FloatRange(min=0),
        default=3600.0,
        show_default=True,
        help="How long a waiting job tolerates unresolvable children before failing.",
    ),
    click.option(
        "--idle/--until-idle",
        default=False,
        help="Keep serving when idle, or exit once nothing this manager can progress remains (default).",
    ),
    click.option("--idle-timeout", type=click.FloatRange(min=0), help="Exit after this many seconds without progress."),
    click.option(
        "--runner-search-path",
        "runner_search_paths",
        multiple=True,
        help="Root of installed runners (repeatable, searched in order).",
    ),
    click.option(
        "--drain-timeout",
        type=click.FloatRange(min=0),
        default=60.0,
        show_default=True,
        help="Seconds to keep committing outcomes after the first SIGTERM/SIGINT.",
    ),
    log_level_option(
        "Set both the console and the log file to this level (default: console warning, file info).",
    ),
    click.option("--log-file", help="Write the manager log here instead of .httk-workflow/managers/ID/log."),
    click.option("--json-logs", is_flag=True, help="One JSON object per log line."),
    click.option(
        "--gc-interval",
        type=click.FloatRange(min=0, min_open=True),
        help="Collect garbage per policy.retention at most once per this many seconds (default: never).",
    ),
)


def manager_options(function: F) -> F:
    """Apply every manager option, in the order they are listed in ``--help``."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


@click.command("run", epilog=EXIT_CODES_RUN)
@click.argument("workspace", required=False, metavar="[WORKSPACE]")
@manager_options
@click.option(
    "--managers",
    type=click.IntRange(min=1),
    help="REMOTE:WS only: submit up to this many managers, as many as the site's submit limits allow.",
)
@click.option("--json", "as_json", is_flag=True, help="REMOTE:WS only: print what was submitted as one JSON object.")
@pass_app
@remote_aware(("run",))
def run(app: AppContext, workspace: str | None, **options: Any) -> None:
    """Run a task manager on a workspace until it is idle (or, with --idle, until signalled).

    On a remote workspace (REMOTE:WS) the manager is submitted through the
    remote's batch system instead. --managers N submits up to N of them: never
    more than the site's limits admit (Slurm: MaxSubmitJobs less the jobs
    already queued, the partition's state and MaxTime), and the last line says
    how many were submitted and why. None at all is a refusal (exit 2).

    \b
    Examples:
      httk workflow run runs --workers 8
      httk workflow manager run runs --pool taskset --idle
      httk workflow run kappa:runs --workers 8 --managers 50
    """
    # Imported here: the manager pulls in the whole runtime, which inspection commands do not need.
    from ..bootstrap import build_manager
    from ..engine.manager import ManagerConfig

    for name, flag in (("managers", "--managers"), ("as_json", "--json")):
        if options.pop(name) not in (None, False):
            raise CliError(f"{flag} is for a workspace on a remote (run REMOTE:WS {flag} ...); a local run is "
                           "one manager in the foreground: start more in other shells")
    handle = app.open_workspace(workspace, create=True)
    config = ManagerConfig(
        # The same rule as a remote manager's batch script: --workers, else manager.workers, else 1.
        workers=resolve_workers(handle.settings(), options["workers"]),
        pools=tuple(options["pools"]) or ("default",),
        capabilities=tuple(options["capabilities"]),
        # Validated here because a prefix becomes a directory below every kind tree.
        placement_prefixes=tuple(check_placement(prefix) for prefix in options["placement_prefixes"]),
        lease_seconds=options["lease_seconds"],
        takeover_grace_factor=options["takeover_grace_factor"],
        unsafe_persistent_takeover=options["unsafe_persistent_takeover"],
        unsafe_isolated_takeover=options["unsafe_isolated_takeover"],
        join_grace_seconds=options["join_grace_seconds"],
        idle=options["idle"],
        idle_timeout=options["idle_timeout"],
        runner_search_paths=tuple(app.absolute(path) for path in options["runner_search_paths"]),
        drain_timeout=options["drain_timeout"],
        **log_levels(options["log_level"]),
        log_file=app.absolute(options["log_file"]) if options["log_file"] else None,
        json_logs=options["json_logs"],
        gc_interval=options["gc_interval"],
    )
    manager = build_manager(app.container, handle, config)
    with manager_line(manager, as_json=config.json_logs):  # a live line on stderr, only when it is a terminal
        status = manager.run()
    click.get_current_context().exit(status)


@click.group("manager", cls=Group)
def manager() -> None:
    """Run task managers.

    \b
    Examples:
      httk workflow manager run runs --pool vasp --idle
      httk workflow manager status kappa:runs
    """


manager.add_command(run)


@manager.command("status", epilog=EXIT_CODES)
@click.argument("workspace", metavar="REMOTE:WORKSPACE")
@click.option("--job", "job_ids", multiple=True, help="A batch job id 'run' printed (repeatable; default: every "
              "manager job the workspace's .httk-workflow/batch records).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_app
def manager_status(app: AppContext, workspace: str, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Ask the remote's batch system about manager jobs that 'run REMOTE:WORKSPACE' submitted.

    Without --job, the jobs are the ones the workspace's .httk-workflow/batch
    records there (their output files and script copies), as 'workspace report'
    finds them; a local job is named PID.START, as 'run' printed it.

    \b
    Example:
      httk workflow manager status kappa:runs --job 123456
      httk workflow manager status kappa:runs
    """
    reference = split_reference(workspace)
    if reference is None:
        raise RemoteError(
            f"{workspace}: manager status asks a remote's batch system (REMOTE:WORKSPACE); "
            "for the managers of a local workspace see 'httk workflow workspace managers'"
        )
    reference = rooted(app, reference)
    with app.open_session(reference.remote) as session:
        batch_name = session.batch.name
        wanted = list(job_ids)
        recorded = None if wanted else recorded_managers(session, reference)
        if recorded is not None and recorded.job_ids is None:
            raise RemoteError(f"{workspace}: {batch_name} output files do not name their job ids, so the manager "
                              f"jobs in {recorded.workdir} cannot be listed; give --job ID (the ids 'run' printed)")
        if recorded is not None:
            wanted = list(recorded.job_ids or ())
        jobs = manager_jobs(session, wanted) if wanted else {}
    if as_json:
        emit_json({"remote": reference.remote, "batch": batch_name, "jobs": jobs})
        return
    if recorded is not None and not wanted:
        click.echo(f"no manager jobs recorded in {recorded.workdir} on {reference.remote}; "
                   f"submit one with 'httk workflow run {workspace}'")
        return
    for job_id, entry in jobs.items():
        outcome = {True: ", succeeded", False: ", did not succeed", None: ""}[entry["succeeded"]]
        ending = f" (finished{outcome})" if entry["finished"] else ""
        click.echo(f"{batch_name} job {job_id} on {reference.remote}: {entry['state']}{ending}")
