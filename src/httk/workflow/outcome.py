"""The two things an attempt writes that must appear all at once: its outcome and its workdir batches.

Owns :class:`OutcomeDraft` — the implicit ``outcome.tmp.<uuid>/`` below the
attempt control directory that ``spawn``/``put``/``remove`` fill and one terminal
call publishes by renaming it to ``outcome.ready/`` — and :class:`WorkdirBatch`,
a group of workdir changes sealed under ``.httk-runner/workdir-ready/<uuid>/``
and then applied op by op with a progress record, so a replay after any
interruption finishes the batch instead of repeating or skipping an op.

Invariants: nothing of a draft is visible until the single rename; the draft is
synced first when the workspace is durable; an existing ``outcome.ready/`` is
never replaced. Every publication goes through the filesystem port (the POSIX
adapter unless one is passed), so the runner writes exactly as the manager does:
temp, fsync, rename without replacing, fsync of the directories, created parents
included. Spec: 001 "What an attempt publishes", "Data and workdir
changes"; docs/workflow_filesystem_api.md "The outcome".
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from . import codec
from .adapters.attempt_lock import AttemptLock
from .adapters.fs_posix import PosixFilesystem
from .attempt_records import (
    RunnerErrorDocument,
    SpawnDocument,
    SpawnEntry,
    TransactionDocument,
    TransactionOperation,
    WorkdirBatchDocument,
    WorkdirOperation,
)
from .domain.model import control_character
from .protocol import JOB_FILE, PRIVATE_DIR, JobSpec, parse_job_bytes
from .runtime import ChildSpec

if TYPE_CHECKING:
    from .ports import Filesystem

T = TypeVar("T")

READY = "outcome.ready"
DRAFT_PREFIX = "outcome.tmp."
RUNNER_DIR = ".httk-runner"
RUNNER_STEPS_FILE = "runner-steps.json"


def check_relative(path: str | os.PathLike[str], what: str) -> str:
    """Normalise a relative POSIX path; refuse absolute paths, ``..``, the empty path and control characters."""
    text = os.fspath(path)
    if not isinstance(text, str) or not text or text.startswith("/"):
        raise ValueError(f"{what} {text!r} must be a relative path")
    bad = control_character(text)
    if bad is not None:
        # The manager refuses such a path too; refusing it here names the call that made it.
        raise ValueError(f"{what} {text!r} contains the control character {bad!r}; use a plain relative path")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not parts or any(part == ".." for part in parts):
        raise ValueError(f"{what} {text!r} must be a relative path without '..'")
    return "/".join(parts)


def _copy(source: Path, destination: Path) -> None:
    """Copy a file (following a top-level link) or a tree (keeping links inside it)."""
    if source.is_dir():
        shutil.copytree(source, destination, symlinks=True)
    elif source.is_file():
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    else:
        raise FileNotFoundError(f"{source}: no such file or directory to stage")


def write_error(control: Path, error: RunnerErrorDocument, *, durable: bool, fs: Filesystem | None = None) -> Path:
    """Publish ``error.json`` (``httk-workflow-runner-error`` v1) in the control directory."""
    path = control / "error.json"
    data = codec.encode(codec.unstructure(error))
    (fs if fs is not None else PosixFilesystem()).write_atomic(os.fspath(path), data, durable=durable)
    return path


def record_runner_steps(
    payload: Path, workflow: str, steps: frozenset[str] | set[str], *, durable: bool, fs: Filesystem | None = None
) -> bool:
    """Write ``.httk-job/runner-steps.json`` unless it already holds these bytes; report whether it wrote."""
    data = codec.encode({"steps": sorted(steps), "workflow": workflow})
    path = payload / PRIVATE_DIR / RUNNER_STEPS_FILE
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    (fs if fs is not None else PosixFilesystem()).write_atomic(os.fspath(path), data, durable=durable)
    return True


def child_job_spec(parent: JobSpec, child: ChildSpec, label: str) -> JobSpec:
    """The complete job definition of a synthesized child: unset members follow ``parent``.

    Inherited: workflow, pool, capabilities, executor, priority, resources,
    workdir and data modes, and (with ``RunnerRef.inherit()``) the runner. The
    tag is the label; budgets the ChildSpec leaves unset take the job defaults.
    """
    if child.runner.inherits:
        if parent.runner_source == "payload":
            raise ValueError(
                "a ChildSpec cannot inherit a payload runner: a synthesized child has no payload to copy "
                "it into. Publish the runner with Workspace.publish_runner (or `httk workflow runner "
                "publish`) and reference it, or spawn a prepared payload directory instead"
            )
        source, path, sha256 = parent.runner_source, parent.runner_path, parent.runner_sha256
    else:
        source, path, sha256 = child.runner.source, child.runner.path or "", child.runner.sha256
    budgets = {
        key: value
        for key, value in (
            ("maximum_attempts_per_activation", child.maximum_attempts_per_activation),
            ("maximum_total_attempts", child.maximum_total_attempts),
            ("maximum_activations", child.maximum_activations),
        )
        if value is not None
    }
    return JobSpec(
        name=child.name if child.name is not None else f"{parent.name}/{label}",
        workflow=parent.workflow,
        runner_path=path,
        runner_source=source,
        runner_sha256=sha256,
        initial_step=child.step,
        inputs=dict(child.inputs or {}),
        priority=parent.priority if child.priority is None else child.priority,
        pool=parent.pool,
        capabilities=parent.capabilities,
        executor=parent.executor,
        workdir_mode=child.workdir_mode or parent.workdir_mode,
        data_mode=child.data_mode or parent.data_mode,
        retry_on=tuple(child.retry_on or ()),
        resources=dict(parent.resources),
        tag=label,
        **budgets,
    )


def ignore_private(root: Path) -> Callable[[str, list[str]], list[str]]:
    """A copytree filter dropping only the payload's own top-level ``.httk-job/``."""

    def ignore(directory: str, names: list[str]) -> list[str]:
        return [PRIVATE_DIR] if Path(directory) == root and PRIVATE_DIR in names else []

    return ignore


