"""Reading what an attempt left behind: ``outcome.ready/``, ``error.json``, the exit status.

Every ending becomes exactly one :class:`Outcome`: a published outcome is
validated member by member (a malformed one is ``protocol_error``), an exit
without one becomes a canonical failure built from ``error.json`` or the exit
status. Spec: 001 "What an attempt publishes", 000 "Runner contract";
docs/workflow_filesystem_api.md "The outcome".
"""

from __future__ import annotations

import posixpath
from typing import Any

import attrs

from .. import codec
from ..attempt_records import JoinDocument, OutcomeDocument, RunnerErrorDocument, SpawnDocument, TransactionDocument
from ..domain.commit import WaitRequest
from ..domain.model import Failure, ValidationError, check_join_condition
from ..ports import Filesystem
from ..protocol import JOB_FILE, PRIVATE_DIR, parse_job_bytes
from ..store.links import refuse_links

#: Failures the manager itself records for an attempt that ended without an outcome.
UNCLEAN_CODES = frozenset({"runner_error", "runner_exit"})
#: The exit status of a runner its launcher could not start (spec 002: 125).
LAUNCH_FAILED = 125


@attrs.frozen
class Outcome:
    """One attempt's result, published or synthesized."""

    action: str
    step: str | None = None
    priority: int | None = None
    join: WaitRequest | None = None
    failure: Failure | None = None
    reason: str | None = None
    runner_steps: tuple[str, ...] | None = None
    spawned: tuple[dict[str, Any], ...] = ()
    transaction: tuple[dict[str, Any], ...] = ()
    published: bool = True

    @property
    def unclean(self) -> bool:
        return not self.published and self.failure is not None and self.failure.code in UNCLEAN_CODES


def _protocol_error(message: str) -> Outcome:
    return Outcome("fail", failure=Failure("protocol_error", message), published=False)


def published(fs: Filesystem, control: str) -> bool:
    """Whether the attempt whose control directory is ``control`` published an outcome (valid or not)."""
    return fs.exists(f"{control}/outcome.ready")


def read_outcome(fs: Filesystem, control: str, returncode: int | None) -> Outcome:
    """The outcome of the attempt whose control directory is ``control``."""
    ready = f"{control}/outcome.ready"
    if published(fs, control):
        try:
            _refuse_links(fs, control)
            return _parse_ready(fs, ready)
        except (codec.DocumentError, ValidationError, ValueError, OSError) as error:
            # Also a directory, FIFO or symlink where a document belongs, or one past the size
            # bound: the runner's bytes are refused for this attempt, never a fault of the manager.
            return _protocol_error(f"malformed outcome: {error}")
    return _synthesize(fs, control, returncode)


def _refuse_links(fs: Filesystem, control: str) -> None:
    """Refuse an outcome that would lead the commit through a symbolic link (:mod:`.links`).

    Checked from the job's attempts directory down: ``outcome.ready/`` and every
    name a commit reads or moves in it (``outcome.json``, ``children/spawn.json``,
    ``children/jobs/`` and each payload there with its ``job.json`` and
    ``.httk-job/parent.json``, ``transaction/manifest.json``, ``transaction/files/``).
    A child payload's other files travel with it as they are, links included.
    """
    ready = f"{control}/outcome.ready"
    anchor = posixpath.dirname(control)
    refuse_links(fs, anchor, f"{ready}/outcome.json", f"{ready}/children/spawn.json", f"{ready}/children/jobs",
                 f"{ready}/transaction/manifest.json", f"{ready}/transaction/files")
    for entry in fs.scandir(f"{ready}/children/jobs"):
        refuse_links(fs, anchor, f"{entry.path}/{JOB_FILE}", f"{entry.path}/{PRIVATE_DIR}/parent.json")


