"""The one implementation behind the Bash runner SDK: ``python -m httk.workflow.shell_bridge COMMAND ARGS...``.

Every function of ``shell/httk-workflow.sh`` is a thin call into a command of
this module, which drives the same :class:`~httk.workflow.sdk.Attempt` the
Python SDK exposes, so a Bash runner and a Python runner publish the same bytes
(spec 002, the parity table; docs/sdks/sdk_parity.md).

A Bash attempt is one draft across many bridge processes. Each process binds a
fresh ``Attempt`` and resumes the draft an earlier call left below the control
directory (``outcome.tmp.<uuid>/``: its spawned children, its staged
operations, its labels), so spawn, spawn, put, gather in four processes builds
the same draft as in one. ``batch`` runs several commands, one per line of
stdin, against one ``Attempt`` in one interpreter start.

Exit statuses follow the spec's discipline: 0 success, 1 a legitimately absent
answer (silent), 2 a refused call (one message on stderr); ``run`` reports the
supervised program's class instead (0, 22, 124, 125). Imports are deferred to
the command that needs them: a call's cost is mostly interpreter start-up and
the SDK import, and ``calc`` or ``run`` should not pay for the SDK.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from .sdk import Attempt, Runner

EXIT_OK, EXIT_ABSENT, EXIT_REFUSED = 0, 1, 2
EXIT_NOT_STARTED = 125
WORKFLOW_ENV = "HTTK_WORKFLOW_BASH_WORKFLOW"
STEPS_ENV = "HTTK_WORKFLOW_BASH_STEPS"


class Absent(Exception):
    """The answer is legitimately absent (status 1); nothing is printed."""


class Refused(Exception):
    """Bad usage or a protocol violation (status 2); the message goes to stderr."""


# --------------------------------------------------------------------------- arguments


def parse_options(
    argv: Sequence[str],
    *,
    flags: Sequence[str] = (),
    values: Sequence[str] = (),
    multi: Sequence[str] = (),
    stop_at_positional: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """A small getopt: ``--name value``/``--name=value``/``--flag``; ``--`` ends the options.

    ``multi`` options may repeat and collect a list. With ``stop_at_positional``
    the first positional ends the options (``run``'s argv follows them).
    """
    options: dict[str, Any] = {}
    positional: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            positional.extend(argv[index + 1 :])
            break
        if not arg.startswith("--") or len(arg) == 2:
            if stop_at_positional:
                positional.extend(argv[index:])
                break
            positional.append(arg)
            index += 1
            continue
        name, equals, value = arg[2:].partition("=")
        if name in flags:
            if equals:
                raise Refused(f"--{name} takes no value")
            options[name] = True
        elif name in values or name in multi:
            if not equals:
                index += 1
                if index >= len(argv):
                    raise Refused(f"--{name} needs a value")
                value = argv[index]
            if name in multi:
                options.setdefault(name, []).append(value)
            else:
                options[name] = value
        else:
            raise Refused(f"unknown option --{name}")
        index += 1
    return options, positional


def _count(positional: list[str], least: int, most: int | None, usage: str) -> None:
    if len(positional) < least or (most is not None and len(positional) > most):
        raise Refused(f"usage: {usage}")


def _json(text: str, what: str) -> Any:
    from . import codec

    try:
        return codec.decode(text.encode("utf-8"), what)
    except codec.DocumentError as error:
        raise Refused(str(error)) from None


def _json_object(text: str, what: str) -> dict[str, Any]:
    value = _json(text, what)
    if not isinstance(value, dict):
        raise Refused(f"{what} must be a JSON object")
    return value


def _integer(text: str | None, what: str, *, nullable: bool = False) -> int | None:
    if text is None or (nullable and text in ("null", "none")):
        return None
    try:
        return int(text, 10)
    except ValueError:
        raise Refused(f"{what} must be an integer, got {text!r}") from None


def _seconds(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise Refused(f"{what} must be a number of seconds, got {text!r}") from None


def _assignments(items: Sequence[str], what: str) -> dict[str, Any]:
    """``NAME=JSON`` pairs into a mapping (the value is JSON: quote strings)."""
    result: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or not name:
            raise Refused(f"{what} must be NAME=JSON, got {item!r}")
        result[name] = _json(text, f"{what} {name}")
    return result


def _absolute(path: str) -> str:
    # Bash authors think in the current directory; the SDK resolves relative paths against the
    # workdir. Both are the workdir unless the handler changed directory.
    return os.path.abspath(path)


# --------------------------------------------------------------------------- the session


class Session:
    """One bridge process: the output stream and the attempt, bound once and shared by a batch."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._attempt: Attempt | None = None

    def emit(self, value: Any) -> None:
        """Strings verbatim, every other value as canonical JSON; one line."""
        if isinstance(value, str):
            self.out.write(value + "\n")
        else:
            from . import codec

            self.out.write(codec.dumps(value) + "\n")

    @staticmethod
    def steps() -> frozenset[str] | None:
        """The step set ``httk_workflow_runner`` exported, or ``None`` outside a declared runner."""
        text = os.environ.get(STEPS_ENV)
        return None if text is None else frozenset(text.split())

    def runner(self) -> Runner:
        """A :class:`Runner` with the declared workflow and steps; its handlers do nothing."""
        from .sdk import Runner

        workflow = os.environ.get(WORKFLOW_ENV, "")
        if not workflow:
            raise Refused("no workflow declared: call httk_workflow_runner WORKFLOW STEP... first")
        runner = Runner(workflow)
        for step in sorted(self.steps() or ()):
            runner.step(name=step)(_no_op)
        return runner

    def attempt(self) -> Attempt:
        """The attempt the environment names, with any draft an earlier bridge call left resumed."""
        if self._attempt is None:
            from .sdk import Attempt

            attempt = Attempt.initialize(steps=self.steps())
            resume_draft(attempt)
            self._attempt = attempt
        return self._attempt


def _no_op(_attempt: Attempt) -> None:
    """The stand-in handler: the real one is a Bash function, run between bridge calls."""


def resume_draft(attempt: Attempt) -> None:
    """Point ``attempt`` at the one unpublished ``outcome.tmp.*`` draft of its control directory, if any.

    The draft's children, staged operations and labels are read back from its
    own ``spawn.json`` and ``manifest.json``, so the next operation id and the
    label-uniqueness check continue where the previous process stopped.
    """
    from . import codec
    from .outcome import DRAFT_PREFIX

    drafts = sorted(path for path in attempt.control.glob(f"{DRAFT_PREFIX}*") if path.is_dir())
    if not drafts:
        return
    if len(drafts) > 1:
        names = ", ".join(path.name for path in drafts)
        raise RuntimeError(f"{attempt.control} holds more than one unpublished draft ({names}); refusing to guess")
    draft = attempt._draft
    directory = drafts[0]
    children: list[dict[str, Any]] = []
    spawn = directory / "children" / "spawn.json"
    if spawn.is_file():
        children = list(codec.decode_object(spawn.read_bytes(), os.fspath(spawn))["children"])
    operations: list[dict[str, Any]] = []
    manifest = directory / "transaction" / "manifest.json"
    if manifest.is_file():
        operations = list(codec.decode_object(manifest.read_bytes(), os.fspath(manifest))["operations"])
    draft._directory = directory
    draft.children = children
    draft.operations = operations
    attempt._labels = [str(child["label"]) for child in children]


# --------------------------------------------------------------------------- lifecycle of httk_workflow_main


def cmd_describe(session: Session, args: list[str]) -> int:
    """Print the runner description exactly as ``Runner.main --describe`` does."""
    from . import codec

    _count(args, 0, 0, "describe")
    session.out.write(codec.dumps(session.runner().description()) + "\n")
    return EXIT_OK


def cmd_begin(session: Session, args: list[str]) -> int:
    """Bind, replay sealed batches, record the step set; print the step, or publish unknown_step (1)."""
    from .sdk import record_runner_steps

    _count(args, 0, 0, "begin")
    runner = session.runner()
    attempt = session.attempt()
    record_runner_steps(attempt.payload, runner.workflow, runner.steps, durable=attempt.context.durable)
    if attempt.step not in runner.steps:
        runner._dispatch(attempt)  # the stand-in has no handler for it: publishes fail unknown_step
        return EXIT_ABSENT
    session.out.write(attempt.step + "\n")
    return EXIT_OK


def cmd_no_outcome(session: Session, args: list[str]) -> int:
    """After a handler returned 0: publish fail no_outcome (discarding the draft) unless it published."""
    _count(args, 0, 0, "no_outcome")
    attempt = session.attempt()
    if not attempt.published:
        # Runner._dispatch with the do-nothing stand-in is exactly the Python path for this ending.
        session.runner()._dispatch(attempt)
    return EXIT_OK


def cmd_error(session: Session, args: list[str]) -> int:
    """Discard the unpublished draft and write ``error.json`` for a handler that died."""
    import shutil
    from pathlib import Path

    from .fileio import durable_from_env
    from .outcome import DRAFT_PREFIX, write_error

    options, positional = parse_options(
        args, values=("step", "file", "line", "command", "status", "kind"), flags=()
    )
    _count(positional, 0, 0, "error --step S --status N --file F --line L --command C [--kind errexit|exit]")
    control = os.environ.get("HTTK_WORKFLOW_CONTROL_DIR")
    if not control:
        raise Refused("HTTK_WORKFLOW_CONTROL_DIR is not set")
    # Deliberately without binding an Attempt: a breadcrumb must be written even when the context is corrupt.
    for draft in Path(control).glob(f"{DRAFT_PREFIX}*"):
        shutil.rmtree(draft, ignore_errors=True)
    status = _integer(options.get("status", "1"), "--status")
    command = options.get("command", "")
    if options.get("kind", "errexit") == "errexit":
        exception, message = "CommandFailed", f"command {command!r} failed with status {status}"
    else:
        exception, message = "HandlerExit", f"the handler exited with status {status} ({command})"
    line = options.get("line") or None
    document = {
        "step": options.get("step") or os.environ.get("HTTK_WORKFLOW_STEP"),
        "exception": exception,
        "message": message,
        "file": options.get("file") or None,
        "line": _integer(line, "--line") if line is not None else None,
        "command": command,
    }
    write_error(Path(control), document, durable=durable_from_env())
    return EXIT_OK


# --------------------------------------------------------------------------- reading


def _dotted(value: Any, path: str, what: str) -> Any:
    for segment in path.split("."):
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise Absent(f"{what} has no {path!r}")
    return value


def _emit_present(session: Session, value: Any) -> int:
    if value is None:
        raise Absent("null")
    session.emit(value)
    return EXIT_OK


def cmd_context(session: Session, args: list[str]) -> int:
    """The whole context.json object, or one (dotted) member of it; a null or missing member is absent."""
    _count(args, 0, 1, "httk_workflow_context [FIELD]")
    document = dict(session.attempt().context.document)
    if not args:
        session.emit(document)
        return EXIT_OK
    return _emit_present(session, _dotted(document, args[0], "context.json"))


def cmd_input(session: Session, args: list[str]) -> int:
    """One job input (``Attempt.input``); a missing one without a default is absent."""
    _count(args, 1, 2, "httk_workflow_input NAME [DEFAULT]")
    attempt = session.attempt()
    if args[0] in attempt.inputs:
        session.emit(attempt.input(args[0]))
    elif len(args) == 2:
        session.emit(args[1])
    else:
        raise Absent(args[0])
    return EXIT_OK


def cmd_setting(session: Session, args: list[str]) -> int:
    """One application setting (``Attempt.setting``); ``None`` without a default is absent."""
    _count(args, 1, 2, "httk_workflow_setting NAME [DEFAULT]")
    value = session.attempt().setting(args[0], args[1] if len(args) == 2 else None)
    return _emit_present(session, value)


def cmd_state_get(session: Session, args: list[str]) -> int:
    """The whole state document (``JobState.read``), or one key of it; an unset key is absent."""
    _count(args, 0, 1, "httk_workflow_state_get [KEY]")
    document = session.attempt().state.read()
    if not args:
        session.emit(document)
    elif args[0] in document:
        session.emit(document[args[0]])
    else:
        raise Absent(args[0])
    return EXIT_OK


def cmd_declaration(session: Session, args: list[str]) -> int:
    """One declaration (``Attempt.declaration``): observed, else declared, else absent."""
    _count(args, 1, 1, "httk_workflow_declaration NAME")
    return _emit_present(session, session.attempt().declaration(args[0]))


def _child_document(child: Any) -> dict[str, Any]:
    return {
        "label": child.label,
        "job_id": child.job_id,
        "job_key": child.job_key,
        "kind": child.kind,
        "failure": None if child.failure is None else child.failure.to_json(),
        "payload": os.fspath(child.payload),
        "workdir": None if child.workdir is None else os.fspath(child.workdir),
        "data": None if child.data is None else os.fspath(child.data),
    }


def cmd_children(session: Session, args: list[str]) -> int:
    """The observed children's labels, one per line (``--json``: the child objects); empty is fine."""
    options, positional = parse_options(args, flags=("succeeded", "failed", "json"))
    _count(positional, 0, 0, "httk_workflow_children [--succeeded|--failed] [--json]")
    if options.get("succeeded") and options.get("failed"):
        raise Refused("--succeeded and --failed exclude each other")
    children = session.attempt().children
    selected = children.succeeded if options.get("succeeded") else children.failed if options.get("failed") else children
    if options.get("json"):
        session.emit([_child_document(child) for child in selected])
    else:
        session.out.write("".join(f"{child.label}\n" for child in selected))
    return EXIT_OK


def cmd_child(session: Session, args: list[str]) -> int:
    """One observed child by label (``ChildResult``), or one dotted field; unobserved or null is absent."""
    _count(args, 1, 2, "httk_workflow_child LABEL [FIELD]")
    child = session.attempt().children.get(args[0])
    if child is None:
        raise Absent(args[0])
    document = _child_document(child)
    if len(args) == 1:
        session.emit(document)
        return EXIT_OK
    if args[1].split(".")[0] not in document:
        raise Refused(f"unknown child field {args[1]!r}: use one of {', '.join(sorted(document))}")
    return _emit_present(session, _dotted(document, args[1], f"child {args[0]!r}"))


# --------------------------------------------------------------------------- writing job-scoped files


def cmd_state_set(session: Session, args: list[str]) -> int:
    _count(args, 2, 2, "httk_workflow_state_set KEY JSON")
    session.attempt().state.set(args[0], _json(args[1], f"state value for {args[0]!r}"))
    return EXIT_OK


def cmd_state_delete(session: Session, args: list[str]) -> int:
    """Remove one key; absent (1) when it was not set."""
    _count(args, 1, 1, "httk_workflow_state_delete KEY")
    if not session.attempt().state.delete(args[0]):
        raise Absent(args[0])
    return EXIT_OK


def cmd_state_merge(session: Session, args: list[str]) -> int:
    _count(args, 1, 1, "httk_workflow_state_merge JSON")
    session.attempt().state.merge(_json_object(args[0], "state merge"))
    return EXIT_OK


def _runlog(kind: str, least: int, usage: str) -> Callable[[Session, list[str]], int]:
    def command(session: Session, args: list[str]) -> int:
        _count(args, least, None if kind == "files" else 2, usage)
        files = [_absolute(path) for path in args[2:]]
        session.attempt().log.append(args[0], args[1], kind=kind, files=files)
        return EXIT_OK

    return command


def cmd_declare(session: Session, args: list[str]) -> int:
    _count(args, 2, 2, "httk_workflow_declare NAME JSON")
    session.attempt().declare(args[0], _json_object(args[1], f"declaration {args[0]!r}"))
    return EXIT_OK


def cmd_workdir_apply(session: Session, args: list[str]) -> int:
    """One workdir batch from ``--write PATH SOURCE``, ``--remove PATH``, ``--rename FROM TO``, in order."""
    usage = "httk_workflow_workdir_apply {--write PATH SOURCE | --remove PATH | --rename FROM TO}..."
    operations: list[tuple[str, list[str]]] = []
    index = 0
    arity = {"--write": 2, "--remove": 1, "--rename": 2}
    while index < len(args):
        option = args[index]
        count = arity.get(option)
        if count is None or index + count >= len(args):
            raise Refused(f"usage: {usage}")
        operations.append((option, args[index + 1 : index + 1 + count]))
        index += 1 + count
    if not operations:
        raise Refused(f"usage: {usage}")
    # Sources are read before the batch opens, so a missing one changes nothing.
    contents = {}
    for number, (option, values) in enumerate(operations):
        if option == "--write":
            with open(_absolute(values[1]), "rb") as handle:
                contents[number] = handle.read()
    with session.attempt().workdir_batch() as batch:
        for number, (option, values) in enumerate(operations):
            if option == "--write":
                batch.write(values[0], contents[number])
            elif option == "--remove":
                batch.remove(values[0])
            else:
                batch.rename(values[0], values[1])
    return EXIT_OK


# --------------------------------------------------------------------------- the draft and the outcome


def cmd_put(session: Session, args: list[str]) -> int:
    _count(args, 2, 2, "httk_workflow_put SRC DEST")
    session.attempt().put(_absolute(args[0]), args[1])
    return EXIT_OK


def cmd_remove(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, flags=("missing-ok",))
    _count(positional, 1, 1, "httk_workflow_remove DEST [--missing-ok]")
    session.attempt().remove(positional[0], missing_ok=bool(options.get("missing-ok")))
    return EXIT_OK


def runner_ref(text: str) -> Any:
    """``inherit``, ``ws:PATH@SHA256`` (or ``workspace:``) or ``installed:PATH@SHA256`` as a RunnerRef."""
    from .runtime import RunnerRef

    if text == "inherit":
        return RunnerRef.inherit()
    source, colon, rest = text.partition(":")
    path, at, sha256 = rest.rpartition("@")
    if not colon or not at or source not in ("ws", "workspace", "installed"):
        raise Refused(f"--runner must be inherit, ws:PATH@SHA256 or installed:PATH@SHA256, got {text!r}")
    return RunnerRef.installed(path, sha256) if source == "installed" else RunnerRef.workspace(path, sha256)


_BUDGETS = ("maximum-attempts-per-activation", "maximum-total-attempts", "maximum-activations")
_CHILD_VALUES = ("step", "inputs", "runner", "name", "priority", "workdir-mode", "data-mode", *_BUDGETS)


def cmd_spawn(session: Session, args: list[str]) -> int:
    """Register one child (``Attempt.spawn``) from ``--step``+ChildSpec options or ``--payload DIR``; print its key."""
    from .runtime import ChildSpec

    options, positional = parse_options(
        args, values=("label", "placement", "payload", *_CHILD_VALUES), multi=("input", "retry-on")
    )
    _count(positional, 0, 0, "httk_workflow_spawn --label L (--step S [--input NAME=JSON]... | --payload DIR)")
    if "label" not in options:
        raise Refused("httk_workflow_spawn needs --label")
    child: Any
    if "payload" in options:
        extra = sorted(name for name in (*_CHILD_VALUES, "input", "retry-on") if name in options)
        if extra:
            raise Refused(f"--payload spawns a prepared payload; --{extra[0]} belongs to a --step child")
        child = _absolute(options["payload"])
    elif "step" in options:
        inputs = _json_object(options["inputs"], "--inputs") if "inputs" in options else {}
        inputs.update(_assignments(options.get("input", []), "--input"))
        budgets = {name.replace("-", "_"): _integer(options.get(name), f"--{name}") for name in _BUDGETS}
        child = ChildSpec(
            step=options["step"],
            inputs=inputs,
            retry_on=options.get("retry-on"),
            priority=_integer(options.get("priority"), "--priority"),
            runner=runner_ref(options.get("runner", "inherit")),
            name=options.get("name"),
            workdir_mode=options.get("workdir-mode"),
            data_mode=options.get("data-mode"),
            **budgets,
        )
    else:
        raise Refused("httk_workflow_spawn needs --step STEP or --payload DIR")
    session.emit(session.attempt().spawn(child, label=options["label"], placement=options.get("placement")))
    return EXIT_OK


def cmd_advance(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, values=("state", "priority"))
    _count(positional, 1, 1, "httk_workflow_advance STEP [--state JSON] [--priority N]")
    state = _json_object(options["state"], "--state") if "state" in options else None
    session.attempt().advance(positional[0], state=state, priority=_integer(options.get("priority"), "--priority"))
    return EXIT_OK


def cmd_gather(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, values=("when", "count", "on-impossible"))
    _count(positional, 1, 1, "httk_workflow_gather STEP [--when W] [--count N] [--on-impossible STEP]")
    session.attempt().gather(
        positional[0],
        when=options.get("when", "all_succeeded"),
        count=_integer(options.get("count"), "--count"),
        on_impossible=options.get("on-impossible"),
    )
    return EXIT_OK


def cmd_succeed(session: Session, args: list[str]) -> int:
    _count(args, 0, 0, "httk_workflow_succeed")
    session.attempt().succeed()
    return EXIT_OK


def cmd_fail(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, values=("details",), flags=("retryable",))
    _count(positional, 1, 2, "httk_workflow_fail CODE [MESSAGE] [--details JSON] [--retryable]")
    details = _json_object(options["details"], "--details") if "details" in options else None
    message = positional[1] if len(positional) == 2 else ""
    session.attempt().fail(positional[0], message, details=details, retryable=bool(options.get("retryable")))
    return EXIT_OK


def cmd_retry(session: Session, args: list[str]) -> int:
    _count(args, 0, 1, "httk_workflow_retry [REASON]")
    session.attempt().retry(args[0] if args else "")
    return EXIT_OK


def cmd_pause(session: Session, args: list[str]) -> int:
    _count(args, 0, 1, "httk_workflow_pause [REASON]")
    session.attempt().pause(args[0] if args else "")
    return EXIT_OK


# --------------------------------------------------------------------------- commands without an attempt


def cmd_run(session: Session, args: list[str]) -> int:
    """Run an argv under ``ProcessSupervisor``; the status is its exit class (0, 22, 124, 125)."""
    from .supervision import EXIT_STOPPED, ProcessSupervisor

    options, argv = parse_options(
        args,
        values=("timeout", "inactivity", "stdout", "stderr", "report"),
        multi=("follow", "checker", "checker-argv"),
        stop_at_positional=True,
    )
    if not argv:
        raise Refused("usage: httk_workflow_run [--timeout S] [--inactivity S] [--follow F]... [--checker CMD]... -- ARGV...")
    checkers: list[list[str]] = [[command] for command in options.get("checker", [])]
    for text in options.get("checker-argv", []):
        value = _json(text, "--checker-argv")
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise Refused("--checker-argv must be a non-empty JSON array of strings")
        checkers.append(value)
    supervisor = ProcessSupervisor(
        argv,
        cwd=os.getcwd(),
        timeout=_seconds(options.get("timeout"), "--timeout"),
        inactivity_timeout=_seconds(options.get("inactivity"), "--inactivity"),
        follow=options.get("follow", []),
        checkers=checkers,
        stdout_path=options.get("stdout"),
        stderr_path=options.get("stderr"),
        report_path=options.get("report"),
    )
    session.out.flush()
    try:
        return supervisor.run().exit_class
    except OSError as error:
        # The report recording the failed start is written; the class is the launcher's "could not start".
        sys.stderr.write(f"httk_workflow_run: could not start {argv[0]!r}: {error}\n")
        return EXIT_STOPPED


def cmd_job_prepare(session: Session, args: list[str]) -> int:
    """Write job.json (``prepare_job_payload``) from ``JobSpec`` options; print the payload directory."""
    from .fileio import durable_from_env
    from .protocol import JobSpec, prepare_job_payload

    options, positional = parse_options(
        args,
        values=(
            "name", "workflow", "runner-path", "runner-source", "runner-sha256", "initial-step", "inputs",
            "priority", "pool", "executor", "workdir-mode", "data-mode", "resources", "declarations", "tag",
            *_BUDGETS,
        ),
        multi=("input", "capability", "retry-on", "declaration"),
    )
    _count(positional, 1, 1, "httk_workflow_job_prepare DIR --name N --workflow W --runner-path P [...]")
    missing = [name for name in ("name", "workflow", "runner-path") if name not in options]
    if missing:
        raise Refused(f"httk_workflow_job_prepare needs --{missing[0]}")
    members: dict[str, Any] = {
        "name": options["name"],
        "workflow": options["workflow"],
        "runner_path": options["runner-path"],
        "inputs": {
            **(_json_object(options["inputs"], "--inputs") if "inputs" in options else {}),
            **_assignments(options.get("input", []), "--input"),
        },
        "declarations": {
            **(_json_object(options["declarations"], "--declarations") if "declarations" in options else {}),
            **_assignments(options.get("declaration", []), "--declaration"),
        },
        "capabilities": tuple(options.get("capability", ())),
        "retry_on": tuple(options.get("retry-on", ())),
    }
    for name in ("runner-source", "runner-sha256", "initial-step", "pool", "executor", "workdir-mode", "data-mode", "tag"):
        if name in options:
            members[name.replace("-", "_")] = options[name]
    if "priority" in options:
        members["priority"] = _integer(options["priority"], "--priority")
    if "resources" in options:
        members["resources"] = _json_object(options["resources"], "--resources")
    for name in _BUDGETS:
        if name in options:
            members[name.replace("-", "_")] = _integer(options[name], f"--{name}", nullable=True)
    directory = prepare_job_payload(_absolute(positional[0]), JobSpec(**members), durable=durable_from_env())
    session.emit(os.fspath(directory))
    return EXIT_OK


def cmd_calc(session: Session, args: list[str]) -> int:
    """``evaluate_expression`` with ``NAME=NUMBER`` variables; prints the number."""
    from .runtime_utils import evaluate_expression

    _count(args, 1, None, "httk_calc EXPR [NAME=NUMBER]...")
    variables: dict[str, Any] = {}
    for name, value in _assignments(args[1:], "variable").items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refused(f"variable {name!r} must be a number")
        variables[name] = value
    session.out.write(f"{evaluate_expression(args[0], variables)}\n")
    return EXIT_OK


def cmd_template_render(session: Session, args: list[str]) -> int:
    """Render TEMPLATE with VALUES (a JSON object, or a JSON file) into OUTPUT, or to stdout with ``-``."""
    from .runtime_utils import render_template

    _count(args, 2, 3, "httk_template_render TEMPLATE VALUES_JSON [OUTPUT|-]")
    values: Any = args[1]
    if values.lstrip().startswith("{"):
        values = _json_object(values, "template values")
    output = args[2] if len(args) == 3 and args[2] != "-" else None
    rendered = render_template(args[0], values, output)
    if output is None:
        session.out.write(rendered)
    return EXIT_OK


def cmd_compress(session: Session, args: list[str]) -> int:
    from .runtime_utils import compress_files

    options, positional = parse_options(args, values=("method",), flags=("remove",))
    _count(positional, 1, None, "httk_compress [--method gz|bz2|xz] [--remove] FILE...")
    compress_files(positional, method=options.get("method", "gz"), remove=bool(options.get("remove")))
    return EXIT_OK


def cmd_decompress(session: Session, args: list[str]) -> int:
    from .runtime_utils import decompress_files

    options, positional = parse_options(args, flags=("remove",))
    _count(positional, 1, None, "httk_decompress [--remove] FILE...")
    decompress_files(positional, remove=bool(options.get("remove")))
    return EXIT_OK


def cmd_libpath(session: Session, args: list[str]) -> int:
    """Where the packaged ``httk-workflow.sh`` is, for sourcing it outside a manager."""
    _count(args, 0, 0, "libpath")
    session.emit(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shell", "httk-workflow.sh"))
    return EXIT_OK


def cmd_batch(session: Session, args: list[str]) -> int:
    """Run the commands on stdin, one per line, against one attempt; stop at the first failing line.

    A line is a JSON array of strings, or words split like a POSIX shell would
    (quotes and backslashes; no expansion). Blank lines and ``#`` comments are
    skipped. A command is named by its bridge name or its Bash function name.
    """
    import shlex

    _count(args, 0, 0, "httk_workflow_batch < COMMANDS")
    for number, line in enumerate(sys.stdin, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            words = _json(text, f"batch line {number}") if text.startswith("[") else shlex.split(text)
        except ValueError as error:
            sys.stderr.write(f"httk_workflow_batch: line {number}: {error}\n")
            return EXIT_REFUSED
        if not isinstance(words, list) or not words or not all(isinstance(word, str) for word in words):
            sys.stderr.write(f"httk_workflow_batch: line {number}: expected a non-empty array of strings\n")
            return EXIT_REFUSED
        if command_name(words[0]) == "batch":
            sys.stderr.write(f"httk_workflow_batch: line {number}: a batch cannot nest\n")
            return EXIT_REFUSED
        status = dispatch(session, words, where=f"httk_workflow_batch: line {number}: ")
        session.out.flush()
        if status:
            return status
    return EXIT_OK


COMMANDS: dict[str, Callable[[Session, list[str]], int]] = {
    "describe": cmd_describe,
    "begin": cmd_begin,
    "no_outcome": cmd_no_outcome,
    "error": cmd_error,
    "context": cmd_context,
    "input": cmd_input,
    "setting": cmd_setting,
    "state_get": cmd_state_get,
    "state_set": cmd_state_set,
    "state_delete": cmd_state_delete,
    "state_merge": cmd_state_merge,
    "runlog_note": _runlog("note", 2, "httk_workflow_runlog_note LABEL MESSAGE"),
    "runlog_headline": _runlog("headline", 2, "httk_workflow_runlog_headline LABEL MESSAGE"),
    "runlog_append": _runlog("files", 3, "httk_workflow_runlog_append LABEL MESSAGE FILE..."),
    "declare": cmd_declare,
    "declaration": cmd_declaration,
    "run": cmd_run,
    "put": cmd_put,
    "remove": cmd_remove,
    "workdir_apply": cmd_workdir_apply,
    "spawn": cmd_spawn,
    "children": cmd_children,
    "child": cmd_child,
    "advance": cmd_advance,
    "gather": cmd_gather,
    "succeed": cmd_succeed,
    "fail": cmd_fail,
    "retry": cmd_retry,
    "pause": cmd_pause,
    "job_prepare": cmd_job_prepare,
    "calc": cmd_calc,
    "template_render": cmd_template_render,
    "compress": cmd_compress,
    "decompress": cmd_decompress,
    "libpath": cmd_libpath,
    "batch": cmd_batch,
}


_UTILITIES = frozenset({"calc", "template_render", "compress", "decompress"})


def command_name(word: str) -> str:
    """``httk_workflow_state_get`` and ``httk_calc`` name the bridge commands ``state_get`` and ``calc``."""
    for prefix in ("httk_workflow_", "httk_"):
        if word.startswith(prefix):
            return word[len(prefix) :]
    return word


def dispatch(session: Session, argv: Sequence[str], where: str = "") -> int:
    """Run one command and map its ending onto the exit-code discipline."""
    name = command_name(argv[0]) if argv else ""
    command = COMMANDS.get(name)
    label = where + ("httk_" if name in _UTILITIES else "httk_workflow_") + name
    if command is None:
        sys.stderr.write(f"{where}httk.workflow.shell_bridge: unknown command {name!r}\n")
        return EXIT_REFUSED
    try:
        return command(session, list(argv[1:]))
    except (Absent, KeyError):
        return EXIT_ABSENT
    except (Refused, ValueError, TypeError, RuntimeError, OSError) as error:
        sys.stderr.write(f"{label}: {error}\n")
        return EXIT_REFUSED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m httk.workflow.shell_bridge``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write(f"usage: python -m httk.workflow.shell_bridge COMMAND ARGS... ({', '.join(sorted(COMMANDS))})\n")
        return EXIT_REFUSED
    session = Session(sys.stdout)
    status = dispatch(session, args)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
