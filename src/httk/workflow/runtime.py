"""Value types a step reads and the two in-process helpers behind ``Attempt``.

Owns :class:`AttemptContext` (the parsed ``context.json``), :class:`ChildResult`
and :class:`Children` (the join that started this activation), :class:`ChildSpec`
and :class:`RunnerRef` (what a synthesized child runs), :class:`JobState` (the
job's JSON state in ``.httk-job/state.json``), :class:`CommandResult` and
:func:`run_command`.

Invariants: every state mutation is one atomic replace of the whole document;
a command's process group never outlives a timeout (or a signal that stops the
runner while it waits). Spec: 001 "What an attempt reads", "Spawning children",
"Data and workdir changes"; docs/workflow_filesystem_api.md "context.json".
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from . import codec
from .adapters.fs_posix import PosixFilesystem
from .adapters.process_groups import group_alive, signal_group
from .attempt_records import ContextChild, ContextDocument
from .domain.model import Failure, check_step
from .ports import unreadable
from .protocol import keyword_synonyms

if TYPE_CHECKING:
    import subprocess

    from .adapters.attempt_lock import AttemptLock
    from .ports import Filesystem

PRIVATE_DIR = ".httk-job"
STATE_FILE = "state.json"
_SHA256_HEX = frozenset("0123456789abcdef")


def new_uuid() -> str:
    """A random (version 4) UUID string, without importing :mod:`uuid` and its platform probing."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _path_or_none(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


#: Members ``context.json`` holds as strings that a step is handed as paths.
_PATH_MEMBERS = frozenset({"workspace", "payload", "workdir", "data", "control"})


def _members(record: Any, **overrides: Any) -> dict[str, Any]:
    """``record``'s members by name (the path members as :class:`Path`, empty as ``None``), then ``overrides``.

    The SDK views carry the same member names as their document records, so one copy serves both.
    """
    values = {field.name: getattr(record, field.name) for field in attrs.fields(type(record))}
    for name in _PATH_MEMBERS & values.keys():
        values[name] = _path_or_none(values[name])
    return {**values, **overrides}


# --------------------------------------------------------------------------- context


@attrs.frozen
class ChildResult:
    """One child observed by the join that started this activation."""

    label: str
    job_id: str
    job_key: str
    kind: str
    failure: Failure | None
    payload: Path
    workdir: Path | None
    data: Path | None

    @property
    def succeeded(self) -> bool:
        return self.kind == "succeeded"

    @classmethod
    def from_record(cls, record: ContextChild) -> ChildResult:
        return cls(**_members(record, payload=Path(record.payload)))


class Children(Sequence[ChildResult]):
    """The children of the join that started this activation, in join order; empty otherwise."""

    def __init__(self, children: Sequence[ChildResult] = ()) -> None:
        self._children = tuple(children)
        self._by_label = {child.label: child for child in self._children}

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[ChildResult]:
        return iter(self._children)

    def __getitem__(self, key: Any) -> Any:
        """A child by label (``KeyError`` naming the known labels), or by integer index or slice."""
        if isinstance(key, int | slice):
            return self._children[key]
        try:
            return self._by_label[key]
        except KeyError:
            known = ", ".join(sorted(self._by_label)) or "(none)"
            raise KeyError(f"no child labelled {key!r}; observed children: {known}") from None

    def __contains__(self, key: object) -> bool:
        if isinstance(key, ChildResult):
            return key in self._children
        return key in self._by_label

    def __repr__(self) -> str:
        return f"Children({list(self._children)!r})"

    def get(self, label: str, default: ChildResult | None = None) -> ChildResult | None:
        return self._by_label.get(label, default)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(child.label for child in self._children)

    @property
    def succeeded(self) -> tuple[ChildResult, ...]:
        return tuple(child for child in self._children if child.kind == "succeeded")

    @property
    def failed(self) -> tuple[ChildResult, ...]:
        """Children that did not succeed: ``failed`` or ``cancelled``."""
        return tuple(child for child in self._children if child.kind in ("failed", "cancelled"))


