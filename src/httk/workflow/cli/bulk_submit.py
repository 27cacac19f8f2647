"""``job submit WORKSPACE PAYLOAD... | --from-file LIST``: many payloads in one batch.

The command's own body (in :mod:`.job_cmds`) hands over here when it is given more
than one payload; the batch itself is :func:`~httk.workflow.operations.bulk_submission.submit_many`.
Output is what one ``job submit`` prints, once per job: a key per line, or with
``--json`` one JSON object per line. A progress bar goes to stderr only when
stderr is a terminal. A batch that fails part way prints the jobs it made and
exits 1 (:data:`~.render.EXIT_NEEDS_OPERATOR`), not 2: something was written.
Spec: 000 "Submit a job".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import click

from ..operations.bulk_submission import PHASES, BulkSubmissionError, Progress, submit_many
from ..operations.remotes import split_reference
from ..operations.submission import Submitted
from .context import AppContext
from .progress import enabled, progress
from .render import EXIT_NEEDS_OPERATOR, CliError, emit_json, refuse


class PartlySubmitted(CliError):
    """A batch failed after writing: one ``error:`` line, exit 1 (exit 2 promises that nothing was written)."""

    exit_code = EXIT_NEEDS_OPERATOR


def is_bulk(args: Sequence[str], from_file: str | None) -> bool:
    """Whether the positionals (and ``--from-file``) name a batch rather than ``[WORKSPACE] PAYLOAD``."""
    return from_file is not None or len(args) > 2


def submitted_json(result: Submitted, workspace: str) -> dict[str, Any]:
    """The JSON object ``job submit --json`` prints for one new job."""
    marker = result.marker
    return {
        "job_key": str(marker.key),
        "job_id": marker.job_id,
        "kind": marker.kind.value,
        "placement": marker.placement,
        "priority": marker.priority,
        "payload": result.payload,
        "workspace": workspace,
    }


def submit_bulk(
    app: AppContext, args: Sequence[str], from_file: str | None, placement: str, *, move: bool,
    tag: str | None, allow_missing_runner: bool, as_json: bool,
) -> None:
    """Submit every payload the positionals after the workspace and the list file name, then print the jobs."""
    workspace, payloads = (args[0], list(args[1:])) if args else (None, [])
    if workspace is not None and split_reference(workspace) is not None:
        refuse(f"{workspace}: a batch goes to a local workspace only; copy the payloads to the remote and run "
               "'httk workflow job submit WORKSPACE PAYLOAD... --placement P' there")
    if from_file is not None:
        payloads += read_list(from_file)
        if not payloads:
            refuse(f"{from_file} names no payload; list one payload directory per line")
    handle = app.open_workspace(workspace, create=True)
    sources = [app.absolute(payload) for payload in payloads]
    try:
        with progress_bar(len(sources), as_json=as_json) as bar:
            results = submit_many(handle, sources, placement, move=move, tag=tag,
                                  allow_missing_runner=allow_missing_runner, progress=bar)
    except BulkSubmissionError as failure:
        _emit(failure.submitted, handle.root, as_json)  # those are jobs now: say so before the error
        raise PartlySubmitted(" ".join(str(failure).split())) from failure
    _emit(results, handle.root, as_json)


def read_list(path: str) -> list[str]:
    """The payload paths of a list file (``-``: stdin), one per line; blank lines and surrounding blanks are ignored."""
    try:
        with click.open_file(path, encoding="utf-8", errors="surrogateescape") as lines:
            return [line.strip() for line in lines if line.strip()]
    except OSError as error:
        refuse(f"--from-file {path}: {error.strerror or error}; give a file listing one payload directory per line")


def _emit(results: Sequence[Submitted], workspace: str, as_json: bool) -> None:
    for warning in dict.fromkeys(result.warning for result in results if result.warning):
        click.echo(f"warning: {warning}", err=True)
    for result in results:
        if as_json:
            emit_json(submitted_json(result, workspace))
        else:
            click.echo(str(result.marker.key))


@contextlib.contextmanager
def progress_bar(jobs: int, *, as_json: bool = False) -> Iterator[Progress | None]:
    """A bar over every phase of the batch on stderr (:mod:`.progress`: a terminal only, never --json)."""
    if not enabled(as_json=as_json):
        yield None
        return
    width = max(len(phase) for phase in PHASES)
    with progress(PHASES[0].ljust(width), total=jobs * len(PHASES), unit="step") as bar:

        def report(phase: str, done: int) -> None:
            bar.label(phase.ljust(width))
            bar.update(done)

        yield report
