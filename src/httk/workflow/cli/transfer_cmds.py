"""``httk workflow transfer SRC DST``, and the hidden ``transfer-remote`` a remote side runs.

Either side is a local path, a registered name, or ``REMOTE:WS``. A local side
is served in this process; a remote one by the remote's own httk over the
remote's transport (``transfer-remote ROLE OP WORKSPACE``, the request as JSON on
stdin), and the bundle moves with the transport's put/get over the same
connection. Progress (jobs and bytes) goes to stderr when it is a terminal; one
summary line ends the output. ``HTTK_WORKFLOW_TEST_STOP_AFTER=STEP`` (a test
hook, ``STEP`` or ``ROLE:STEP``) kills this process with SIGKILL right after that
ledger step is published, so tests can crash a transfer at every step.
Spec: 000 "Running on a remote", "Readiness and transfer environment advisories".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import click

from ..domain.lifecycle import TRANSFERABLE_KINDS
from ..operations.forwarding import RemoteSession
from ..operations.remotes import split_reference
from ..operations.transfer import SourceSide, TransferError
from ..operations.transfer_flow import Endpoint, LocalEndpoint, RemoteEndpoint, Transfer, dispatch, refusal_text
from ..operations.transfer_import import DestinationSide
from ..store.transfer_ledger import DESTINATION, ROLES, SOURCE, resume_command
from .context import AppContext, pass_app
from .progress import StatusLine
from .remote_refs import rooted
from .render import EXIT_REFUSED, emit_json, refuse

#: The test hook's environment variable (documented in docs/workflow_cli.md as a test hook only).
STOP_AFTER = "HTTK_WORKFLOW_TEST_STOP_AFTER"

#: Interrupted (SIGINT, Ctrl-C): 128 + the signal's number, as a shell reports it.
EXIT_INTERRUPTED = 130

EPILOG = (
    "\b\nExit status:\n  0  every transfer finished (or there was nothing to transfer)\n"
    "  2  refused before anything moved, rolled back, or held (one 'error: ...' line on stderr)\n"
    "  130  interrupted (Ctrl-C): run the same command again, or with --resume, to finish it"
)


def stop_hook(environ: Any) -> Callable[[str, str], None] | None:
    """The ledger callback of the test hook, or ``None`` when the variable is unset."""
    wanted = environ.get(STOP_AFTER)
    if not wanted:
        return None

    def stop(role: str, step: str) -> None:
        if wanted in (step, f"{role}:{step}"):
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return stop


def _local(app: AppContext, reference: str, *, create_default: bool) -> LocalEndpoint:
    # The destination writes, so it may create the per-user default; a source only reads (cli/context.py).
    handle = app.open_workspace(reference, create=create_default)
    hook = stop_hook(app.environ)
    return LocalEndpoint(SourceSide(handle, reference, on_record=hook),
                         DestinationSide(handle, reference, on_record=hook), handle.fs, reference)


def _endpoint(app: AppContext, reference: str, sessions: dict[str, RemoteSession], *, destination: bool) -> Endpoint:
    remote = split_reference(reference)
    if remote is None:
        return _local(app, reference, create_default=destination)
    remote = rooted(app, remote)
    session = sessions.get(remote.remote)
    if session is None:
        session = sessions[remote.remote] = app.open_session(remote.remote)
    return RemoteEndpoint(session.transport, session.httk_command, remote.path, reference, remote=remote.remote,
                          timeout=session.timeout, missing_httk=str(session.no_httk()))


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


class Progress:
    """The transfer's events as one status line on stderr (:mod:`.progress`: only on a terminal, never --json)."""

    def __init__(self, *, as_json: bool = False) -> None:
        self.line = StatusLine("transfer", as_json=as_json)

    def __call__(self, event: dict[str, Any]) -> None:
        jobs = f"{event['jobs']} job{'' if event['jobs'] == 1 else 's'}"
        text = f"{event['transfer']}: {event['phase']} {jobs}"
        if event["phase"] == "send":
            text += f", {_size(event['bytes'])} / {_size(event['total'])}"
        self.line.show(text)

    def end(self) -> None:
        self.line.end()


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def unselected_note(unselected: dict[str, int]) -> str:
    """``: 3 submitted jobs not selected (...)`` for the jobs the default kinds left out; '' for none."""
    if not unselected:
        return ""
    counts = " and ".join(f"{number} {kind}" for kind, number in unselected.items())
    total = sum(unselected.values())
    flags = " ".join(f"--kind {kind}" for kind in unselected)
    return (f": {counts} job{'' if total == 1 else 's'} not selected (only stopped jobs travel by default): "
            f"add {flags} or --job ID")


