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
from ..domain.model import (
    Failure,
    JobKey,
    ValidationError,
    check_join_condition,
    check_placement,
    check_priority,
    check_step,
    check_tag,
)
from ..ports import Filesystem
from ..protocol import JOB_FILE, PRIVATE_DIR, parse_job_bytes
from ..store.links import refuse_links

OUTCOME_FORMAT = "httk-workflow-outcome"
ACTIONS = ("advance", "wait", "succeed", "fail", "retry", "pause")
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
    join: dict[str, Any] | None = None
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
            error = codec.decode_object(fs.read_document(error_file), error_file)
        except (codec.DocumentError, OSError) as unreadable:
            error = {"exception": "unreadable error.json", "message": str(unreadable)}
        message = f"{error.get('exception', 'error')}: {error.get('message', '')}".strip()
        details = {key: error[key] for key in ("step", "exception", "file", "line", "command") if key in error}
        details["returncode"] = returncode
        tail = stderr_tail(fs, control)
        if tail and error.get("file"):  # Bash: the refusal that killed the handler is on stderr
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
    document = codec.decode_object(fs.read_document(name), name)
    check = codec.Checked(name)
    if document.get("format") != OUTCOME_FORMAT or document.get("format_version") != 1:
        raise check.fail("$.format", f"expected {OUTCOME_FORMAT} version 1")
    action = document.get("action")
    if action not in ACTIONS:
        raise check.fail("$.action", f"expected one of {', '.join(ACTIONS)}")
    runner_steps = document.get("runner_steps")
    if runner_steps is not None:
        if not isinstance(runner_steps, list) or not all(isinstance(step, str) for step in runner_steps):
            raise check.fail("$.runner_steps", "expected an array of strings")
        runner_steps = tuple(sorted(runner_steps))
    step = priority = join = failure = reason = None
    if action == "advance":
        try:
            step = check_step(document.get("next_step") or "")
        except ValidationError as error:
            raise check.fail("$.next_step", str(error)) from None
    if action == "wait":
        join = _parse_join(check, document.get("join"))
    if action == "fail":
        try:
            failure = Failure.from_json(document.get("failure"))
        except ValidationError as error:
            raise check.fail("$.failure", str(error)) from None
    if action in ("retry", "pause"):
        reason = check.string(document, "reason", "$", optional=True) or ""
    if action == "advance":
        priority = check.integer(document, "priority", "$", optional=True)
        if priority is not None:
            try:
                check_priority(priority)
            except ValidationError as error:
                raise check.fail("$.priority", str(error)) from None
    spawned = _read_spawn(fs, ready)
    transaction = _read_transaction(fs, ready)
    if join is not None:
        labels = {child["label"] for child in spawned}
        for label in join["children"]:
            if label not in labels:
                raise check.fail("$.join.children", f"label {label!r} was not spawned by this attempt")
        # The SDK's gather rule, now that the children are known: a stored join must never be
        # one the waiting pass cannot evaluate (that would wedge the job, and every manager with it).
        try:
            check_join_condition(join["when"], join["count"], children=len(join["children"]) or len(labels))
        except ValidationError as error:
            raise check.fail("$.join", str(error)) from None
    return Outcome(
        action,
        step=step,
        priority=priority,
        join=join,
        failure=failure,
        reason=reason,
        runner_steps=runner_steps,
        spawned=tuple(spawned),
        transaction=tuple(transaction),
    )


def _parse_join(check: codec.Checked, join: Any) -> dict[str, Any]:
    if not isinstance(join, dict):
        raise check.fail("$.join", "expected an object")
    extra = set(join) - {"step", "when", "count", "on_impossible", "children"}
    if extra:
        raise check.fail(f"$.join.{sorted(extra)[0]}", "unknown member")
    when = join.get("when", "all_succeeded")
    count = join.get("count")
    try:
        step = check_step(check.string(join, "step", "$.join") or "")
        on_impossible = join.get("on_impossible")
        if on_impossible is not None:
            check_step(on_impossible)
        check_join_condition(when, count)
    except ValidationError as error:
        raise check.fail("$.join", str(error)) from None
    children = check.strings(join, "children", "$.join")
    if len(set(children)) != len(children):
        raise check.fail("$.join.children", "a label is listed twice")
    return {"step": step, "when": when, "count": count, "on_impossible": on_impossible, "children": children}


def _read_spawn(fs: Filesystem, ready: str) -> list[dict[str, Any]]:
    name = f"{ready}/children/spawn.json"
    if not fs.exists(name):
        return []
    document = codec.decode_object(fs.read_document(name), name)
    check = codec.Checked(name)
    children = document.get("children")
    if not isinstance(children, list):
        raise check.fail("$.children", "expected an array")
    seen: set[str] = set()
    out = []
    for index, child in enumerate(children):
        path = f"$.children[{index}]"
        if not isinstance(child, dict):
            raise check.fail(path, "expected an object")
        label = check_tag(check.string(child, "label", path) or "", "label")
        if label in seen:
            raise check.fail(f"{path}.label", f"duplicate label {label!r}")
        seen.add(label)
        job_key = check.string(child, "job_key", path) or ""
        try:
            key = JobKey.parse(job_key)
            placement = check_placement(check.string(child, "placement", path) or "")
        except ValidationError as error:
            raise check.fail(path, str(error)) from None
        if check.string(child, "job_id", path) != key.job_id:
            raise check.fail(f"{path}.job_id", "does not match the uuid of job_key")
        payload = check.string(child, "payload", path)
        if payload != f"jobs/{job_key}":
            raise check.fail(f"{path}.payload", f"expected jobs/{job_key}")
        # The payload must be in the outcome; a crash-recovering commit may already have moved it
        # into place, which plan_children checks against the workspace instead.
        if fs.exists(f"{ready}/children/{payload}"):
            job_file = f"{ready}/children/{payload}/job.json"
            parse_job_bytes(fs.read_document(job_file), job_file)
        out.append({"label": label, "job_id": key.job_id, "job_key": job_key, "placement": placement,
                    "payload": payload})
    return out


def _read_transaction(fs: Filesystem, ready: str) -> list[dict[str, Any]]:
    name = f"{ready}/transaction/manifest.json"
    if not fs.exists(name):
        return []
    document = codec.decode_object(fs.read_document(name), name)
    operations = document.get("operations")
    if not isinstance(operations, list):
        raise codec.DocumentError(name, "$.operations", "expected an array")
    if not all(isinstance(operation, dict) for operation in operations):
        raise codec.DocumentError(name, "$.operations", "expected an array of objects")
    return [dict(operation) for operation in operations]
