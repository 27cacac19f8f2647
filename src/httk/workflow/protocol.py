"""On-disk documents shared by the manager and the SDKs: job.json, digests, the run log.

Each document is a frozen attrs record with its :class:`~httk.workflow.codec.Format`
beside it; the one converter in :mod:`.codec` structures (reads) and unstructures
(writes) it, so writer and reader share one definition. Reading names the member
that is wrong (``job.json @ $.retry_policy.maximum_total_attempts: expected int, got
string``); an unknown member is refused at every level (a misspelt ``data.mdoe``
would otherwise make a job silently non-transactional), and a priority outside the
64-bit range every marker name can carry is refused. ``JobSpec`` is the complete
member set of a job definition (:class:`JobDocument` is its on-disk form);
``job.json`` is its canonical JSON and is immutable once written. What one attempt
exchanges with its manager is in :mod:`.attempt_records`. Spec: 000 "Submit a
job", 001 "Spawning children"; docs/workflow_filesystem_api.md "Payloads".
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

import attrs

from . import codec
from .domain.model import (
    DATA_MODES,
    DEFAULT_EXECUTOR,
    DEFAULT_POOL,
    WORKDIR_MODES,
    RetryPolicy,
    check_priority,
    check_step,
    check_tag,
)

if TYPE_CHECKING:
    from .ports import Filesystem

RUNNER_SOURCES = ("payload", "workspace", "installed")
PRIVATE_DIR = ".httk-job"
JOB_FILE = "job.json"
_SHA256_HEX = frozenset("0123456789abcdef")
T = TypeVar("T")


#: The on-disk records: frozen, compared and shown only as the documents they make. Without the
#: generated ``__eq__``/``__repr__`` and slots a record costs a fifth of the class-creation time,
#: which every runner start pays for each of them.
document_record = attrs.frozen(slots=False, eq=False, repr=False)


def keyword_synonyms(**synonyms: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: each ``synonym=primary`` keyword is accepted for ``primary`` in the constructor.

    One implementation: the synonym is renamed before the class's own ``__init__`` runs, so
    the instance has only the primary member. Giving both at once is a ``TypeError`` naming both.
    Used for the httk-workflow 2.1 spellings (``parameters=`` for ``inputs=``; docs/sdks/sdk_parity.md).
    """

    def decorate(cls: type[T]) -> type[T]:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            for synonym, primary in synonyms.items():
                if synonym in kwargs:
                    if primary in kwargs:
                        raise TypeError(
                            f"{cls.__name__}() got both {primary}= and its synonym {synonym}=: give one of them"
                        )
                    kwargs[primary] = kwargs.pop(synonym)
            init(self, *args, **kwargs)

        cls.__init__ = __init__  # type: ignore[misc]
        return cls

    return decorate


def one_of(choices: tuple[str, ...]) -> Callable[[str], None]:
    """A member check (``Annotated[str, one_of(...)]``) naming the choices."""

    def check(value: str) -> None:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")

    return check


def _relative(path: str) -> None:
    if not path or path.startswith("/") or any(part == ".." for part in path.split("/")):
        raise ValueError("expected a relative path without '..'")


def _sha256(value: str) -> None:
    if len(value) != 64 or not set(value) <= _SHA256_HEX:
        raise ValueError("expected 64 lowercase hex digits")


def _budget(value: int) -> None:
    if value < 1:
        raise ValueError("expected an int >= 1 or null")


# --------------------------------------------------------------------------- job.json


@document_record
class RunnerDocument:
    """``job.json`` ``runner``: where the runner comes from; a shared runner is pinned by digest."""

    source: Annotated[str, one_of(RUNNER_SOURCES)]
    path: Annotated[str, _relative]
    sha256: Annotated[str, _sha256] | None = None

    def __attrs_post_init__(self) -> None:
        if self.sha256 is None and self.source != "payload":
            raise codec.Problem(f"a {self.source} runner must be pinned by its sha256", "sha256")


@document_record
class ClaimDocument:
    """``job.json`` ``claim``: what a manager must offer to claim the job (null: the default)."""

    pool: str | None = None
    capabilities: tuple[str, ...] | None = None


@document_record
class WorkdirDocument:
    mode: Annotated[str, one_of(WORKDIR_MODES)] | None = None


@document_record
class DataDocument:
    mode: Annotated[str, one_of(DATA_MODES)] | None = None


@document_record
class RetryPolicyDocument:
    """``job.json`` ``retry_policy``: a missing budget takes its default, a null one is unlimited."""

    maximum_attempts_per_activation: Annotated[int, _budget] | None = 3
    maximum_total_attempts: Annotated[int, _budget] | None = None
    maximum_activations: Annotated[int, _budget] | None = None
    retry_on: tuple[str, ...] | None = None


