"""The Python runner SDK: :class:`Runner` registers steps, :class:`Attempt` is what a step touches.

``Runner.main`` binds the process to its attempt, dispatches the requested
step, and turns every ending into exactly one outcome (or, for a raising
handler, an ``error.json`` breadcrumb and no outcome at all). ``Attempt`` reads
the attempt's context, job and state and accumulates spawns and staged data in
one implicit draft that a single terminal call publishes.

Invariants: one attempt publishes at most one outcome; every step name an
outcome publishes is checked against the registered step set at the call that
names it; nothing is published by a handler that raises. Spec: 001 "Native
runner helpers"; 002 (the parity table); docs/workflow_filesystem_api.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO, overload

from . import codec
from .adapters.attempt_lock import AttemptLock
from .adapters.clock import SystemClock
from .adapters.fs_posix import PosixFilesystem
from .attempt_records import OutcomeDocument, RunnerDescription, RunnerErrorDocument
from .domain.model import (
    Failure,
    JobKey,
    ValidationError,
    check_join_condition,
    check_placement,
    check_priority,
    check_step,
    check_tag,
)
from .outcome import (
    OutcomeDraft,
    WorkdirBatch,
    apply_sealed_batch,
    check_relative,
    child_job_spec,
    job_file_filler,
    payload_filler,
    record_runner_steps,
    replay_workdir_batches,
    write_error,
)
from .ports import Filesystem
from .protocol import JOB_FILE, PRIVATE_DIR, JobSpec, RunLog, parse_job_bytes
from .runtime import AttemptContext, Children, ChildSpec, CommandResult, JobState, new_uuid, run_command

__all__ = ["Attempt", "Runner"]

Handler = Callable[["Attempt"], Any]
_MISSING: Any = object()

_REQUIRED_ENV = (
    "HTTK_WORKFLOW_CONTEXT",
    "HTTK_WORKFLOW_CONTROL_DIR",
    "HTTK_WORKFLOW_JOB_DIR",
    "HTTK_WORKFLOW_WORKDIR",
    "HTTK_WORKFLOW_WORKSPACE_DIR",
)


def _steps_text(steps: frozenset[str] | None) -> str:
    return ", ".join(sorted(steps or ())) or "(none)"


def setting_env_name(name: str) -> str:
    """``vasp.command`` -> ``HTTK_VASP_COMMAND``."""
    return "HTTK_" + name.upper().replace(".", "_").replace("-", "_")


class Attempt:
    """One attempt of one step: everything a handler reads, does and publishes."""

    def __init__(
        self,
        context: AttemptContext,
        *,
        control: Path,
        payload: Path,
        workdir: Path,
        workspace: Path,
        data: Path | None = None,
        steps: frozenset[str] | None = None,
        clock: Any = None,
        new_id: Callable[[], str] | None = None,
        environ: Mapping[str, str] | None = None,
        fs: Filesystem | None = None,
    ) -> None:
        """Bind explicit paths (prefer :meth:`initialize`); ``steps=None`` skips the published-step check."""
        self._context = context
        self._control = control
        self._payload = payload
        self._workdir = workdir
        self._workspace = workspace
        self._data = data
        self._steps = None if steps is None else frozenset(steps)
        self._clock = clock if clock is not None else SystemClock()
        self._new_id = new_id if new_id is not None else new_uuid
        self._environ = environ if environ is not None else os.environ
        self._fs = fs if fs is not None else PosixFilesystem()
        self._job: JobSpec | None = None  # read on first use: most Bash bridge calls never need it
        # One lock for every read-modify-write of this attempt's documents (draft and state), shared
        # by this process and every Bash bridge call of the attempt (adapters/attempt_lock.py).
        self._lock = AttemptLock.for_control(control)
        self._state = JobState(payload, durable=context.durable, fs=self._fs, lock=self._lock)
        self._log = RunLog(
            workdir / ".httk-runner" / "runlog.jsonl",
            base=workdir,
            step=context.step,
            attempt_id=context.attempt_id,
            durable=context.durable,
            now=self._clock.now,
            fs=self._fs,
        )
        self._children = Children(context.children)
        self._draft = OutcomeDraft(control, durable=context.durable, new_id=self._new_id, fs=self._fs, lock=self._lock)
        self._labels: list[str] = []

    @classmethod
    def initialize(cls, steps: frozenset[str] | None = None, environ: Mapping[str, str] | None = None) -> Attempt:
        """Bind to the attempt the ``HTTK_WORKFLOW_*`` environment names; replay sealed workdir batches."""
        env = os.environ if environ is None else environ
        for name in _REQUIRED_ENV:
            if not env.get(name):
                raise RuntimeError(
                    f"{name} is not set: this program is a workflow runner and must be launched by an "
                    "httk-workflow task manager (use --describe to list its steps)"
                )
        context = AttemptContext.load(env["HTTK_WORKFLOW_CONTEXT"])
        env_step = env.get("HTTK_WORKFLOW_STEP")
        if env_step and env_step != context.step:
            raise RuntimeError(f"HTTK_WORKFLOW_STEP={env_step!r} disagrees with context.json step {context.step!r}")
        data_dir = env.get("HTTK_WORKFLOW_DATA_DIR") or (os.fspath(context.data) if context.data else "")
        attempt = cls(
            context,
            control=Path(env["HTTK_WORKFLOW_CONTROL_DIR"]),
            payload=Path(env["HTTK_WORKFLOW_JOB_DIR"]),
            workdir=Path(env["HTTK_WORKFLOW_WORKDIR"]),
            workspace=Path(env["HTTK_WORKFLOW_WORKSPACE_DIR"]),
            data=Path(data_dir) if data_dir else None,
            steps=steps,
            environ=env,
        )
        replay_workdir_batches(attempt.workdir, durable=context.durable, fs=attempt._fs)
        return attempt

    # ------------------------------------------------------------------ reading

    @property
    def context(self) -> AttemptContext:
        return self._context

    @property
    def step(self) -> str:
        return self._context.step

    @property
    def control(self) -> Path:
        return self._control

    @property
    def payload(self) -> Path:
        return self._payload

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def data(self) -> Path | None:
        """The published transactional data, or ``None`` for a job with ``data.mode`` none."""
        return self._data

    @property
    def job(self) -> JobSpec:
        """The job definition, ``job.json`` read and checked on first use (it is immutable)."""
        if self._job is None:
            path = self._payload / JOB_FILE
            self._job = parse_job_bytes(path.read_bytes(), os.fspath(path))
        return self._job

    @property
    def inputs(self) -> dict[str, Any]:
        """The job's ``inputs`` object (read-only by convention; job.json is immutable)."""
        return self.job.inputs

    def input(self, name: str, default: Any = _MISSING) -> Any:
        """One input; without ``default`` a missing one raises ``KeyError`` naming the inputs present."""
        if name in self.job.inputs:
            return self.job.inputs[name]
        if default is _MISSING:
            known = ", ".join(sorted(self.job.inputs)) or "(none)"
            raise KeyError(f"job input {name!r} is not set; inputs: {known}")
        return default

    def setting(self, name: str, default: Any = None) -> Any:
        """inputs[name], else ``HTTK_<NAME>``, else the workspace settings snapshot, else ``default``.

        The environment value is JSON-decoded when it parses as JSON and is the
        raw string otherwise; when it is exactly the manager's own export of the
        workspace setting, the typed workspace value is returned instead, so a
        string setting ``"007"`` does not come back as the number 7.
        """
        if name in self.job.inputs:
            return self.job.inputs[name]
        settings = self._context.settings
        raw = self._environ.get(setting_env_name(name))
        if raw is not None:
            if name in settings and raw == _exported(settings[name]):
                return settings[name]
            return codec.json_or_text(raw)
        if name in settings:
            return settings[name]
        return default

    @property
    def state(self) -> JobState:
        return self._state

    @property
    def log(self) -> RunLog:
        return self._log

    @property
    def children(self) -> Children:
        """The children of the join that started this activation; empty when none did."""
        return self._children

    def declare(self, name: str, document: Mapping[str, Any]) -> None:
        """Record the declaration this job observed (verbatim, last write wins)."""
        check_tag(name, "declaration name")
        if not isinstance(document, Mapping):
            raise TypeError(f"declaration {name!r} must be a JSON object, got {type(document).__name__}")
        path = self._payload / PRIVATE_DIR / "declarations" / f"{name}.json"
        self._fs.write_atomic(os.fspath(path), codec.encode(dict(document)), durable=self._context.durable)

    def declaration(self, name: str) -> Any:
        """The observed declaration, else the one job.json declared, else ``None``."""
        check_tag(name, "declaration name")
        path = self._payload / PRIVATE_DIR / "declarations" / f"{name}.json"
        try:
            return codec.decode(path.read_bytes(), os.fspath(path))
        except FileNotFoundError:
            return self.job.declarations.get(name)

    # ------------------------------------------------------------------ doing

    def run(self, argv: list[str], timeout: float | None = None) -> CommandResult:
        """Run an argv array in the workdir; on timeout terminate its whole process group."""
        return run_command(
            argv, cwd=self._workdir, timeout=timeout, monotonic=self._clock.monotonic, sleep=self._clock.sleep
        )

    @contextlib.contextmanager
    def workdir_batch(self) -> Iterator[WorkdirBatch]:
        """Group workdir changes; leaving the block seals and applies them, an exception discards them."""
        batch = WorkdirBatch(self._workdir, durable=self._context.durable, new_id=self._new_id, fs=self._fs)
        try:
            yield batch
        except BaseException:
            batch.discard()
            raise
        sealed = batch.seal()
        if sealed is not None:
            apply_sealed_batch(self._workdir, sealed, durable=self._context.durable, fs=self._fs)

    # ------------------------------------------------------------------ staging

    def _data_mode(self) -> str:
        return self._context.data_mode or self.job.data_mode

    def _check_transactional(self, call: str) -> None:
        self._draft.check_open()
        if self._data_mode() != "transactional":
            raise RuntimeError(
                f"{call}() stages transactional data, but this job has data mode {self._data_mode()!r}; "
                "submit it with data mode 'transactional'"
            )

    def put(self, source: str | os.PathLike[str], destination: str) -> str:
        """Stage one file or tree at ``destination`` of the job's data, applied when the outcome commits.

        Returns the operation identifier (``op-0001``, ...) of the staged put.
        """
        self._check_transactional("put")
        target = check_relative(destination, "destination")
        path = Path(source)
        if not path.is_absolute():
            path = self._workdir / path
        if not path.exists():
            raise FileNotFoundError(f"put(): source {os.fspath(source)!r} does not exist ({path})")
        return self._draft.add_put(path, target)

    def remove(self, destination: str, missing_ok: bool = False) -> str:
        """Stage the removal of ``destination`` from the job's data; returns its operation identifier."""
        self._check_transactional("remove")
        return self._draft.add_remove(check_relative(destination, "destination"), bool(missing_ok))

    def _check_published_step(self, step: str, what: str) -> str:
        try:
            check_step(step)
        except ValidationError as error:
            raise ValueError(f"{what}: {error}") from None
        if self._steps is not None and step not in self._steps:
            raise ValueError(
                f"{what} {step!r} is not a step of this runner; registered steps: {_steps_text(self._steps)}"
            )
        return step

    def spawn(
        self,
        child: ChildSpec | str | os.PathLike[str],
        label: str,
        placement: str | None = None,
    ) -> str:
        """Register one child under a unique label, created when the outcome is published; return its key."""
        self._draft.check_open()
        check_tag(label, "child label")
        if label in self._labels:
            raise ValueError(f"child label {label!r} is already used on this attempt; labels are unique")
        if placement is None:
            placement = self._context.placement
            if placement is None:
                raise ValueError("spawn(): context.json names no placement; pass placement= explicitly")
        placement = check_placement(placement)
        if isinstance(child, ChildSpec):
            if child.runner.inherits:
                self._check_published_step(child.step, "ChildSpec.step")
            fill = job_file_filler(child_job_spec(self.job, child, label).to_bytes())
        elif isinstance(child, str | os.PathLike):
            fill = payload_filler(Path(child) if Path(child).is_absolute() else self._workdir / child)
        else:
            raise TypeError(f"spawn() takes a ChildSpec or a payload directory, got {type(child).__name__}")
        job_id = self._new_id()
        job_key = str(JobKey(job_id=job_id, tag=label))
        entry = {"label": label, "job_id": job_id, "job_key": job_key, "placement": placement,
                 "payload": f"jobs/{job_key}"}
        self._draft.add_child(entry, fill)  # checks the label again, against the draft as it is now
        self._labels.append(label)
        return job_key

    # ------------------------------------------------------------------ publishing

    @property
    def published(self) -> bool:
        """Whether this attempt already published its outcome."""
        return self._draft.published

    def _publish(self, action: str, members: dict[str, Any] | Callable[[], dict[str, Any]]) -> Path:
        """Publish ``action``; ``members`` may be built under the draft's lock (a join's children)."""

        def outcome() -> dict[str, Any]:
            return {
                "format": OutcomeDocument.FORMAT.name,
                "format_version": OutcomeDocument.FORMAT.version,
                "action": action,
                "attempt_id": self._context.attempt_id,
                "step": self._context.step,
                "runner_steps": sorted(self._steps) if self._steps is not None else None,
                **(members() if callable(members) else members),
            }

        return self._draft.publish(outcome)

    def advance(self, step: str, state: Mapping[str, Any] | None = None, priority: int | None = None) -> None:
        """Run ``step`` next; ``state`` is merged into the job state before publication."""
        self._draft.check_open()
        self._check_published_step(step, "advance step")
        if priority is not None:
            if not isinstance(priority, int) or isinstance(priority, bool):
                raise TypeError(f"priority must be an int, got {type(priority).__name__}")
            check_priority(priority)  # the manager's outcome parser applies the same bound
        if state is not None:
            self._state.merge(state)
        self._publish("advance", {"next_step": step, "priority": priority})

    def gather(
        self,
        step: str,
        when: str = "all_succeeded",
        count: int | None = None,
        on_impossible: str | None = None,
    ) -> None:
        """Wait for exactly the children spawned on this attempt, then run ``step``."""
        self._draft.check_open()
        self._check_published_step(step, "gather step")
        if on_impossible is not None:
            self._check_published_step(on_impossible, "gather on_impossible step")

        def members() -> dict[str, Any]:
            # Under the draft's lock: the join lists the children the draft holds at publication.
            labels = self._draft.labels
            # The manager validates a published join with this same rule (engine/outcome_reader.py).
            check_join_condition(when, count, children=len(labels))
            join = {"step": step, "when": when, "count": count, "on_impossible": on_impossible, "children": labels}
            return {"join": join}

        self._publish("wait", members)

    def succeed(self) -> None:
        """The job is done."""
        self._draft.check_open()
        self._publish("succeed", {})

    def fail(
        self,
        code: str,
        message: str = "",
        details: Mapping[str, Any] | None = None,
        retryable: bool = False,
    ) -> None:
        """Publish the canonical failure ``{code, message, details, retryable}``."""
        self._draft.check_open()
        try:
            failure = Failure(code, message, dict(details or {}), retryable)
        except (ValidationError, TypeError) as error:  # attrs' type validators raise TypeError
            raise ValueError(f"invalid failure: {error}") from None
        try:
            codec.dumps(failure.details)
        except (TypeError, ValueError) as error:
            raise TypeError(f"failure details are not JSON-serialisable: {error}") from None
        self._publish("fail", {"failure": codec.unstructure(failure)})

    def retry(self, reason: str = "") -> None:
        """Repeat this activation within the job's attempt budget."""
        self._draft.check_open()
        self._publish("retry", {"reason": _text(reason, "reason")})

    def pause(self, reason: str = "") -> None:
        """Stop until an operator resumes the job."""
        self._draft.check_open()
        self._publish("pause", {"reason": _text(reason, "reason")})