@attrs.frozen
class AttemptContext:
    """The manager-written identity and restart evidence of one attempt (``context.json`` v1).

    Also readable like the raw document: ``context["placement"]``, ``context.get(...)``.
    """

    job_id: str
    attempt_id: str
    step: str
    durable: bool
    workspace: Path | None = None
    workspace_id: str | None = None
    job_key: str | None = None
    placement: str | None = None
    activation_id: str | None = None
    activation_ordinal: int | None = None
    attempt_ordinal: int | None = None
    total_attempts: int | None = None
    payload: Path | None = None
    workdir: Path | None = None
    data: Path | None = None
    control: Path | None = None
    workdir_mode: str | None = None
    data_mode: str | None = None
    manager_id: str | None = None
    host: str | None = None
    created_at: Any = None
    runner: Mapping[str, Any] = attrs.field(factory=dict)
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    restart: Mapping[str, Any] = attrs.field(factory=dict)
    children: tuple[ChildResult, ...] = ()
    document: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.document.get(key, default)

    @classmethod
    def from_json(cls, document: Any, name: str = "context.json") -> AttemptContext:
        """Structure a parsed ``context.json``; a malformed member raises ``DocumentError`` naming it."""
        record = codec.structure(document, ContextDocument, name)
        return cls(**_members(
            record,
            runner=record.runner or {},
            settings=record.settings or {},
            restart=record.restart or {},
            children=tuple(ChildResult.from_record(child) for child in record.children or ()),
            document=document,
        ))

    @classmethod
    def load(cls, path: str | os.PathLike[str], fs: Filesystem | None = None) -> AttemptContext:
        """Read and validate ``context.json``; ``DocumentError`` (one line, naming it) when it cannot be.

        Read like every document another actor wrote (``Filesystem.read_document``): a FIFO,
        directory, symlink or oversized file there is refused unread instead of hanging the runner.
        """
        name = os.fspath(path)
        try:
            data = (fs if fs is not None else PosixFilesystem()).read_document(name)
        except OSError as error:
            problem = unreadable(name, error).removeprefix(f"{name} ")
            raise codec.DocumentError(name, "$", f"{problem}; a manager writes it as a regular file for "
                                      "each attempt: start this runner through a manager") from None
        return cls.from_json(codec.decode(data, name), name)


# --------------------------------------------------------------------------- children to spawn


@attrs.frozen
class RunnerRef:
    """Which runner a synthesized child runs: the parent's own, or a pinned shared one."""

    source: str = "inherit"
    path: str | None = None
    sha256: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.source == "inherit":
            if self.path is not None or self.sha256 is not None:
                raise ValueError("RunnerRef.inherit() takes no path or sha256")
            return
        if self.source not in ("workspace", "installed"):
            raise ValueError(f"invalid runner source {self.source!r}: use inherit, workspace or installed")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"a {self.source} runner needs a path")
        sha = self.sha256
        if not isinstance(sha, str) or len(sha) != 64 or not set(sha) <= _SHA256_HEX:
            raise ValueError(f"a {self.source} runner must be pinned by 64 lowercase hex digits of sha256")

    @classmethod
    def inherit(cls) -> RunnerRef:
        """The spawning job's own ``(source, path, sha256)``."""
        return cls()

    @classmethod
    def workspace(cls, path: str, sha256: str) -> RunnerRef:
        """A runner in the workspace runner store, pinned by digest."""
        return cls("workspace", path, sha256)

    @classmethod
    def installed(cls, path: str, sha256: str) -> RunnerRef:
        """A runner below one of the manager's runner search paths, pinned by digest."""
        return cls("installed", path, sha256)

    @property
    def inherits(self) -> bool:
        return self.source == "inherit"


