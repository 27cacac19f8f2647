"""The attempt-bound commands of the Bash bridge: one function per Bash function that reads or publishes.

Each ``cmd_*`` takes the :class:`Session` of its bridge process and the words
after the command name, calls the one :class:`~httk.workflow.sdk.Attempt`
member of its row in the parity table, prints the answer (strings verbatim,
everything else as canonical JSON) and returns the exit status. :class:`Absent`
is status 1, :class:`Refused` status 2; :mod:`httk.workflow.shell_bridge`
dispatches them and maps every other exception. The session resumes the draft
an earlier bridge process left (:func:`resume_draft`), which is what lets one
Bash attempt build one outcome across many processes. Spec 002 (the parity
table and its exit-code discipline).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from .sdk import Attempt, Runner

EXIT_OK, EXIT_ABSENT, EXIT_REFUSED = 0, 1, 2
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


def count_args(positional: list[str], least: int, most: int | None, usage: str) -> None:
    if len(positional) < least or (most is not None and len(positional) > most):
        raise Refused(f"usage: {usage}")


def json_arg(text: str, what: str) -> Any:
    from . import codec

    try:
        return codec.decode(text.encode("utf-8"), what)
    except codec.DocumentError as error:
        raise Refused(str(error)) from None


def json_object_arg(text: str, what: str) -> dict[str, Any]:
    value = json_arg(text, what)
    if not isinstance(value, dict):
        raise Refused(f"{what} must be a JSON object")
    return value


def integer_arg(text: str | None, what: str, *, nullable: bool = False) -> int | None:
    if text is None or (nullable and text in ("null", "none")):
        return None
    try:
        return int(text, 10)
    except ValueError:
        raise Refused(f"{what} must be an integer, got {text!r}") from None


def seconds_arg(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise Refused(f"{what} must be a number of seconds, got {text!r}") from None


def assignments(items: Sequence[str], what: str) -> dict[str, Any]:
    """``NAME=VALUE`` pairs into a mapping, each value by :func:`.codec.json_or_text`; a later NAME wins."""
    from . import codec

    result: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or not name:
            raise Refused(f"{what} must be NAME=VALUE, got {item!r}")
        result[name] = codec.json_or_text(text)
    return result


def object_or_assignments(items: Sequence[str], what: str) -> dict[str, Any]:
    """Repeated ``what`` values, each one JSON object or one ``NAME=VALUE`` pair, merged in order."""
    result: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            result.update(json_object_arg(item, what))
        else:
            result.update(assignments([item], what))
    return result


def absolute(path: str) -> str:
    # Bash authors think in the current directory; the SDK resolves relative paths against the
    # workdir. Both are the workdir unless the handler changed directory.
    return os.path.abspath(path)


# --------------------------------------------------------------------------- the session


class Session:
    """One bridge process: the output stream and the attempt, bound once and shared by a batch."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._attempt: Attempt | None = None
        #: The function the runner called for the command running now, which a usage line names.
        self.command = ""

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
    children = attempt._draft.resume()
    attempt._labels = [str(child["label"]) for child in children]


# --------------------------------------------------------------------------- reading


def dotted(value: Any, path: str, what: str) -> Any:
    for segment in path.split("."):
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isascii() and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise Absent(f"{what} has no {path!r}")
    return value


def emit_present(session: Session, value: Any) -> int:
    if value is None:
        raise Absent("null")
    session.emit(value)
    return EXIT_OK


def cmd_context(session: Session, args: list[str]) -> int:
    """The whole context.json object, or one (dotted) member of it; a null or missing member is absent."""
    count_args(args, 0, 1, "httk_workflow_context [FIELD]")
    document = dict(session.attempt().context.document)
    if not args:
        session.emit(document)
        return EXIT_OK
    return emit_present(session, dotted(document, args[0], "context.json"))


def cmd_input(session: Session, args: list[str]) -> int:
    """The whole inputs object (``Attempt.inputs``), or one input (``Attempt.input``); a missing one without a
    default is absent."""
    count_args(args, 0, 2, "httk_workflow_input [NAME [DEFAULT]]")
    if not args:
        session.emit(dict(session.attempt().inputs))  # an object even when it is empty: canonical JSON, never a string
        return EXIT_OK
    try:
        value = session.attempt().input(*args)
    except KeyError:
        raise Absent(args[0]) from None  # a missing input without a default: status 1
    session.emit(value)
    return EXIT_OK


def cmd_setting(session: Session, args: list[str]) -> int:
    """One application setting (``Attempt.setting``); ``None`` without a default is absent."""
    count_args(args, 1, 2, "httk_workflow_setting NAME [DEFAULT]")
    value = session.attempt().setting(args[0], args[1] if len(args) == 2 else None)
    return emit_present(session, value)