def _exit_message(code: object) -> str:
    """What a handler's ``sys.exit(code)`` says, in the words of the Bash SDK's ``HandlerExit``."""
    status = code if isinstance(code, int) else 1  # Python exits 1 for a non-integer code (and prints it)
    return f"the handler exited with status {status} (sys.exit({code!r}))"


def _exported(value: Any) -> str | None:
    """How the manager exports a scalar workspace setting to ``HTTK_<NAME>``; ``None`` if it does not."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return value


class Runner:
    """The steps of one workflow, registered before any work starts."""

    def __init__(self, workflow: str) -> None:
        if not isinstance(workflow, str) or not workflow:
            raise ValueError(f"workflow must be a non-empty string, got {workflow!r}")
        self._workflow = workflow
        self._handlers: dict[str, Handler] = {}

    @property
    def workflow(self) -> str:
        return self._workflow

    @property
    def steps(self) -> frozenset[str]:
        """Every registered step name."""
        return frozenset(self._handlers)

    @overload
    def step(self, function: Handler, /) -> Handler: ...

    @overload
    def step(self, function: str | None = None, /, *, name: str | None = None) -> Callable[[Handler], Handler]: ...

    def step(self, function: Any = None, /, *, name: str | None = None) -> Any:
        """Register a handler: ``@run.step``, ``@run.step(name="x")`` or ``@run.step("x")``."""
        if callable(function):
            return self._register(function.__name__, function)
        if function is not None and name is not None:
            raise TypeError("give the step name once, positionally or as name=")
        explicit = function if function is not None else name

        def decorate(handler: Handler) -> Handler:
            return self._register(explicit if explicit is not None else handler.__name__, handler)

        return decorate

    def _register(self, name: str, handler: Handler) -> Handler:
        check_step(name)
        if name in self._handlers:
            raise ValueError(f"step {name!r} is already registered in runner {self._workflow!r}")
        self._handlers[name] = handler
        return handler

    def description(self, file: TextIO | None = None) -> dict[str, Any]:
        """Print this runner's description on ``file`` (stdout by default) and return it; touch nothing else.

        One line of canonical JSON, the ``httk-workflow-runner-description`` v1 object
        (:class:`~.attempt_records.RunnerDescription`), exactly what ``--describe`` and the
        Bash ``httk_workflow_main --describe`` print (spec 002 row ``Runner.description``).
        """
        document: dict[str, Any] = codec.unstructure(RunnerDescription(self._workflow, tuple(sorted(self._handlers))))
        out = sys.stdout if file is None else file
        out.write(codec.dumps(document) + "\n")
        out.flush()
        return document

    def main(self, argv: list[str] | None = None) -> int:
        """Dispatch the step the manager asked for; return 0 for every ending turned into an outcome."""
        args = sys.argv[1:] if argv is None else list(argv)
        if "--describe" in args or os.environ.get("HTTK_WORKFLOW_DESCRIBE") == "1":
            self.description()
            return 0
        if args:
            sys.stderr.write(f"usage: {sys.argv[0]} [--describe] (unexpected arguments: {' '.join(args)})\n")
            return 2
        _ensure_logging()
        missing = [name for name in _REQUIRED_ENV if not os.environ.get(name)]
        if missing:
            # Started by hand, not by a manager: one line and the refusal status, like the Bash SDK.
            sys.stderr.write(
                f"{missing[0]} is not set: this program is a workflow runner and must be launched by an "
                "httk-workflow task manager (use --describe to list its steps)\n"
            )
            return 2
        try:
            attempt = Attempt.initialize(steps=self.steps)
        except codec.DocumentError as error:
            # The manager wrote these documents; one that does not read is damage, said in one line
            # (the manager records the exit as the attempt's failure), not a traceback. Status 2: a
            # corrupt attempt context is a refusal (spec 002, exit-code discipline), as in Bash.
            sys.stderr.write(f"error: this attempt cannot start: {error}\n")
            return 2
        durable = attempt.context.durable
        record_runner_steps(attempt.payload, self._workflow, self.steps, durable=durable, fs=attempt._fs)
        self._dispatch(attempt)
        return 0

    @staticmethod
    def _record_death(attempt: Attempt, exception: str, message: str) -> None:
        """Discard the unpublished draft and leave the ``error.json`` breadcrumb of a handler that died."""
        import traceback

        attempt._draft.discard()
        write_error(
            attempt.control,
            RunnerErrorDocument(exception, message, step=attempt.step, traceback=traceback.format_exc()),
            durable=attempt.context.durable,
            fs=attempt._fs,
        )

    def _dispatch(self, attempt: Attempt) -> None:
        step = attempt.step
        handler = self._handlers.get(step)
        if handler is None:
            attempt.fail(
                "unknown_step",
                f"step {step!r} is not implemented; registered steps: {_steps_text(self.steps)}",
            )
            return
        try:
            handler(attempt)
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                # An explicit non-zero exit is the handler dying, recorded as Bash records `exit N`.
                self._record_death(attempt, "HandlerExit", _exit_message(exit_.code))
                raise
            # sys.exit(0) ends the handler as a return does (spec 002: a handler that ends without
            # publishing is no_outcome), exactly like `exit 0` in a Bash handler.
        except BaseException as error:
            self._record_death(attempt, type(error).__name__, str(error))
            raise
        if not attempt.published:
            # A draft without a terminal call was never meant to be published: children
            # spawned by a handler that forgot to gather must not be created.
            attempt._draft.discard()
            attempt.fail("no_outcome", f"step {step!r} returned without publishing an outcome")


def _ensure_logging() -> None:
    import logging

    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