@keyword_synonyms(parameters="inputs")
@attrs.frozen
class ChildSpec:
    """A synthesized child job: its first step and inputs; everything unset follows the spawning job.

    ``parameters=`` is also accepted for ``inputs=`` (the httk-workflow 2.1 spelling).

    Retry budgets left ``None`` take the job-definition defaults, not the parent's.
    """

    step: str
    inputs: Mapping[str, Any] | None = None
    maximum_attempts_per_activation: int | None = None
    maximum_total_attempts: int | None = None
    maximum_activations: int | None = None
    retry_on: Sequence[str] | None = None
    priority: int | None = None
    runner: RunnerRef = attrs.field(factory=RunnerRef.inherit)
    name: str | None = None
    workdir_mode: str | None = None
    data_mode: str | None = None

    def __attrs_post_init__(self) -> None:
        check_step(self.step)
        if self.inputs is not None and not isinstance(self.inputs, Mapping):
            raise TypeError(f"ChildSpec.inputs must be a mapping, got {type(self.inputs).__name__}")
        if not isinstance(self.runner, RunnerRef):
            raise TypeError("ChildSpec.runner must be a RunnerRef (inherit, workspace or installed)")
        if isinstance(self.retry_on, str):
            raise TypeError("ChildSpec.retry_on must be a list of failure codes, not one string")


# --------------------------------------------------------------------------- job state


