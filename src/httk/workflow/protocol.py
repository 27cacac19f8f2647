"""On-disk documents shared by the manager and the SDKs: job.json and digests.

``JobSpec`` is the complete member set of a job definition; ``job.json`` is its
canonical JSON and is immutable once written. Parsing validates every member and
names the one that is wrong (``job.json @ $.retry_policy.maximum_total_attempts:
expected int, got string``); an unknown member is refused at every level (a
misspelt ``data.mdoe`` would otherwise make a job silently non-transactional), and
a priority outside the 64-bit range every marker name can carry is refused.
Spec: 000 "Submit a job", 001 "Spawning children"; docs/workflow_filesystem_api.md
"Payloads".
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from . import codec
from .domain.model import (
    DATA_MODES,
    DEFAULT_EXECUTOR,
    DEFAULT_POOL,
    WORKDIR_MODES,
    RetryPolicy,
    ValidationError,
    check_priority,
    check_step,
    check_tag,
)

if TYPE_CHECKING:
    from .ports import Filesystem

JOB_FORMAT = "httk-workflow-job"
RUNNER_SOURCES = ("payload", "workspace", "installed")
PRIVATE_DIR = ".httk-job"
JOB_FILE = "job.json"
_SHA256_HEX = frozenset("0123456789abcdef")


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class JobSpec:
    """The complete member set of a job definition."""

    name: str
    workflow: str
    runner_path: str
    runner_source: str = "payload"
    runner_sha256: str | None = None
    initial_step: str = "main"
    inputs: dict[str, Any] = attrs.field(factory=dict)
    priority: int = 0
    pool: str = DEFAULT_POOL
    capabilities: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    executor: str = DEFAULT_EXECUTOR
    workdir_mode: str = "persistent"
    data_mode: str = "none"
    maximum_attempts_per_activation: int | None = 3
    maximum_total_attempts: int | None = None
    maximum_activations: int | None = None
    retry_on: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    resources: dict[str, Any] = attrs.field(factory=dict)
    declarations: dict[str, Any] = attrs.field(factory=dict)
    tag: str | None = None

    @property
    def runner(self) -> dict[str, Any]:
        return {"source": self.runner_source, "path": self.runner_path, "sha256": self.runner_sha256}

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            maximum_attempts_per_activation=self.maximum_attempts_per_activation,
            maximum_total_attempts=self.maximum_total_attempts,
            maximum_activations=self.maximum_activations,
            retry_on=self.retry_on,
        )

    def to_document(self) -> dict[str, Any]:
        """The canonical ``job.json`` object."""
        document = {
            "format": JOB_FORMAT,
            "format_version": 1,
            "name": self.name,
            "workflow": self.workflow,
            "runner": self.runner,
            "initial_step": self.initial_step,
            "inputs": self.inputs,
            "priority": self.priority,
            "executor": self.executor,
            "claim": {"pool": self.pool, "capabilities": sorted(self.capabilities)},
            "workdir": {"mode": self.workdir_mode},
            "data": {"mode": self.data_mode},
            "retry_policy": {
                "maximum_attempts_per_activation": self.maximum_attempts_per_activation,
                "maximum_total_attempts": self.maximum_total_attempts,
                "maximum_activations": self.maximum_activations,
                "retry_on": list(self.retry_on),
            },
            "resources": self.resources,
            "declarations": self.declarations,
            "tag": self.tag,
        }
        validate_job_document(document, "job.json")
        return document

    def to_bytes(self) -> bytes:
        return codec.encode(self.to_document())


_TOP_MEMBERS = frozenset(
    {
        "format",
        "format_version",
        "name",
        "workflow",
        "runner",
        "initial_step",
        "inputs",
        "priority",
        "executor",
        "claim",
        "workdir",
        "data",
        "retry_policy",
        "resources",
        "declarations",
        "tag",
    }
)


def validate_job_document(document: Any, name: str = "job.json") -> JobSpec:
    """Validate a parsed job.json and return its :class:`JobSpec`; errors name the member."""
    check = codec.Checked(name)
    if not isinstance(document, dict):
        raise check.fail("$", "expected an object")
    for key in sorted(document):
        if key not in _TOP_MEMBERS:
            raise check.fail(f"$.{key}", "unknown member")
    if document.get("format") != JOB_FORMAT:
        raise check.fail("$.format", f"expected {JOB_FORMAT!r}")
    if document.get("format_version") != 1:
        raise check.fail("$.format_version", "expected 1")
    job_name = check.string(document, "name", "$")
    workflow = check.string(document, "workflow", "$")
    runner = check.obj(document, "runner", "$")
    source = check.string(runner, "source", "$.runner")
    if source not in RUNNER_SOURCES:
        raise check.fail("$.runner.source", f"expected one of {', '.join(RUNNER_SOURCES)}")
    runner_path = check.string(runner, "path", "$.runner")
    assert runner_path is not None and source is not None
    _check_relative(check, runner_path, "$.runner.path")
    sha = check.string(runner, "sha256", "$.runner", optional=True)
    if sha is not None and (len(sha) != 64 or not set(sha) <= _SHA256_HEX):
        raise check.fail("$.runner.sha256", "expected 64 lowercase hex digits")
    if sha is None and source != "payload":
        raise check.fail("$.runner.sha256", f"a {source} runner must be pinned by its sha256")
    extra = set(runner) - {"source", "path", "sha256"}
    if extra:
        raise check.fail(f"$.runner.{sorted(extra)[0]}", "unknown member")
    step = check.string(document, "initial_step", "$")
    try:
        check_step(step or "")
    except ValidationError as error:
        raise check.fail("$.initial_step", str(error)) from None
    inputs = check.obj(document, "inputs", "$", optional=True)
    priority = check.integer(document, "priority", "$", optional=True) or 0
    try:
        check_priority(priority)  # the marker name carries it: the same bound every marker parser applies
    except ValidationError as error:
        raise check.fail("$.priority", str(error)) from None
    executor = check.string(document, "executor", "$", optional=True) or DEFAULT_EXECUTOR
    claim = check.obj(document, "claim", "$", optional=True)
    _refuse_unknown(check, claim, "$.claim", {"pool", "capabilities"})
    pool = check.string(claim, "pool", "$.claim", optional=True) or DEFAULT_POOL
    capabilities = check.strings(claim, "capabilities", "$.claim")
    workdir = check.obj(document, "workdir", "$", optional=True)
    _refuse_unknown(check, workdir, "$.workdir", {"mode"})
    workdir_mode = check.string(workdir, "mode", "$.workdir", optional=True) or "persistent"
    if workdir_mode not in WORKDIR_MODES:
        raise check.fail("$.workdir.mode", f"expected one of {', '.join(WORKDIR_MODES)}")
    data = check.obj(document, "data", "$", optional=True)
    _refuse_unknown(check, data, "$.data", {"mode"})
    data_mode = check.string(data, "mode", "$.data", optional=True) or "none"
    if data_mode not in DATA_MODES:
        raise check.fail("$.data.mode", f"expected one of {', '.join(DATA_MODES)}")
    policy = check.obj(document, "retry_policy", "$", optional=True)
    limits: dict[str, int | None] = {}
    for key in ("maximum_attempts_per_activation", "maximum_total_attempts", "maximum_activations"):
        if key in policy and policy[key] is None:
            limits[key] = None
            continue
        if key not in policy:
            limits[key] = 3 if key == "maximum_attempts_per_activation" else None
            continue
        value = check.integer(policy, key, "$.retry_policy")
        if value is not None and value < 1:
            raise check.fail(f"$.retry_policy.{key}", "expected an int >= 1 or null")
        limits[key] = value
    retry_on = check.strings(policy, "retry_on", "$.retry_policy")
    extra = set(policy) - {*limits, "retry_on"}
    if extra:
        raise check.fail(f"$.retry_policy.{sorted(extra)[0]}", "unknown member")
    resources = check.obj(document, "resources", "$", optional=True)
    declarations = check.obj(document, "declarations", "$", optional=True)
    tag = check.string(document, "tag", "$", optional=True)
    if tag is not None:
        try:
            check_tag(tag)
        except ValidationError as error:
            raise check.fail("$.tag", str(error)) from None
    return JobSpec(
        name=job_name or "",
        workflow=workflow or "",
        runner_path=runner_path,
        runner_source=source,
        runner_sha256=sha,
        initial_step=step or "",
        inputs=inputs,
        priority=priority,
        pool=pool,
        capabilities=tuple(capabilities),
        executor=executor,
        workdir_mode=workdir_mode,
        data_mode=data_mode,
        maximum_attempts_per_activation=limits["maximum_attempts_per_activation"],
        maximum_total_attempts=limits["maximum_total_attempts"],
        maximum_activations=limits["maximum_activations"],
        retry_on=tuple(retry_on),
        resources=resources,
        declarations=declarations,
        tag=tag,
    )


def parse_job_bytes(data: bytes, name: str = "job.json") -> JobSpec:
    return validate_job_document(codec.decode(data, name), name)


def _refuse_unknown(check: codec.Checked, value: dict[str, Any], member: str, known: set[str]) -> None:
    """Refuse the first (sorted) member of the object at ``member`` that is not in ``known``."""
    extra = sorted(set(value) - known)
    if extra:
        raise check.fail(f"{member}.{extra[0]}", f"unknown member; known: {', '.join(sorted(known))}")


def _check_relative(check: codec.Checked, path: str, member: str) -> None:
    if not path or path.startswith("/") or any(part == ".." for part in path.split("/")):
        raise check.fail(member, "expected a relative path without '..'")


def prepare_job_payload(
    directory: str | os.PathLike[str], spec: JobSpec, *, durable: bool = True
) -> Path:
    """Write ``job.json`` for ``spec`` into ``directory`` (created if needed) and return the directory.

    ``job.json`` is immutable: rewriting identical bytes is a no-op and different
    bytes are refused.
    """
    target = Path(directory).absolute()
    data = spec.to_bytes()
    job_file = target / JOB_FILE
    if job_file.exists():
        if job_file.read_bytes() == data:
            return target
        raise FileExistsError(f"{job_file}: a different job.json already exists; job.json is immutable")
    # Imported here: the manager imports this module for JobSpec and must not load an adapter through it.
    from .adapters.fs_posix import PosixFilesystem

    # The publication creates the directory too, synced when durable.
    PosixFilesystem().write_atomic(os.fspath(job_file), data, durable=durable)
    return target


def file_digest(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_digest(path: str | os.PathLike[str]) -> str:
    """The digest of a file (its bytes) or of a directory (its sorted listing, without .httk-job/)."""
    root = Path(path)
    if not root.is_dir() or root.is_symlink():
        return file_digest(root)
    lines: list[str] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(name for name in dirs if not (current == os.fspath(root) and name == PRIVATE_DIR))
        relative_dir = os.path.relpath(current, root)
        for name in list(dirs):
            full = os.path.join(current, name)
            rel = os.path.normpath(os.path.join(relative_dir, name))
            if os.path.islink(full):
                lines.append(f"L {rel} {os.readlink(full)}\n")
                dirs.remove(name)
            else:
                lines.append(f"D {rel}\n")
        for name in sorted(files):
            full = os.path.join(current, name)
            rel = os.path.normpath(os.path.join(relative_dir, name))
            if os.path.islink(full):
                lines.append(f"L {rel} {os.readlink(full)}\n")
            else:
                executable = "x" if os.lstat(full).st_mode & 0o111 else "-"
                lines.append(f"F {rel} {executable} {file_digest(full)}\n")
    lines.sort(key=lambda line: line[2:].split(" ", 1)[0])
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


class RunLog:
    """The append-only structured run log of one workdir: ``.httk-runner/runlog.jsonl``.

    Each event is one canonical ``httk-workflow-runlog-event`` v1 line written
    with a single ``O_APPEND`` write through the filesystem port's appender, so
    concurrent appenders never interleave inside a line and a reader skips at
    most one torn last line. Spec: 001 "What
    an attempt reads" (``a.log``); 002 rows ``protocol.RunLog.append``.
    """

    FORMAT = "httk-workflow-runlog-event"
    KINDS = ("note", "headline", "files")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        base: str | os.PathLike[str] | None = None,
        step: str | None = None,
        attempt_id: str | None = None,
        durable: bool = True,
        now: Any = None,
        fs: Filesystem | None = None,
    ) -> None:
        """``base`` resolves relative file names; ``now`` is a callable returning epoch seconds.

        ``fs`` appends (the POSIX filesystem adapter by default).
        """
        self._path = Path(path)
        self._base = Path(base) if base is not None else self._path.parent.parent
        self._step = step
        self._attempt_id = attempt_id
        self._durable = durable
        if now is None:
            # The one wall clock of the package lives in the clock adapter.
            from .adapters.clock import SystemClock

            now = SystemClock().now
        self._now = now
        if fs is None:
            from .adapters.fs_posix import PosixFilesystem

            fs = PosixFilesystem()
        self._fs = fs

    @property
    def path(self) -> Path:
        return self._path

    def append(
        self,
        label: str,
        message: str,
        *,
        kind: str = "note",
        files: list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...] = (),
    ) -> dict[str, Any]:
        """Append one event and return it; ``files`` attaches each file's path, size and sha256."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"run log label must be a non-empty string, got {label!r}")
        if not isinstance(message, str):
            raise TypeError(f"run log message must be a string, got {type(message).__name__}")
        if kind not in self.KINDS:
            raise ValueError(f"invalid run log kind {kind!r}: use one of {', '.join(self.KINDS)}")
        if isinstance(files, str | os.PathLike):
            files = (files,)
        attached = [self._attachment(item) for item in files]
        if kind == "files" and not attached:
            raise ValueError("a run log event of kind 'files' needs at least one file")
        event = {
            "format": self.FORMAT,
            "format_version": 1,
            "kind": kind,
            "label": label,
            "message": message,
            "files": attached,
            "time": float(self._now()),
            "step": self._step,
            "attempt_id": self._attempt_id,
        }
        # Creates the file and its directories when missing; the first sync makes their names durable too.
        appender = self._fs.open_appender(os.path.abspath(self._path))
        try:
            appender.append(codec.encode(event))
            if self._durable:
                appender.sync()
        finally:
            appender.close()
        return event

    def read(self) -> list[dict[str, Any]]:
        """Every complete event, oldest first; a torn last line (no newline) is skipped."""
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return []
        events: list[dict[str, Any]] = []
        for number, raw in enumerate(data.split(b"\n")[:-1], start=1):
            if raw.strip():
                events.append(codec.decode_object(raw, f"{self._path}:{number}"))
        return events

    def _attachment(self, item: str | os.PathLike[str]) -> dict[str, Any]:
        path = Path(item)
        if not path.is_absolute():
            path = self._base / path
        if not path.is_file():
            raise FileNotFoundError(f"run log attachment {os.fspath(item)!r} is not a file ({path})")
        try:
            name = path.relative_to(self._base).as_posix()
        except ValueError:
            name = path.as_posix()
        return {"path": name, "size": path.stat().st_size, "sha256": file_digest(path)}