def job_file_filler(data: bytes) -> Callable[[Path], None]:
    """What creates a synthesized child's payload directory: ``job.json`` holding ``data``."""

    def fill(directory: Path) -> None:
        directory.mkdir()
        (directory / JOB_FILE).write_bytes(data)

    return fill


def payload_filler(source: Path) -> Callable[[Path], None]:
    """What copies the prepared payload ``source`` (checked now: its ``job.json`` must parse), minus ``.httk-job/``."""
    job_file = source / JOB_FILE
    if not job_file.is_file():
        raise ValueError(f"spawn(): {source} is not a prepared payload directory (no {JOB_FILE})")
    parse_job_bytes(job_file.read_bytes(), os.fspath(job_file))

    def fill(directory: Path) -> None:
        shutil.copytree(source, directory, symlinks=True, ignore=ignore_private(source))

    return fill


class OutcomeDraft:
    """The implicit draft of one attempt; created on first use, published or discarded once.

    Every change of the draft runs under the attempt's :class:`~.adapters.attempt_lock.AttemptLock`.
    A draft several processes continue (the Bash bridge, :meth:`resume`) is re-read from disk
    under that lock before each change, so concurrent bridge calls (``httk_workflow_spawn ... &``)
    each add to the latest version and none is lost.
    """

    def __init__(
        self,
        control: Path,
        *,
        durable: bool,
        new_id: Callable[[], str],
        fs: Filesystem | None = None,
        lock: AttemptLock | None = None,
    ) -> None:
        self._control = control
        self._durable = durable
        self._new_id = new_id
        self._fs = fs if fs is not None else PosixFilesystem()
        self._lock = lock if lock is not None else AttemptLock.for_control(control)
        self._directory: Path | None = None
        self._published = False
        self.children: list[dict[str, Any]] = []
        self.operations: list[dict[str, Any]] = []
        self._label_set: set[str] = set()  # the labels of ``children``, kept beside them (no rescans)
        #: ``spawn.json`` is behind ``children``: written once, at publication. A draft that another
        #: process continues (the Bash bridge, :meth:`resume`) is rewritten at every spawn instead.
        self._spawn_unwritten = False
        self._shared = False
        self._lock_depth = 0

    @property
    def directory(self) -> Path | None:
        return self._directory

    @property
    def ready(self) -> Path:
        return self._control / READY

    @property
    def published(self) -> bool:
        return self._published or self._fs.exists(os.fspath(self.ready))

    @property
    def labels(self) -> list[str]:
        """The labels of the children spawned so far, in spawn order."""
        return [str(child["label"]) for child in self.children]

    def check_open(self) -> None:
        """Refuse any further contribution once an outcome exists."""
        if self.published:
            raise RuntimeError(
                f"this attempt already published its outcome ({self.ready}); a step publishes exactly one"
            )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the attempt lock; a shared draft is first re-read, so the block sees its latest version.

        A draft no other process continues (a Python runner's, never resumed) is not read back, but it
        takes the lock all the same: both SDKs then leave the same files behind (spec 002).
        """
        with self._lock.held():
            outermost = self._lock_depth == 0
            self._lock_depth += 1
            try:
                if self._shared and outermost:
                    self._reload()
                yield
            finally:
                self._lock_depth -= 1

    def resume(self) -> list[dict[str, Any]]:
        """Adopt the one unpublished draft an earlier process of this attempt left; returns its children.

        The Bash bridge builds one draft across many processes, so a new process
        continues the existing ``outcome.tmp.*`` (its children and staged operations)
        instead of starting another.
        """
        # A draft one process continues may be continued by the next: keep spawn.json whole throughout.
        self._shared = True
        with self.locked():
            return self.children

    def _reload(self) -> None:
        """Read the draft of the control directory (none, or exactly one) into this object."""
        drafts = sorted(path for path in self._control.glob(f"{DRAFT_PREFIX}*") if path.is_dir())
        if len(drafts) > 1:
            names = ", ".join(path.name for path in drafts)
            raise RuntimeError(f"{self._control} holds more than one unpublished draft ({names}); refusing to guess")
        self._directory = drafts[0] if drafts else None
        self.children, self.operations, self._label_set = [], [], set()
        if self._directory is None:
            return
        spawn = self._directory / "children" / "spawn.json"
        manifest = self._directory / "transaction" / "manifest.json"
        if spawn.is_file():
            self.children = [codec.unstructure(child) for child in _read(spawn, SpawnDocument).children]
            self._label_set = {str(child["label"]) for child in self.children}
        if manifest.is_file():
            self.operations = [codec.unstructure(op) for op in _read(manifest, TransactionDocument).operations]

    def ensure(self) -> Path:
        with self.locked():
            self.check_open()
            if self._directory is None:
                directory = self._control / f"{DRAFT_PREFIX}{self._new_id()}"
                directory.mkdir()
                self._directory = directory
            return self._directory

    def add_child(self, entry: dict[str, Any], fill: Callable[[Path], None]) -> None:
        """Create ``children/jobs/<job-key>/`` with ``fill`` and record ``entry`` in ``spawn.json``.

        A label already in the draft is refused (``ValueError``): labels are unique per attempt.
        """
        with self.locked():
            draft = self.ensure()
            if entry["label"] in self._label_set:
                raise ValueError(f"child label {entry['label']!r} is already used on this attempt; labels are unique")
            payload = draft / "children" / entry["payload"]
            payload.parent.mkdir(parents=True, exist_ok=True)
            try:
                fill(payload)
            except BaseException:
                shutil.rmtree(payload, ignore_errors=True)
                raise
            # Only the new child is structured (checked): the kept ones were when they were added (or
            # read back by resume), and the caller keeps labels unique. Structuring every child again
            # at each spawn made a fan-out quadratic: 2,000 spawns took 70 s, 20,000 would take hours.
            self.children.append(codec.unstructure(SpawnEntry(**entry)))
            self._label_set.add(entry["label"])
            # Rewriting the whole file at each spawn made a fan-out quadratic in bytes too; one process's
            # draft writes it once, at publication, a shared one (the Bash bridge's) after every spawn.
            self._spawn_unwritten = True
            if self._shared:
                self._write_spawn(draft)

    def _write_spawn(self, draft: Path) -> None:
        """Write ``children/spawn.json`` from ``children``."""
        head = codec.unstructure(SpawnDocument(()))
        data = codec.encode({**head, "children": self.children})
        # The draft is synced as a whole before publication; per-file fsyncs would be wasted.
        self._fs.write_atomic(os.fspath(draft / "children" / "spawn.json"), data, durable=False)
        self._spawn_unwritten = False

    def add_put(self, source: Path, destination: str) -> str:
        with self.locked():
            draft = self.ensure()
            op_id = f"op-{len(self.operations) + 1:04d}"
            _copy(source, draft / "transaction" / "files" / op_id)
            self._add_operation({"id": op_id, "op": "put", "destination": destination, "source": f"files/{op_id}"})
            return op_id

    def add_remove(self, destination: str, missing_ok: bool) -> str:
        with self.locked():
            self.ensure()
            op_id = f"op-{len(self.operations) + 1:04d}"
            self._add_operation({"id": op_id, "op": "remove", "destination": destination, "missing_ok": missing_ok})
            return op_id

    def _add_operation(self, operation: dict[str, Any]) -> None:
        assert self._directory is not None
        self.operations.append(operation)
        document = TransactionDocument(tuple(TransactionOperation(**item) for item in self.operations))
        manifest = os.fspath(self._directory / "transaction" / "manifest.json")
        self._fs.write_atomic(manifest, codec.encode(codec.unstructure(document)), durable=False)

    def publish(self, outcome: dict[str, Any] | Callable[[], dict[str, Any]]) -> Path:
        """Write ``outcome.json`` and rename the draft to ``outcome.ready/``; return that path.

        ``outcome`` may be a function building it, called under the lock once the draft is
        current (a join lists the draft's children as they are at publication).
        """
        with self.locked():
            self.check_open()
            document = outcome() if callable(outcome) else outcome  # may refuse: before anything is made
            draft = self.ensure()
            if self._spawn_unwritten:
                self._write_spawn(draft)
            self._fs.write_atomic(os.fspath(draft / "outcome.json"), codec.encode(document), durable=False)
            if self._durable:
                self._fs.sync_tree(os.fspath(draft))
            try:
                # Never replaces, not even an empty directory; synced with the control directory when durable.
                self._fs.rename(os.fspath(draft), os.fspath(self.ready), durable=self._durable)
            except FileExistsError:
                raise RuntimeError(f"{self.ready} already exists; refusing to replace a published outcome") from None
            self._published = True
            self._directory = None
            return self.ready

    def discard(self) -> None:
        """Remove an unpublished draft so no half-outcome survives."""
        if self._directory is not None:
            with self.locked():
                if self._directory is not None:  # a shared draft is re-read: another process may have gone on
                    shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        self.children = []
        self.operations = []
        self._label_set = set()
        self._spawn_unwritten = False


class WorkdirBatch:
    """Workdir changes staged together and applied as one replayable batch.

    Use through ``Attempt.workdir_batch()``: leaving the ``with`` block seals and
    applies the batch; an exception inside it discards the batch unapplied.
    """

    def __init__(
        self, workdir: Path, *, durable: bool, new_id: Callable[[], str], fs: Filesystem | None = None
    ) -> None:
        self._workdir = workdir
        self._durable = durable
        self._fs = fs if fs is not None else PosixFilesystem()
        self.id = new_id()
        self._staging = workdir / RUNNER_DIR / "workdir-staging" / self.id
        self.operations: list[WorkdirOperation] = []
        self._sealed: Path | None = None

    def _path(self, relpath: str | os.PathLike[str]) -> str:
        if self._sealed is not None:
            raise RuntimeError("this workdir batch is already sealed")
        path = check_relative(relpath, "workdir path")
        if path.split("/")[0] == RUNNER_DIR:
            raise ValueError(f"workdir path {path!r} is inside the runner's private {RUNNER_DIR}/")
        return path

    def write(self, relpath: str | os.PathLike[str], data: bytes | str) -> None:
        """Stage the whole content of one file."""
        path = self._path(relpath)
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, bytes | bytearray):
            raise TypeError(f"workdir batch data must be bytes or str, got {type(data).__name__}")
        staged = f"files/{len(self.operations) + 1:04d}"
        target = self._staging / staged
        # Durable: the chain of new directories down to the staging area is synced as it is created.
        self._fs.makedirs(os.fspath(target.parent), durable=self._durable)
        target.write_bytes(bytes(data))
        self.operations.append(WorkdirOperation("write", path, staged=staged))

    def remove(self, relpath: str | os.PathLike[str]) -> None:
        """Stage the removal of a file or tree (absent is fine)."""
        self.operations.append(WorkdirOperation("remove", self._path(relpath)))

    def rename(self, source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
        """Stage a rename that replaces ``destination``."""
        self.operations.append(WorkdirOperation("rename", self._path(source), destination=self._path(destination)))

    def seal(self) -> Path | None:
        """Make the batch durable under ``workdir-ready/<uuid>/``; ``None`` for an empty batch."""
        if self._sealed is not None:
            return self._sealed
        if not self.operations:
            self.discard()
            return None
        self._fs.makedirs(os.fspath(self._staging), durable=self._durable)
        document = WorkdirBatchDocument(self.id, tuple(self.operations))
        (self._staging / "ops.json").write_bytes(codec.encode(codec.unstructure(document)))
        if self._durable:
            self._fs.sync_tree(os.fspath(self._staging))
        sealed = self._workdir / RUNNER_DIR / "workdir-ready" / self.id
        # The rename creates workdir-ready/ when it is missing, synced like the rename when durable.
        self._fs.rename(os.fspath(self._staging), os.fspath(sealed), durable=self._durable)
        self._sealed = sealed
        return sealed

    def discard(self) -> None:
        shutil.rmtree(self._staging, ignore_errors=True)


def _inside(workdir: Path, target: Path, batch: Path) -> tuple[Path, str]:
    """(``target``, the name it reaches) unless a symlinked directory on its way leads out of the workdir."""
    real_root = os.path.realpath(workdir)
    real_parent = os.path.realpath(target.parent)
    if real_parent != real_root and not real_parent.startswith(real_root + os.sep):
        raise ValueError(f"workdir batch {batch.name}: {target} leads outside the workdir through a symbolic link")
    return target, os.path.join(real_parent, target.name)


def _apply_one(fs: Filesystem, workdir: Path, batch: Path, operation: WorkdirOperation, *, durable: bool) -> None:
    """Apply one op; each is safe to repeat after it completed (or half-completed) once.

    Each op replaces what is at its destination: a write publishes the staged bytes
    atomically, a rename first removes the destination and then renames without
    overwriting (a replay finds the source gone and the destination present).
    """
    kind = operation.op
    target, reached = _inside(workdir, workdir / check_relative(operation.path, "workdir path"), batch)
    if kind == "write":
        if target.is_dir() and not target.is_symlink():
            fs.rmtree(os.fspath(target))
        staged = fs.read_bytes(os.fspath(batch / check_relative(operation.staged or "", "staged file")))
        fs.write_atomic(os.fspath(target), staged, durable=durable)
    elif kind == "remove":
        fs.rmtree(os.fspath(target))
        if durable and fs.lstat(os.fspath(target.parent)) is not None:  # a missing parent holds no name to sync
            fs.fsync_dir(os.fspath(target.parent))
    elif kind == "rename":
        path = operation.destination or ""
        destination, destination_reached = _inside(workdir, workdir / check_relative(path, "workdir path"), batch)
        if fs.exists(os.fspath(target)):
            if reached != destination_reached:  # the same name twice (perhaps through a link): nothing to do
                fs.rmtree(os.fspath(destination))
                fs.rename(os.fspath(target), os.fspath(destination), durable=durable)
        elif not fs.exists(os.fspath(destination)):
            raise FileNotFoundError(f"workdir batch {batch.name}: cannot rename missing {operation.path!r}")
    else:
        raise ValueError(f"workdir batch {batch.name}: unknown op {kind!r}")


def apply_sealed_batch(workdir: Path, batch: Path, *, durable: bool, fs: Filesystem | None = None) -> None:
    """Apply a sealed batch from its recorded progress, then move it to ``workdir-applied/``."""
    fs = fs if fs is not None else PosixFilesystem()
    operations = _read(batch / "ops.json", WorkdirBatchDocument).operations
    progress_path = batch / "progress.json"
    applied = 0
    if progress_path.exists():
        applied = int(codec.decode_object(progress_path.read_bytes(), os.fspath(progress_path))["applied"])
    for index in range(applied, len(operations)):
        _apply_one(fs, workdir, batch, operations[index], durable=durable)
        # Recorded after the op took effect: a crash in between repeats one idempotent op.
        fs.write_atomic(os.fspath(progress_path), codec.encode({"applied": index + 1}), durable=durable)
    # Creates workdir-applied/ when missing; durable, it syncs it and workdir-ready/.
    fs.rename(os.fspath(batch), os.fspath(workdir / RUNNER_DIR / "workdir-applied" / batch.name), durable=durable)


def replay_workdir_batches(workdir: Path, *, durable: bool, fs: Filesystem | None = None) -> list[str]:
    """Finish every sealed-but-unapplied batch and drop unsealed staging; return the replayed ids."""
    runner_dir = workdir / RUNNER_DIR
    # An unsealed batch never took effect, and only one attempt runs in a workdir at a time.
    shutil.rmtree(runner_dir / "workdir-staging", ignore_errors=True)
    ready_root = runner_dir / "workdir-ready"
    if not ready_root.is_dir():
        return []
    replayed: list[str] = []
    # A batch is applied right after it is sealed, so at most one is normally pending.
    for batch in sorted(ready_root.iterdir()):
        if batch.is_dir() and (batch / "ops.json").is_file():
            apply_sealed_batch(workdir, batch, durable=durable, fs=fs)
            replayed.append(batch.name)
    return replayed


def _read(path: Path, record: type[T]) -> T:
    return codec.read(path.read_bytes(), record, os.fspath(path))