@document_record
class JobDocument:
    """``job.json`` as it is on disk (``httk-workflow-job`` v1); :class:`JobSpec` is its flat form.

    A null optional member means its default, as an absent one does.
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-job", 1)

    name: str
    workflow: str
    runner: RunnerDocument
    initial_step: Annotated[str, check_step]
    inputs: dict[str, Any] | None = None
    priority: Annotated[int, check_priority] | None = None
    executor: str | None = None
    claim: ClaimDocument | None = None
    workdir: WorkdirDocument | None = None
    data: DataDocument | None = None
    retry_policy: RetryPolicyDocument | None = None
    resources: dict[str, Any] | None = None
    declarations: dict[str, Any] | None = None
    tag: Annotated[str, check_tag] | None = None


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    return tuple(value)


@keyword_synonyms(parameters="inputs")
@attrs.frozen
class JobSpec:
    """The complete member set of a job definition (``parameters=`` is also accepted for ``inputs=``)."""

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

    @classmethod
    def from_record(cls, record: JobDocument) -> JobSpec:
        """The flat definition of a structured ``job.json``: null and absent members take their defaults."""
        claim = record.claim or ClaimDocument()
        policy = record.retry_policy or RetryPolicyDocument()
        return cls(
            name=record.name,
            workflow=record.workflow,
            runner_path=record.runner.path,
            runner_source=record.runner.source,
            runner_sha256=record.runner.sha256,
            initial_step=record.initial_step,
            inputs=record.inputs or {},
            priority=record.priority or 0,
            pool=claim.pool or DEFAULT_POOL,
            capabilities=claim.capabilities or (),
            executor=record.executor or DEFAULT_EXECUTOR,
            workdir_mode=(record.workdir or WorkdirDocument()).mode or "persistent",
            data_mode=(record.data or DataDocument()).mode or "none",
            maximum_attempts_per_activation=policy.maximum_attempts_per_activation,
            maximum_total_attempts=policy.maximum_total_attempts,
            maximum_activations=policy.maximum_activations,
            retry_on=policy.retry_on or (),
            resources=record.resources or {},
            declarations=record.declarations or {},
            tag=record.tag,
        )

    def to_record(self) -> JobDocument:
        """The on-disk record; every member is written, capabilities sorted."""
        return JobDocument(
            name=self.name,
            workflow=self.workflow,
            runner=RunnerDocument(self.runner_source, self.runner_path, self.runner_sha256),
            initial_step=self.initial_step,
            inputs=self.inputs,
            priority=self.priority,
            executor=self.executor,
            claim=ClaimDocument(self.pool, tuple(sorted(self.capabilities))),
            workdir=WorkdirDocument(self.workdir_mode),
            data=DataDocument(self.data_mode),
            retry_policy=RetryPolicyDocument(
                self.maximum_attempts_per_activation,
                self.maximum_total_attempts,
                self.maximum_activations,
                self.retry_on,
            ),
            resources=self.resources,
            declarations=self.declarations,
            tag=self.tag,
        )

    def to_document(self) -> dict[str, Any]:
        """The canonical ``job.json`` object; refused (``DocumentError``) as a reader would refuse it."""
        try:
            document = codec.unstructure(self.to_record())
        except codec.Problem as error:  # a rule of a nested record (the runner's pin), not a JSON shape
            raise codec.DocumentError(JOB_FILE, f"$.runner.{error.member}", str(error)) from None
        # Structured as a reader structures it; the JobSpec a reader would make from that is this one.
        codec.structure(document, JobDocument, JOB_FILE)
        return document

    def to_bytes(self) -> bytes:
        return codec.encode(self.to_document())


def validate_job_document(document: Any, name: str = JOB_FILE) -> JobSpec:
    """Structure a parsed job.json and return its :class:`JobSpec`; errors name the member."""
    return JobSpec.from_record(codec.structure(document, JobDocument, name))


def parse_job_bytes(data: bytes, name: str = JOB_FILE) -> JobSpec:
    return validate_job_document(codec.decode(data, name), name)


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


def prepare_job_payloads(
    items: Iterable[tuple[str | os.PathLike[str], JobSpec]], *, durable: bool = True
) -> list[Path]:
    """:func:`prepare_job_payload` of many ``(directory, spec)`` pairs with grouped syncs; the directories, in order.

    Every pair is checked before anything is written: a directory whose job.json (or an
    earlier pair's) differs refuses the batch with ``FileExistsError``. Durable: each new
    job.json is written beside its name, all are synced together, then renamed into
    place, and each directory (and each new directory's parent) is synced once.
    """
    from .adapters.fs_posix import PosixFilesystem

    targets: list[Path] = []
    pending: dict[str, bytes] = {}
    for directory, spec in items:
        target = Path(directory).absolute()
        targets.append(target)
        data, job_file = spec.to_bytes(), os.fspath(target / JOB_FILE)
        old = pending.get(job_file)
        if old is None and os.path.lexists(job_file):
            old = Path(job_file).read_bytes()
            if old == data:
                continue
        if old is not None and old != data:
            raise FileExistsError(f"{job_file}: a different job.json already exists; job.json is immutable")
        pending[job_file] = data
    fs = PosixFilesystem()
    directories = sorted({os.path.dirname(job_file) for job_file in pending})
    new_parents = set()
    for directory in directories:
        if not os.path.isdir(directory):
            current = directory
            while not os.path.isdir(current):
                new_parents.add(os.path.dirname(current))
                current = os.path.dirname(current)
            fs.makedirs(directory)
    if not durable:
        for job_file, data in pending.items():
            fs.write_new(job_file, data, durable=False)
        return targets
    temps = {job_file: f"{os.path.dirname(job_file)}/.{JOB_FILE}.prepare" for job_file in pending}
    for job_file, data in pending.items():
        fs.write_atomic(temps[job_file], data, durable=False)
    fs.sync_trees(list(temps.values()))
    for job_file, temp in temps.items():
        fs.rename(temp, job_file, durable=False)
    fs.fsync_dirs(sorted(new_parents.union(directories)))
    return targets


def file_digest(path: str | os.PathLike[str]) -> str:
    import hashlib  # here: OpenSSL's import is a few ms every runner start would pay for nothing

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
    import hashlib

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
    #: The label of ``httk_workflow_runlog_note MESSAGE``, the one-argument form.
    DEFAULT_LABEL = "note"

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