def cmd_state_get(session: Session, args: list[str]) -> int:
    """The whole state document (``JobState.read``), or one key of it; an unset key is absent."""
    count_args(args, 0, 1, "httk_workflow_state_get [KEY]")
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
    count_args(args, 1, 1, "httk_workflow_declaration NAME")
    return emit_present(session, session.attempt().declaration(args[0]))


def _child_document(child: Any) -> dict[str, Any]:
    from . import codec

    return {
        "label": child.label,
        "job_id": child.job_id,
        "job_key": child.job_key,
        "kind": child.kind,
        "failure": codec.unstructure(child.failure),
        "payload": os.fspath(child.payload),
        "workdir": None if child.workdir is None else os.fspath(child.workdir),
        "data": None if child.data is None else os.fspath(child.data),
    }


def cmd_children(session: Session, args: list[str]) -> int:
    """The observed children's labels, one per line (``--json``: the child objects); empty is fine."""
    options, positional = parse_options(args, flags=("succeeded", "failed", "json"))
    count_args(positional, 0, 0, "httk_workflow_children [--succeeded|--failed] [--json]")
    if options.get("succeeded") and options.get("failed"):
        raise Refused("--succeeded and --failed exclude each other")
    children = session.attempt().children
    selected = children.succeeded if options.get("succeeded") else children
    if options.get("failed"):
        selected = children.failed
    if options.get("json"):
        session.emit([_child_document(child) for child in selected])
    else:
        session.out.write("".join(f"{child.label}\n" for child in selected))
    return EXIT_OK


def cmd_child(session: Session, args: list[str]) -> int:
    """One observed child by label (``ChildResult``), or one dotted field; unobserved or null is absent."""
    count_args(args, 1, 2, "httk_workflow_child LABEL [FIELD]")
    child = session.attempt().children.get(args[0])
    if child is None:
        raise Absent(args[0])
    document = _child_document(child)
    if len(args) == 1:
        session.emit(document)
        return EXIT_OK
    _check_child_field(args[1], document)
    return emit_present(session, dotted(document, args[1], f"child {args[0]!r}"))


_FAILURE_FIELDS = ("code", "details", "message", "retryable")


def _check_child_field(path: str, document: dict[str, Any]) -> None:
    """Refuse (2) a path that names no member of ``ChildResult``, as Python's attribute access would.

    A path into ``failure.details`` is the application's own mapping: a missing key there is absent (1).
    """
    segments = path.split(".")
    if segments[0] not in document:
        raise Refused(f"unknown child field {path!r}: use one of {', '.join(sorted(document))}")
    if len(segments) > 1 and segments[0] != "failure":
        raise Refused(f"child field {segments[0]!r} has no members: {path!r}")
    if segments[0] == "failure" and len(segments) > 1:
        if segments[1] not in _FAILURE_FIELDS:
            raise Refused(f"unknown failure field {path!r}: use one of {', '.join(_FAILURE_FIELDS)}")
        if len(segments) > 2 and segments[1] != "details":
            raise Refused(f"failure field {segments[1]!r} has no members: {path!r}")


# --------------------------------------------------------------------------- writing job-scoped files


def cmd_state_set(session: Session, args: list[str]) -> int:
    count_args(args, 2, 2, "httk_workflow_state_set KEY JSON")
    session.attempt().state.set(args[0], json_arg(args[1], f"state value for {args[0]!r}"))
    return EXIT_OK


def cmd_state_delete(session: Session, args: list[str]) -> int:
    """Remove one key; absent (1) when it was not set."""
    count_args(args, 1, 1, "httk_workflow_state_delete KEY")
    if not session.attempt().state.delete(args[0]):
        raise Absent(args[0])
    return EXIT_OK


def cmd_state_merge(session: Session, args: list[str]) -> int:
    count_args(args, 1, 1, "httk_workflow_state_merge JSON")
    session.attempt().state.merge(json_object_arg(args[0], "state merge"))
    return EXIT_OK


def _runlog(kind: str, least: int, usage: str) -> Callable[[Session, list[str]], int]:
    def command(session: Session, args: list[str]) -> int:
        count_args(args, least, None if kind == "files" else 2, usage)
        if len(args) == 1:  # MESSAGE alone (also accepted, the 2.1 form): the default label
            from .protocol import RunLog

            args = [RunLog.DEFAULT_LABEL, *args]
        files = [absolute(path) for path in args[2:]]
        session.attempt().log.append(args[0], args[1], kind=kind, files=files)
        return EXIT_OK

    return command


def cmd_declare(session: Session, args: list[str]) -> int:
    count_args(args, 2, 2, "httk_workflow_declare NAME JSON")
    session.attempt().declare(args[0], json_object_arg(args[1], f"declaration {args[0]!r}"))
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
            with open(absolute(values[1]), "rb") as handle:
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
    """Stage a put (``Attempt.put``) and print its operation identifier."""
    count_args(args, 2, 2, "httk_workflow_put SRC DEST")
    session.emit(session.attempt().put(absolute(args[0]), args[1]))
    return EXIT_OK