def placement_note(empty: dict[str, Any] | None, source: str) -> str:
    """``: no job is at or below placement 'cmap' in SRC (did you mean 'camp'?)``; '' when some job is."""
    if not empty:
        return ""
    nearest = empty.get("nearest")
    hint = f" (did you mean {nearest!r}?)" if nearest else ""
    return f": no job is at or below placement {empty['placement']!r} in {source}{hint}"


def owned_note(owned: dict[str, int], source: str) -> str:
    """``; 1 running job stays at SRC (...)`` for the jobs a manager still owns there; '' for none."""
    if not owned:
        return ""
    counts = " and ".join(f"{number} {kind}" for kind, number in owned.items())
    total = sum(owned.values())
    return (f"; {counts} job{'' if total == 1 else 's'} stay{'s' if total == 1 else ''} at {source}: a manager owns "
            f"{'it' if total == 1 else 'them'}; transfer again after {'it stops' if total == 1 else 'they stop'} "
            f"(see 'httk workflow workspace status {source}')")


def summary(report: dict[str, Any]) -> str:
    """The one line that ends a transfer's output."""
    return _summary(report) + owned_note(report.get("owned") or {}, report["source"])


def _summary(report: dict[str, Any]) -> str:
    transfers = report["transfers"]
    where = f"from {report['source']} to {report['destination']}"
    if not transfers:
        return (f"nothing to transfer {where}{placement_note(report.get('placement'), report['source'])}"
                f"{unselected_note(report.get('unselected') or {})}")
    # An older remote side reports no "already".
    earlier = [item for item in transfers if item["state"] == "retired" and item.get("already")]
    done = [item for item in transfers if item["state"] == "retired" and not item.get("already")]
    rolled = sum(1 for item in transfers if item["state"] == "rolled_back")
    held = sum(1 for item in transfers if item["state"] == "held")
    parts = []
    if done:
        jobs = sum(len(item["jobs"]) for item in done)
        size = sum(int(item["bytes"] or 0) for item in done)
        ids = ", ".join(item["transfer_id"] for item in done)
        parts.append(f"transferred {_count(jobs, 'job')} ({_size(size)}) {where} (transfer {ids})")
        resumed = sum(len(item["jobs"]) for item in done if item["resumed"])  # jobs, not transfers
        if resumed:
            who = "it" if jobs == 1 else "all of them" if resumed == jobs else f"{resumed} of them"
            parts.append(f"{who} finished an interrupted transfer")
    if earlier:
        # The jobs asked for (an older side reports none): a transfer that carried more moved those too, earlier.
        jobs = sum(len(item.get("asked") or item["jobs"]) for item in earlier)
        ids = ", ".join(item["transfer_id"] for item in earlier)
        parts.append(f"{_count(jobs, 'job')} already transferred {where} by {ids}; nothing to do")
    if rolled:
        parts.append(f"rolled back {_count(rolled, 'transfer')}{'' if done else ' ' + where} (nothing moved)")
    if held:
        parts.append(f"held {_count(held, 'transfer')}{'' if done or rolled else ' ' + where}")
    return "; ".join(parts)


@click.command("transfer", epilog=EPILOG)
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@click.option("--job", "jobs", multiple=True, metavar="JOB",
              help="A job to transfer (uuid, key or unique prefix); repeatable. Default: every stopped job.")
@click.option("--placement", help="Only jobs at or below this placement.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(sorted(kind.value for kind in TRANSFERABLE_KINDS)),
              help="Only jobs of this kind; repeatable (default without --job: paused, succeeded, failed, cancelled).")
@click.option("--resume", is_flag=True, help="Only finish the interrupted transfers from SRC to DST; start none.")
@click.option("--strict-environment", is_flag=True,
              help="Refuse, before anything moves, when a required setting would resolve to nothing at DST.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON value instead of text.")