class JobState(MutableMapping[str, Any]):
    """The job's private JSON state, ``.httk-job/state.json`` inside the payload.

    Every read loads the file and every mutation is one atomic replace of the
    whole document (through ``fs``, the POSIX filesystem adapter by default), so
    the state on disk is always a complete object. A mutation reads, changes and
    replaces the document under ``lock`` (an attempt's
    :class:`~.adapters.attempt_lock.AttemptLock`, which ``Attempt`` passes), so
    concurrent writers of one attempt (Bash bridge calls run with ``&``) lose no
    update; without one, the caller is the only writer.
    """

    def __init__(
        self,
        payload: str | os.PathLike[str],
        *,
        durable: bool = True,
        fs: Filesystem | None = None,
        lock: AttemptLock | None = None,
    ) -> None:
        self._path = Path(payload) / PRIVATE_DIR / STATE_FILE
        self._durable = durable
        self._fs = fs if fs is not None else PosixFilesystem()
        self._lock = lock

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> dict[str, Any]:
        """The whole state document (a fresh copy)."""
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        return codec.decode_object(data, os.fspath(self._path))

    def set(self, key: str, value: Any) -> None:
        """Store one JSON value in one atomic replace."""
        self.merge({key: value})

    def delete(self, key: str) -> bool:
        """Remove ``key``; report whether it was present."""
        self._check_key(key)
        with self._locked():
            document = self.read()
            if key not in document:
                return False
            del document[key]
            self._write(document)
            return True

    def merge(self, values: Mapping[str, Any]) -> None:
        """Write several keys in one atomic replace."""
        if not isinstance(values, Mapping):
            raise TypeError(f"state merge needs a mapping, got {type(values).__name__}")
        for key, value in values.items():
            self._check_key(key)
            self._check_value(key, value)
        if not values:
            return
        with self._locked():
            document = self.read()
            document.update(values)
            self._write(document)

    def __getitem__(self, key: str) -> Any:
        document = self.read()
        if key not in document:
            known = ", ".join(sorted(document)) or "(none)"
            raise KeyError(f"state key {key!r} is not set; set keys: {known}")
        return document[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.read())

    def __len__(self) -> int:
        return len(self.read())

    def __contains__(self, key: object) -> bool:
        return key in self.read()

    def get(self, key: str, default: Any = None) -> Any:
        return self.read().get(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update`` spelled as one :meth:`merge` (one atomic replace, not one per key)."""
        self.merge(dict(*args, **kwargs))

    def __repr__(self) -> str:
        return f"JobState({self.read()!r})"

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        """The read-modify-write guard: the attempt's lock, or nothing for a lone writer."""
        return self._lock.held() if self._lock is not None else contextlib.nullcontext()

    def _write(self, document: dict[str, Any]) -> None:
        self._fs.write_atomic(os.fspath(self._path), codec.encode(document), durable=self._durable)

    @staticmethod
    def _check_key(key: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"state keys are strings, got {type(key).__name__} {key!r}")

    @staticmethod
    def _check_value(key: str, value: Any) -> None:
        try:
            codec.dumps(value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"state value for key {key!r} is not JSON-serialisable: {error}") from None
        _check_keys(value, key)


def _check_keys(value: Any, where: str) -> None:
    """JSON object keys are strings: a non-string key would silently change on the way back."""
    if isinstance(value, dict):
        for name, member in value.items():
            if not isinstance(name, str):
                raise TypeError(f"state value for key {where!r} has a non-string object key {name!r}")
            _check_keys(member, where)
    elif isinstance(value, list | tuple):
        for member in value:
            _check_keys(member, where)


# --------------------------------------------------------------------------- commands


@attrs.frozen
class CommandResult:
    """What :meth:`Attempt.run` observed: the exit status and whether the timeout fired."""

    argv: tuple[str, ...]
    returncode: int
    timed_out: bool
    duration: float


class _Interrupted(Exception):
    """Raised from a signal handler so a waiting command is torn down before the runner stops."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _check_argv(argv: Any) -> tuple[str, ...]:
    if isinstance(argv, str | bytes):
        raise TypeError("run() takes an argument array (a list of strings), not a shell string")
    try:
        items = list(argv)
    except TypeError:
        raise TypeError(f"run() takes an argument array, got {type(argv).__name__}") from None
    if not items:
        raise ValueError("run() needs a non-empty argument array")
    result: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str):
            raise TypeError(f"argv[{index}] must be a string, got {type(item).__name__}")
        result.append(item)
    return tuple(result)


def _terminate_group(
    process: subprocess.Popen[bytes],
    grace: float,
    monotonic: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    import signal

    pgid = process.pid
    signal_group(pgid, signal.SIGTERM)
    deadline = monotonic() + grace
    while True:
        process.poll()  # reap the leader so it does not keep the group alive as a zombie
        if not group_alive(pgid):
            break
        if monotonic() >= deadline:
            signal_group(pgid, signal.SIGKILL)
            break
        sleep(0.02)
    process.wait()
    # SIGKILL cannot be ignored, but delivery is asynchronous: wait until the group is gone.
    deadline = monotonic() + 5.0
    while group_alive(pgid) and monotonic() < deadline:
        sleep(0.02)


def run_command(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    timeout: float | None = None,
    grace: float = 2.0,
    monotonic: Callable[[], float],
    sleep: Callable[[float], None],
) -> CommandResult:
    """Run ``argv`` in ``cwd`` in a new session; on timeout SIGTERM its group, then SIGKILL after ``grace``.

    stdout and stderr are inherited. While waiting in the main thread, SIGTERM
    and SIGINT to the runner first tear the command's group down and are then
    re-delivered, because the new session puts the command out of reach of a
    signal sent to the runner's own group.
    """
    # Imported here: most steps never run a command, and a runner's start-up should stay cheap.
    import signal
    import subprocess

    args = _check_argv(argv)
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
    start = monotonic()
    process = subprocess.Popen(args, cwd=os.fspath(cwd), start_new_session=True)
    previous: dict[int, Any] = {}
    pending: list[int] = []
    if threading.current_thread() is threading.main_thread():

        def interrupt(signum: int, _frame: Any) -> None:
            pending.append(signum)
            if len(pending) == 1:
                raise _Interrupted(signum)
            # A repeated signal while the group is being torn down only adds urgency, not a second unwind.

        for signum in (signal.SIGTERM, signal.SIGINT):
            handler = signal.getsignal(signum)
            if handler is not None:
                previous[signum] = signal.signal(signum, interrupt)
    timed_out = False
    try:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _terminate_group(process, grace, monotonic, sleep)
        except _Interrupted:
            _terminate_group(process, grace, monotonic, sleep)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if pending:
        # Stop the runner the way the signal would have, now that nothing it started survives.
        os.kill(os.getpid(), pending[0])
    return CommandResult(
        argv=args, returncode=int(process.returncode), timed_out=timed_out, duration=monotonic() - start
    )