def cmd_remove(session: Session, args: list[str]) -> int:
    """Stage a removal (``Attempt.remove``) and print its operation identifier."""
    options, positional = parse_options(args, flags=("missing-ok",))
    count_args(positional, 1, 1, "httk_workflow_remove DEST [--missing-ok]")
    session.emit(session.attempt().remove(positional[0], missing_ok=bool(options.get("missing-ok"))))
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


BUDGETS = ("maximum-attempts-per-activation", "maximum-total-attempts", "maximum-activations")
_CHILD_VALUES = ("step", "inputs", "runner", "name", "priority", "workdir-mode", "data-mode", *BUDGETS)


def cmd_spawn(session: Session, args: list[str]) -> int:
    """Register one child (``Attempt.spawn``) from ``--step``+ChildSpec options or ``--payload DIR``; print its key."""
    from .runtime import ChildSpec

    options, positional = parse_options(
        args, values=("label", "placement", "payload", *_CHILD_VALUES), multi=("input", "retry-on")
    )
    count_args(positional, 0, 0, "httk_workflow_spawn --label L (--step S [--input NAME=VALUE]... | --payload DIR)")
    if "label" not in options:
        raise Refused("httk_workflow_spawn needs --label")
    child: Any
    if "payload" in options:
        extra = sorted(name for name in (*_CHILD_VALUES, "input", "retry-on") if name in options)
        if extra:
            raise Refused(f"--payload spawns a prepared payload; --{extra[0]} belongs to a --step child")
        child = absolute(options["payload"])
    elif "step" in options:
        inputs = json_object_arg(options["inputs"], "--inputs") if "inputs" in options else {}
        inputs.update(assignments(options.get("input", []), "--input"))
        budgets = {name.replace("-", "_"): integer_arg(options.get(name), f"--{name}") for name in BUDGETS}
        child = ChildSpec(
            step=options["step"],
            inputs=inputs,
            retry_on=options.get("retry-on"),
            priority=integer_arg(options.get("priority"), "--priority"),
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
    """``Attempt.advance``; each ``--state`` is one JSON object or one ``KEY=VALUE`` pair, merged in order."""
    options, positional = parse_options(args, values=("priority",), multi=("state",))
    count_args(positional, 1, 1, "httk_workflow_advance STEP [--state JSON|KEY=VALUE]... [--priority N]")
    state = object_or_assignments(options["state"], "--state") if "state" in options else None
    session.attempt().advance(positional[0], state=state, priority=integer_arg(options.get("priority"), "--priority"))
    return EXIT_OK


def cmd_gather(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, values=("when", "count", "on-impossible"))
    count_args(positional, 1, 1, "httk_workflow_gather STEP [--when W] [--count N] [--on-impossible STEP]")
    session.attempt().gather(
        positional[0],
        when=options.get("when", "all_succeeded"),
        count=integer_arg(options.get("count"), "--count"),
        on_impossible=options.get("on-impossible"),
    )
    return EXIT_OK


def cmd_succeed(session: Session, args: list[str]) -> int:
    count_args(args, 0, 0, "httk_workflow_succeed")
    session.attempt().succeed()
    return EXIT_OK


def cmd_fail(session: Session, args: list[str]) -> int:
    options, positional = parse_options(args, values=("details",), flags=("retryable",))
    count_args(positional, 1, 2, "httk_workflow_fail CODE [MESSAGE] [--details JSON] [--retryable]")
    details = json_object_arg(options["details"], "--details") if "details" in options else None
    message = positional[1] if len(positional) == 2 else ""
    session.attempt().fail(positional[0], message, details=details, retryable=bool(options.get("retryable")))
    return EXIT_OK


def cmd_retry(session: Session, args: list[str]) -> int:
    count_args(args, 0, 1, "httk_workflow_retry [REASON]")
    session.attempt().retry(args[0] if args else "")
    return EXIT_OK


def cmd_pause(session: Session, args: list[str]) -> int:
    count_args(args, 0, 1, "httk_workflow_pause [REASON]")
    session.attempt().pause(args[0] if args else "")
    return EXIT_OK


COMMANDS: dict[str, Callable[[Session, list[str]], int]] = {
    "context": cmd_context,
    "input": cmd_input,
    "setting": cmd_setting,
    "state_get": cmd_state_get,
    "state_set": cmd_state_set,
    "state_delete": cmd_state_delete,
    "state_merge": cmd_state_merge,
    "runlog_note": _runlog("note", 1, "httk_workflow_runlog_note [LABEL] MESSAGE"),
    "runlog_headline": _runlog("headline", 2, "httk_workflow_runlog_headline LABEL MESSAGE"),
    "runlog_append": _runlog("files", 3, "httk_workflow_runlog_append LABEL MESSAGE FILE..."),
    "declare": cmd_declare,
    "declaration": cmd_declaration,
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
}