@pass_app
def transfer(
    app: AppContext, source: str, destination: str, jobs: tuple[str, ...], placement: str | None,
    kinds: tuple[str, ...], resume: bool, strict_environment: bool, as_json: bool,
) -> None:
    """Move jobs from SRC to DST (each a path, a registered name, or REMOTE:WS), with their whole history.

    Only quiescent jobs travel: submitted, ready, paused, failed, succeeded, cancelled, and
    waiting jobs together with their children. A job detaches from SRC into the kind
    'transferring' (no manager claims it there), travels in one checksummed bundle with its
    payload, state, journal history, data, attempts and workspace runners, and is retired at
    SRC only after DST acknowledged its import. An interrupted transfer is finished by
    running the same command again (or with --resume): afterwards each job is in exactly one
    of the two workspaces.

    \b
    Examples:
      httk workflow transfer default kappa:runs --job JOB-ID
      httk workflow transfer kappa:runs default     # every stopped job comes back
    """
    sessions: dict[str, RemoteSession] = {}
    progress = Progress(as_json=as_json)
    scratch: str | None = None
    try:
        src = _endpoint(app, source, sessions, destination=False)
        dst = _endpoint(app, destination, sessions, destination=True)
        if isinstance(src, RemoteEndpoint) and isinstance(dst, RemoteEndpoint):
            # Only a relay between two remotes passes the bundle through this machine; made only then,
            # because a killed command cannot remove it.
            scratch = tempfile.mkdtemp(prefix="httk-transfer-")
        flow = Transfer(src, dst, app.container.ids(), progress=progress, warn=_warn,
                        local_fs=app.container.fs(), scratch=scratch)
        try:
            report = flow.run(jobs=jobs, placement=placement, kinds=kinds, strict=strict_environment,
                              resume_only=resume)
        except TransferError as error:
            progress.end()
            refuse(str(error))
        except KeyboardInterrupt:
            # Every step is in the ledgers: what was cut short is finished (or rolled back) by the next run.
            progress.end()
            click.echo(f"error: interrupted; jobs it detached stay 'transferring' (no manager claims them) until "
                       f"'{resume_command(source, destination)}' (or the same command again) finishes it", err=True)
            click.get_current_context().exit(EXIT_INTERRUPTED)
    finally:
        progress.end()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        for session in sessions.values():
            session.close()
    report["summary"] = summary(report)
    if as_json:
        emit_json(report)
    else:
        for item in report["skipped"]:
            click.echo(f"skipped {item['job']}: {item['reason']}", err=True)
        click.echo(report["summary"])
    failed = [item for item in report["transfers"] if item["state"] != "retired"]
    if failed:
        for item in failed:
            click.echo(f"error: {item['reason']}", err=True)
        click.get_current_context().exit(EXIT_REFUSED)


def _warn(message: str) -> None:
    """A warning, shown at once on stderr (before the transfer goes on)."""
    click.echo(f"warning: {message}", err=True)


@click.command("transfer-remote", hidden=True, epilog=EPILOG)
@click.argument("role", type=click.Choice(ROLES))
@click.argument("op")
@click.argument("workspace", required=False)
@click.option("--label", help="How the client names this workspace (used in messages).")
@pass_app
def transfer_remote(app: AppContext, role: str, op: str, workspace: str | None, label: str | None) -> None:
    """Run one step of a transfer here for a client on another machine (internal).

    ROLE is source or destination; OP one of the operations of that role (see
    httk.workflow.operations.transfer_flow.OPERATIONS). The request is one JSON object on
    stdin, the answer one JSON value on stdout; a refusal is one 'error:' line, exit 2.
    """
    text = click.get_text_stream("stdin").read()
    try:
        request = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        refuse("transfer-remote: the request on stdin is not JSON")
    if not isinstance(request, dict):
        refuse("transfer-remote: the request on stdin must be a JSON object")
    handle = app.open_workspace(workspace, create=role == DESTINATION)
    name = label or workspace or handle.root
    hook = stop_hook(app.environ)
    side = SourceSide(handle, name, on_record=hook) if role == SOURCE else DestinationSide(handle, name, on_record=hook)
    try:
        result = dispatch(side, role, op, request)
    except TransferError as error:
        refuse(str(error))
    except (OSError, ValueError) as error:  # a ledger, bundle or document problem, a full disk
        refuse(refusal_text(error, name))
    emit_json(result)
