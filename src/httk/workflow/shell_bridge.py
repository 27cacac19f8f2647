"""The one implementation behind the Bash runner SDK: ``python -m httk.workflow.shell_bridge COMMAND ARGS...``.

Every function of ``shell/httk-workflow.sh`` is a thin call into a command of
this module, which drives the same :class:`~httk.workflow.sdk.Attempt` the
Python SDK exposes, so a Bash runner and a Python runner publish the same bytes
(spec 002, the parity table; docs/sdks/sdk_parity.md). This module owns the
dispatch, ``batch``, the commands ``httk_workflow_main`` uses around a handler
(``describe``, ``begin``, ``no_outcome``, ``error``) and the commands that need
no attempt; the attempt-bound ones are in :mod:`httk.workflow.shell_attempt`.

A Bash attempt is one draft across many bridge processes: each process binds a
fresh ``Attempt`` and resumes the ``outcome.tmp.<uuid>/`` an earlier call left,
so spawn, spawn, put, gather in four processes builds the draft one process
would. ``batch`` runs several commands, one per line of stdin, against one
``Attempt`` in one interpreter start. ``--serve`` is the co-process
``httk_workflow_main`` starts so that one interpreter answers every call of an
attempt, each as if it were a process of its own (:mod:`httk.workflow.shell_serve`).

Exit statuses follow the spec's discipline: 0 success, 1 a legitimately absent
answer (silent), 2 a refused call (one message on stderr); ``run`` reports the
supervised program's class instead (0, 22, 124, 125), and ``vasp_run`` the VASP
classes of :mod:`httk.workflow.shell_vasp` (0, 3, 20, 21, 22, 124, 125). Imports are deferred to
the command that needs them: a call's cost is interpreter start-up plus what it
imports, and ``calc`` or ``run`` should not pay for the SDK.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import shell_attempt, shell_vasp
from .shell_attempt import (
    BUDGETS,
    EXIT_ABSENT,
    EXIT_OK,
    EXIT_REFUSED,
    Absent,
    Refused,
    Session,
    absolute,
    assignments,
    count_args,
    integer_arg,
    json_arg,
    json_object_arg,
    parse_options,
    seconds_arg,
)

# --------------------------------------------------------------------------- lifecycle of httk_workflow_main


def cmd_describe(session: Session, args: list[str]) -> int:
    """Print the runner description exactly as ``Runner.main --describe`` does."""
    count_args(args, 0, 0, "describe")
    session.runner().description(session.out)  # Runner.description prints it (spec 002)
    return EXIT_OK


def cmd_begin(session: Session, args: list[str]) -> int:
    """Bind, replay sealed batches, record the step set; print the step, or publish unknown_step (1)."""
    from .sdk import record_runner_steps

    count_args(args, 0, 0, "begin")
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
    count_args(args, 0, 0, "no_outcome")
    attempt = session.attempt()
    if not attempt.published:
        # Runner._dispatch with the do-nothing stand-in is exactly the Python path for this ending.
        session.runner()._dispatch(attempt)
    return EXIT_OK


def cmd_error(session: Session, args: list[str]) -> int:
    """Discard the unpublished draft and write ``error.json`` for a handler that died."""
    import shutil
    from pathlib import Path

    from .attempt_records import RunnerErrorDocument
    from .outcome import DRAFT_PREFIX, write_error
    from .runner_env import durable_from_env

    options, positional = parse_options(args, values=("step", "file", "line", "command", "status", "kind"))
    count_args(positional, 0, 0, "error --step S --status N --file F --line L --command C [--kind errexit|exit]")
    control = os.environ.get("HTTK_WORKFLOW_CONTROL_DIR")
    if not control:
        raise Refused("HTTK_WORKFLOW_CONTROL_DIR is not set")
    # Deliberately without binding an Attempt: a breadcrumb must be written even when the context is corrupt.
    for draft in Path(control).glob(f"{DRAFT_PREFIX}*"):
        shutil.rmtree(draft, ignore_errors=True)
    # Lenient throughout: the breadcrumb matters more than any one of its members.
    status, command, line = options.get("status", "?"), options.get("command", ""), options.get("line", "")
    if options.get("kind", "errexit") == "errexit":
        exception, message = "CommandFailed", f"command {command!r} failed with status {status}"
    else:
        exception, message = "HandlerExit", f"the handler exited with status {status} ({command})"
    document = RunnerErrorDocument(
        exception,
        message,
        step=options.get("step") or os.environ.get("HTTK_WORKFLOW_STEP"),
        file=options.get("file") or None,
        line=int(line) if line.isdigit() else None,
        command=command,
    )
    write_error(Path(control), document, durable=durable_from_env())
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
        raise Refused(
            "usage: httk_workflow_run [--timeout S] [--inactivity S] [--follow F]... [--checker CMD]... -- ARGV"
        )
    checkers: list[list[str]] = [[command] for command in options.get("checker", [])]
    for text in options.get("checker-argv", []):
        value = json_arg(text, "--checker-argv")
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise Refused("--checker-argv must be a non-empty JSON array of strings")
        checkers.append(value)
    supervisor = ProcessSupervisor(
        argv,
        cwd=os.getcwd(),
        timeout=seconds_arg(options.get("timeout"), "--timeout"),
        inactivity_timeout=seconds_arg(options.get("inactivity"), "--inactivity"),
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


_JOB_TEXTS = ("runner-source", "runner-sha256", "initial-step", "pool", "executor", "workdir-mode", "data-mode", "tag")


def cmd_job_prepare(session: Session, args: list[str]) -> int:
    """Write job.json (``prepare_job_payload``) from ``JobSpec`` options; print the payload directory."""
    from .protocol import JobSpec, prepare_job_payload
    from .runner_env import durable_from_env

    options, positional = parse_options(
        args,
        values=(
            "name",
            "workflow",
            "runner-path",
            "inputs",
            "priority",
            "resources",
            "declarations",
            *_JOB_TEXTS,
            *BUDGETS,
        ),
        multi=("input", "capability", "retry-on", "declaration"),
    )
    count_args(positional, 1, 1, "httk_workflow_job_prepare DIR --name N --workflow W --runner-path P [...]")
    missing = [name for name in ("name", "workflow", "runner-path") if name not in options]
    if missing:
        raise Refused(f"httk_workflow_job_prepare needs --{missing[0]}")
    members: dict[str, Any] = {
        "name": options["name"],
        "workflow": options["workflow"],
        "runner_path": options["runner-path"],
        "inputs": {
            **(json_object_arg(options["inputs"], "--inputs") if "inputs" in options else {}),
            **assignments(options.get("input", []), "--input"),
        },
        "declarations": {
            **(json_object_arg(options["declarations"], "--declarations") if "declarations" in options else {}),
            **assignments(options.get("declaration", []), "--declaration"),
        },
        "capabilities": tuple(options.get("capability", ())),
        "retry_on": tuple(options.get("retry-on", ())),
    }
    for name in _JOB_TEXTS:
        if name in options:
            members[name.replace("-", "_")] = options[name]
    if "priority" in options:
        members["priority"] = integer_arg(options["priority"], "--priority")
    if "resources" in options:
        members["resources"] = json_object_arg(options["resources"], "--resources")
    for name in BUDGETS:
        if name in options:
            members[name.replace("-", "_")] = integer_arg(options[name], f"--{name}", nullable=True)
    directory = prepare_job_payload(absolute(positional[0]), JobSpec(**members), durable=durable_from_env())
    session.emit(os.fspath(directory))
    return EXIT_OK


def cmd_calc(session: Session, args: list[str]) -> int:
    """``evaluate_expression`` with ``NAME=NUMBER`` variables; prints the number."""
    from .runtime_utils import evaluate_expression

    count_args(args, 1, None, "httk_calc EXPR [NAME=NUMBER]...")
    variables: dict[str, Any] = {}
    for name, value in assignments(args[1:], "variable").items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refused(f"variable {name!r} must be a number")
        variables[name] = value
    session.out.write(f"{evaluate_expression(args[0], variables)}\n")
    return EXIT_OK


def cmd_template_render(session: Session, args: list[str]) -> int:
    """Render TEMPLATE with VALUES (a JSON object, or a JSON file) into OUTPUT, or to stdout with ``-``."""
    from .runtime_utils import render_template

    count_args(args, 2, 3, "httk_template_render TEMPLATE VALUES_JSON [OUTPUT|-]")
    values: Any = args[1]
    if values.lstrip().startswith("{"):
        values = json_object_arg(values, "template values")
    output = args[2] if len(args) == 3 and args[2] != "-" else None
    try:
        rendered = render_template(args[0], values, output)
    except KeyError as error:
        # A placeholder without a value is the legitimately absent answer: status 1, silent like every
        # other absent answer, so a loop that renders past the end of an array leaves no error-like line.
        raise Absent(str(error)) from None
    if output is None:
        session.out.write(rendered)
    return EXIT_OK


def cmd_compress(session: Session, args: list[str]) -> int:
    from .runtime_utils import compress_files

    options, positional = parse_options(args, values=("method",), flags=("remove",))
    count_args(positional, 1, None, "httk_compress [--method gz|bz2|xz] [--remove] FILE...")
    compress_files(positional, method=options.get("method", "gz"), remove=bool(options.get("remove")))
    return EXIT_OK


def cmd_decompress(session: Session, args: list[str]) -> int:
    from .runtime_utils import decompress_files

    options, positional = parse_options(args, flags=("remove",))
    count_args(positional, 1, None, "httk_decompress [--remove] FILE...")
    decompress_files(positional, remove=bool(options.get("remove")))
    return EXIT_OK


def cmd_libpath(session: Session, args: list[str]) -> int:
    """Where the packaged ``httk-workflow.sh`` is, for sourcing it outside a manager."""
    count_args(args, 0, 0, "libpath")
    session.emit(os.path.join(os.path.dirname(os.path.abspath(__file__)), "shell", "httk-workflow.sh"))
    return EXIT_OK


def cmd_batch(session: Session, args: list[str]) -> int:
    """Run the commands on stdin, one per line, against one attempt; stop at the first failing line.

    A line is a JSON array of strings, or words split like a POSIX shell would
    (quotes and backslashes; no expansion). Blank lines and ``#`` comments are
    skipped. A command is named by its bridge name or its Bash function name.
    """
    import shlex

    count_args(args, 0, 0, "httk_workflow_batch < COMMANDS")
    for number, line in enumerate(sys.stdin, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            words = json_arg(text, f"batch line {number}") if text.startswith("[") else shlex.split(text)
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
    **shell_attempt.COMMANDS,
    "run": cmd_run,
    "job_prepare": cmd_job_prepare,
    "calc": cmd_calc,
    "template_render": cmd_template_render,
    "compress": cmd_compress,
    "decompress": cmd_decompress,
    "libpath": cmd_libpath,
    "batch": cmd_batch,
    **shell_vasp.COMMANDS,
}


#: Commands whose function is spelled ``httk_NAME`` rather than ``httk_workflow_NAME``.
_UTILITIES = frozenset({"calc", "template_render", "compress", "decompress", *shell_vasp.COMMANDS})


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
    session.command = ("httk_" if name in _UTILITIES else "httk_workflow_") + name
    label = where + session.command
    if command is None:
        sys.stderr.write(f"{where}httk.workflow.shell_bridge: unknown command {name!r}\n")
        return EXIT_REFUSED
    try:
        return command(session, list(argv[1:]))
    except Absent:
        return EXIT_ABSENT
    except (Refused, ValueError, TypeError, RuntimeError, OSError) as error:
        sys.stderr.write(f"{label}: {error}\n")
        return EXIT_REFUSED
    except Exception as error:  # noqa: BLE001 - a broken call must never look like an absent answer
        sys.stderr.write(f"{label}: {type(error).__name__}: {error}\n")
        return EXIT_REFUSED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m httk.workflow.shell_bridge``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--serve"]:
        from .shell_serve import serve

        return serve(dispatch, Session, command_name)
    if not args:
        commands = ", ".join(sorted(COMMANDS))
        sys.stderr.write(f"usage: python -m httk.workflow.shell_bridge COMMAND ARGS... ({commands})\n")
        return EXIT_REFUSED
    session = Session(sys.stdout)
    status = dispatch(session, args)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