def _synthesize(fs: Filesystem, control: str, returncode: int | None) -> Outcome:
    error_file = f"{control}/error.json"
    if fs.exists(error_file):
        try:
            error = codec.read(fs.read_document(error_file), RunnerErrorDocument, error_file)
        except (codec.DocumentError, OSError) as unreadable:
            error = RunnerErrorDocument("unreadable error.json", str(unreadable))
        message = error.summary
        details: dict[str, Any] = {key: getattr(error, key) for key in ("step", "exception", "file", "line", "command")
                                   if getattr(error, key) is not None}
        details["returncode"] = returncode
        tail = stderr_tail(fs, control)
        if tail and error.file:  # Bash: the refusal that killed the handler is on stderr
            details["stderr"] = tail
            message = f"{message}; stderr: {tail}"
        return Outcome(
            "fail",
            failure=Failure("runner_error", f"the step raised {message}", details, retryable=True),
            published=False,
        )
    tail = stderr_tail(fs, control)
    said = f"; stderr: {tail}" if tail else ""
    if returncode == 0:
        return _protocol_error(f"the runner exited 0 without publishing an outcome{said}")
    if returncode == LAUNCH_FAILED:
        # The launcher's own status: the runner could not be started at all, and retrying changes nothing.
        return Outcome(
            "fail",
            failure=Failure("runner_unavailable", f"the runner could not be started (status 125){said}",
                            {"returncode": returncode, "stderr": tail}),
            published=False,
        )
    if returncode is not None and returncode < 0:
        message = f"the runner was killed by signal {-returncode} without publishing an outcome{said}"
    else:
        message = f"the runner exited with status {returncode} without publishing an outcome{said}"
    return Outcome(
        "fail",
        failure=Failure("runner_exit", message, {"returncode": returncode, "stderr": tail}, retryable=True),
        published=False,
    )


def stderr_tail(fs: Filesystem, control: str, limit: int = 400) -> str:
    """The last non-empty lines of an attempt's stderr.log (at most ``limit`` characters), for the failure."""
    path = f"{control}/stderr.log"
    info = fs.lstat(path)
    if info is None or not info.is_file or not info.size:
        return ""  # a runner may have replaced its log with a link or a FIFO: nothing to quote then
    start = max(0, info.size - 4096)
    try:
        text = fs.read_range(path, start, 4096).decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(lines[-3:])
    return tail[-limit:]


def _parse_ready(fs: Filesystem, ready: str) -> Outcome:
    name = f"{ready}/outcome.json"
    record = codec.read(fs.read_document(name), OutcomeDocument, name)
    spawned = _read_spawn(fs, ready)
    transaction = _read_transaction(fs, ready)
    join = None
    if record.action == "wait":
        assert record.join is not None  # the record requires it
        join = _join(name, record.join, {child["label"] for child in spawned})
    priority = record.priority if record.action == "advance" else None
    return Outcome(
        record.action,
        step=record.next_step if record.action == "advance" else None,
        priority=priority,
        join=join,
        failure=record.failure if record.action == "fail" else None,
        reason=(record.reason or "") if record.action in ("retry", "pause") else None,
        runner_steps=tuple(sorted(record.runner_steps)) if record.runner_steps is not None else None,
        spawned=tuple(spawned),
        transaction=tuple(transaction),
    )


def _join(name: str, record: JoinDocument, labels: set[str]) -> WaitRequest:
    """The join the outcome asks for, checked against the labels it spawned."""
    children = list(record.children or ())
    for label in children:
        if label not in labels:
            raise codec.DocumentError(name, "$.join.children", f"label {label!r} was not spawned by this attempt")
    # The SDK's gather rule, now that the children are known: a stored join must never be
    # one the waiting pass cannot evaluate (that would wedge the job, and every manager with it).
    try:
        check_join_condition(record.when, record.count, children=len(children) or len(labels))
    except ValidationError as error:
        raise codec.DocumentError(name, "$.join", str(error)) from None
    return WaitRequest(step=record.step, when=record.when, count=record.count,
                       on_impossible=record.on_impossible, labels=tuple(children))


def _read_spawn(fs: Filesystem, ready: str) -> list[dict[str, Any]]:
    name = f"{ready}/children/spawn.json"
    if not fs.exists(name):
        return []
    record = codec.read(fs.read_document(name), SpawnDocument, name)
    for child in record.children:
        # The payload must be in the outcome; a crash-recovering commit may already have moved it
        # into place, which plan_children checks against the workspace instead.
        if fs.exists(f"{ready}/children/{child.payload}"):
            job_file = f"{ready}/children/{child.payload}/job.json"
            parse_job_bytes(fs.read_document(job_file), job_file)
    return [codec.unstructure(child) for child in record.children]


def _read_transaction(fs: Filesystem, ready: str) -> list[dict[str, Any]]:
    name = f"{ready}/transaction/manifest.json"
    if not fs.exists(name):
        return []
    record = codec.read(fs.read_document(name), TransactionDocument, name)
    return [codec.unstructure(operation) for operation in record.operations]
