"""The VASP commands of the Bash bridge: the functions of ``shell/httk-vasp.sh``.

Each ``cmd_vasp_*`` calls one helper of :mod:`httk.workflow.vasp` — the same
code a Python runner calls — on the current directory (or the one named), so a
Bash runner writes the bytes a Python runner writes. None needs an attempt.

Statuses: the library's 0/1/2 discipline (spec 002), and for
``httk_vasp_run`` the class of the run, mirroring :class:`~httk.workflow.vasp.VaspRunResult`:
0 converged; :data:`EXIT_VASP_UNCONVERGED` (20) VASP ended normally without a
diagnosis but the result is not converged (``converged`` false, ``diagnosis``
empty); :data:`EXIT_VASP_DIAGNOSED` (21) the outputs show a diagnosed VASP error
(``diagnosis`` non-empty, what :func:`~httk.workflow.vasp.plan_vasp_remedy`
reads); 22, 124 and 125 as ``httk_workflow_run``; :data:`EXIT_VASP_WORKDIR` (3)
a workdir :func:`~httk.workflow.vasp.validate_vasp_workdir` refuses
(:class:`~httk.workflow.vasp.VaspWorkdirError`), with nothing run or written.
docs/sdks/native_bash_api.md, "VASP".
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from .shell_attempt import (
    EXIT_OK,
    Absent,
    Refused,
    Session,
    assignments,
    count_args,
    dotted,
    emit_present,
    json_arg,
    parse_options,
    seconds_arg,
)

EXIT_VASP_WORKDIR = 3
EXIT_VASP_UNCONVERGED = 20
EXIT_VASP_DIAGNOSED = 21


def run_status(result: Any) -> int:
    """The Bash status of a :class:`~httk.workflow.vasp.VaspRunResult`.

    A timeout is reported first (its outputs are partial); then a diagnosis,
    since it is what a remedy is planned from, however the process ended; then
    the supervisor's class (125 stopped, 22 nonzero exit); then convergence.
    """
    from .supervision import EXIT_FAILED, EXIT_STOPPED, EXIT_SUCCEEDED, EXIT_TIMEOUT

    if result.timed_out:
        return EXIT_TIMEOUT
    if result.diagnosis:
        return EXIT_VASP_DIAGNOSED
    if result.supervised.exit_class != EXIT_SUCCEEDED:
        return EXIT_STOPPED if result.supervised.exit_class == EXIT_STOPPED else EXIT_FAILED
    return EXIT_OK if result.converged else EXIT_VASP_UNCONVERGED


def _workdir_refused(session: Session, error: Exception) -> int:
    sys.stderr.write(f"{session.command}: {error}\n")
    return EXIT_VASP_WORKDIR


def cmd_vasp_run(session: Session, args: list[str]) -> int:
    """``run_vasp`` in ``--workdir`` (default: here); ARGV after ``--``, else ``$HTTK_VASP_COMMAND``."""
    from .supervision import EXIT_STOPPED
    from .vasp import VaspWorkdirError, run_vasp, validate_vasp_workdir, vasp_command

    options, argv = parse_options(
        args,
        values=("workdir", "timeout", "inactivity", "stdout", "stderr"),
        multi=("checker", "checker-argv"),
        stop_at_positional=True,
    )
    checkers: list[list[str]] = [[command] for command in options.get("checker", [])]
    for text in options.get("checker-argv", []):
        value = json_arg(text, "--checker-argv")
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise Refused("--checker-argv must be a non-empty JSON array of strings")
        checkers.append(value)
    timeout = seconds_arg(options.get("timeout"), "--timeout")
    inactivity = seconds_arg(options.get("inactivity"), "--inactivity")
    workdir = options.get("workdir", ".")
    try:
        validate_vasp_workdir(workdir)
    except VaspWorkdirError as error:
        return _workdir_refused(session, error)
    command = argv or vasp_command(None)  # no command anywhere: refused (2) before anything runs
    session.out.flush()
    try:
        result = run_vasp(
            workdir, command, timeout=timeout, inactivity_timeout=inactivity, checkers=checkers,
            stdout=options.get("stdout", "vasp.out"), stderr=options.get("stderr", "vasp.err"),
        )
    except OSError as error:
        # The process report of the failed start is written; the class is the launcher's "could not start".
        sys.stderr.write(f"{session.command}: could not start {command[0]!r}: {error}\n")
        return EXIT_STOPPED
    return run_status(result)


def cmd_vasp_validate_workdir(session: Session, args: list[str]) -> int:
    """``validate_vasp_workdir``: print the absolute directory, or status 3 naming why VASP cannot use it."""
    from .vasp import VaspWorkdirError, validate_vasp_workdir

    count_args(args, 0, 1, "httk_vasp_validate_workdir [DIR]")
    try:
        session.emit(os.fspath(validate_vasp_workdir(args[0] if args else ".")))
    except VaspWorkdirError as error:
        return _workdir_refused(session, error)
    return EXIT_OK


def _index(word: str) -> bool:
    """Whether ``word`` is an index or count in ASCII digits (``str.isdigit`` takes '²' too, which ``int`` refuses)."""
    return re.fullmatch(r"[0-9]+", word) is not None


def cmd_vasp_report(session: Session, args: list[str]) -> int:
    """``read_vasp_run_report``: the whole run report, or one dotted field; no report yet, or a null field, is 1."""
    from .vasp import read_vasp_run_report
    from .vasp.run import RUN_REPORT_NAME

    options, positional = parse_options(args, values=("path",))
    count_args(positional, 0, 1, "httk_vasp_report [FIELD] [--path vasp-run-report.json]")
    path = options.get("path", RUN_REPORT_NAME)
    if not os.path.lexists(path):
        raise Absent(path)  # no run has reported here yet
    document = read_vasp_run_report(path)  # another document or format version: refused (2)
    if positional:
        return emit_present(session, dotted(document, positional[0], "the run report"))
    session.emit(document)
    return EXIT_OK


def _grid(words: list[str]) -> tuple[int, int, int]:
    if len(words) != 3 or not all(_index(word) for word in words):
        raise Refused(f"a k-point grid is three positive integers, got {' '.join(words) or 'nothing'!r}")
    return (int(words[0]), int(words[1]), int(words[2]))


def cmd_vasp_kpoints(session: Session, args: list[str]) -> int:
    """``write_automatic_kpoints`` of N1 N2 N3, or of ``automatic_kpoint_grid(--density)``; print the mesh.

    The centering defaults to ``DEFAULT_KPOINT_CENTERING`` (Monkhorst-Pack), as in Python.
    """
    from .vasp import DEFAULT_KPOINT_CENTERING, DEFAULT_KPOINT_ROUNDING, automatic_kpoint_grid, write_automatic_kpoints

    usage = (
        "httk_vasp_kpoints (N1 N2 N3 | --density L [--poscar POSCAR] [--rounding nearest|up]) "
        "[--centering Monkhorst-Pack|Gamma] [--comment TEXT] [--output KPOINTS]"
    )
    names = ("density", "poscar", "rounding", "centering", "comment", "output")
    options, positional = parse_options(args, values=names)
    if "density" in options:
        count_args(positional, 0, 0, usage)
        try:
            density = float(options["density"])  # the helper refuses a length that is not positive and finite
        except ValueError:
            raise Refused(f"--density must be a length in Å, got {options['density']!r}") from None
        grid = automatic_kpoint_grid(
            density, options.get("poscar", "POSCAR"), options.get("rounding", DEFAULT_KPOINT_ROUNDING)
        )
    else:
        if "poscar" in options or "rounding" in options:
            raise Refused("--poscar and --rounding belong to --density")
        count_args(positional, 3, 3, usage)
        grid = _grid(positional)
    mesh = write_automatic_kpoints(
        grid, options.get("output", "KPOINTS"), options.get("centering", DEFAULT_KPOINT_CENTERING),
        options.get("comment"),
    )
    session.emit({"centering": mesh.centering, "comment": mesh.comment, "grid": list(mesh.grid)})
    return EXIT_OK


def cmd_vasp_incar_set(session: Session, args: list[str]) -> int:
    """``update_incar``: each TAG=VALUE (the value rule) set statement by statement, each ``--unset TAG`` removed."""
    from .vasp import update_incar

    options, positional = parse_options(args, values=("path",), multi=("unset",))
    if not positional and "unset" not in options:
        raise Refused("usage: httk_vasp_incar_set TAG=VALUE... [--unset TAG]... [--path INCAR]")
    updates: dict[str, Any] = assignments(positional, "an INCAR assignment")
    for tag in options.get("unset", []):
        updates[tag] = None
    update_incar(updates, options.get("path", "INCAR"))
    return EXIT_OK


def cmd_vasp_incar_get(session: Session, args: list[str]) -> int:
    """``read_incar``: every tag as a JSON object, or one tag's value text; an unset tag is 1."""
    from .vasp import read_incar

    options, positional = parse_options(args, values=("path",))
    count_args(positional, 0, 1, "httk_vasp_incar_get [TAG] [--path INCAR]")
    tags = read_incar(options.get("path", "INCAR"))  # a missing or unreadable INCAR is refused (2)
    if not positional:
        session.emit(tags)
    elif positional[0].upper() in tags:
        session.emit(tags[positional[0].upper()])
    else:
        raise Absent(positional[0])
    return EXIT_OK


COMMANDS: dict[str, Callable[[Session, list[str]], int]] = {
    "vasp_run": cmd_vasp_run,
    "vasp_validate_workdir": cmd_vasp_validate_workdir,
    "vasp_report": cmd_vasp_report,
    "vasp_kpoints": cmd_vasp_kpoints,
    "vasp_incar_set": cmd_vasp_incar_set,
    "vasp_incar_get": cmd_vasp_incar_get,
}
