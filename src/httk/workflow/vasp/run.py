"""Supervised VASP execution with a built-in, checker-free diagnosis and a run report.

:func:`run_vasp` runs the VASP command under
:class:`httk.workflow.supervision.ProcessSupervisor` in the calculation
directory, then reads the outputs and writes ``vasp-run-report.json``
(``httk-workflow-vasp-run-report`` version 1), which is what
:func:`httk.workflow.vasp.plan_vasp_remedy` reads.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from httk.workflow.supervision import ProcessSupervisor, SupervisedResult

from ._io import PathLike, write_json
from .outputs import diagnose_vasp_output, diagnosis_codes, extract_vasp_results

RUN_REPORT_NAME = "vasp-run-report.json"
RUN_REPORT_FORMAT = "httk-workflow-vasp-run-report"
VASP_COMMAND_ENV = "HTTK_VASP_COMMAND"
"""The environment form of the ``vasp.command`` setting, read when no command is given."""

MAX_WORKDIR_PATH = 240
"""Longest absolute workdir path accepted; VASP keeps file paths in fixed 256-character Fortran buffers."""


class VaspWorkdirError(ValueError):
    """A calculation directory VASP could not use safely."""


@attrs.frozen
class VaspRunResult:
    """How :func:`run_vasp` ended; ``report`` is the document written to ``vasp-run-report.json``."""

    returncode: int | None
    timed_out: bool
    diagnosis: tuple[str, ...]
    converged: bool
    energy: float | None
    report_path: str
    supervised: SupervisedResult = attrs.field(eq=False, repr=False)
    report: dict[str, Any] = attrs.field(eq=False, repr=False)


def validate_vasp_workdir(path: PathLike = ".") -> Path:
    """The absolute path of ``path`` once it is an existing directory VASP can use.

    Refused (:class:`VaspWorkdirError`): a path that is not a directory, an
    absolute path longer than :data:`MAX_WORKDIR_PATH` (240) characters, or one
    containing whitespace (some VASP builds and MPI launchers split or truncate
    such paths). The limit is deliberately below VASP's 256-character buffers so
    that appended file names still fit.
    """
    absolute = Path(path).absolute()
    text = os.fspath(absolute)
    if len(text) > MAX_WORKDIR_PATH:
        raise VaspWorkdirError(f"workdir path is {len(text)} characters, over the limit of {MAX_WORKDIR_PATH}: {text}")
    if any(char.isspace() for char in text):
        raise VaspWorkdirError(f"workdir path contains whitespace: {text!r}")
    if not absolute.is_dir():
        raise VaspWorkdirError(f"workdir is not a directory: {text}")
    return absolute


def vasp_command(command: Sequence[str] | str | None = None) -> list[str]:
    """The argv to run: a list as given, a string (the ``vasp.command`` setting) split with ``shlex``,
    or, for ``None``, ``$HTTK_VASP_COMMAND`` split the same way."""
    if command is None:
        command = os.environ.get(VASP_COMMAND_ENV)
        if not command:
            raise ValueError(f"no VASP command: pass command= or set the vasp.command setting ({VASP_COMMAND_ENV})")
    argv = shlex.split(command) if isinstance(command, str) else [os.fspath(item) for item in command]
    if not argv:
        raise ValueError("the VASP command is empty")
    return argv


def run_vasp(
    workdir: PathLike = ".",
    command: Sequence[str] | str | None = None,
    *,
    timeout: float | None = None,
    inactivity_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    checkers: Sequence[Sequence[str]] = (),
    stdout: str = "vasp.out",
    stderr: str = "vasp.err",
) -> VaspRunResult:
    """Run VASP in ``workdir`` supervised, diagnose the outputs, and write the run report.

    The workdir is first checked by :func:`validate_vasp_workdir`; ``command``
    is resolved by :func:`vasp_command`. Output goes to ``stdout``/``stderr``
    in the workdir and the supervisor's ``process-report.json`` beside them.
    The diagnosis is :func:`~httk.workflow.vasp.outputs.diagnose_vasp_output`
    over stdout, stderr and OUTCAR, plus ``electronic_unconverged`` when the
    last SCF hit NELM. ``converged`` requires returncode 0, no timeout, no
    diagnosis code, and :attr:`VaspResults.converged`. A command that cannot
    start raises ``OSError`` after the process report is written.
    """
    directory = validate_vasp_workdir(workdir)
    argv = vasp_command(command)
    supervised = ProcessSupervisor(
        argv, cwd=directory, env=env, timeout=timeout, inactivity_timeout=inactivity_timeout,
        checkers=checkers, stdout_path=stdout, stderr_path=stderr,
    ).run()
    evidence = diagnose_vasp_output(directory, sources=(stdout, stderr, "OUTCAR"))
    results = extract_vasp_results(directory)
    codes = diagnosis_codes(evidence)
    if results.electronic_converged is False and "electronic_unconverged" not in codes:
        codes.append("electronic_unconverged")
    converged = supervised.returncode == 0 and not supervised.timed_out and not codes and results.converged
    report = {
        "format": RUN_REPORT_FORMAT, "format_version": 1,
        "argv": list(argv), "returncode": supervised.returncode, "timed_out": supervised.timed_out,
        "status": supervised.status, "exit_class": supervised.exit_class,
        "diagnosis": codes,
        "evidence": [attrs.asdict(item) for item in evidence],
        "converged": converged, "energy": results.energy, "energy_sigma0": results.energy_sigma0,
        "ionic_steps": results.ionic_steps, "electronic_steps": results.electronic_steps,
        "finished": results.finished, "problems": list(results.problems), "process_report": "process-report.json",
    }
    report_path = directory / RUN_REPORT_NAME
    write_json(report_path, report)
    return VaspRunResult(
        returncode=supervised.returncode, timed_out=supervised.timed_out, diagnosis=tuple(codes),
        converged=converged, energy=results.energy, report_path=os.fspath(report_path),
        supervised=supervised, report=report,
    )


def read_vasp_run_report(path: PathLike = RUN_REPORT_NAME) -> dict[str, Any]:
    """Load a run report, refusing anything but ``httk-workflow-vasp-run-report`` version 1."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("format") != RUN_REPORT_FORMAT:
        raise ValueError(f"{path} is not an {RUN_REPORT_FORMAT} document")
    if document.get("format_version") != 1:
        raise ValueError(f"{path} has unsupported format_version {document.get('format_version')!r}")
    return document
