"""Reading VASP outputs: final energies and convergence, error diagnosis, and pre-run cleanup.

Diagnosis only reads files; it never changes inputs. Remedies are planned and
applied separately (:mod:`httk.workflow.vasp.remedies`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ._io import PathLike
from .incar import IncarError, read_incar
from .vasprun import Vasprun, VasprunError, read_vasprun

VASP_OUTPUT_FILES = (
    "OUTCAR", "OSZICAR", "vasprun.xml", "vaspout.h5", "WAVECAR", "WAVEDER", "CHGCAR", "CHG", "EIGENVAL",
    "DOSCAR", "PROCAR", "XDATCAR", "IBZKPT", "PCDOS", "REPORT", "LOCPOT", "ELFCAR", "PARCHG",
    "AECCAR0", "AECCAR1", "AECCAR2", "STOPCAR", "vasp.out", "vasp.err", "process-report.json",
)
"""What :func:`clean_vasp_outputs` removes by default. STOPCAR is included: a leftover one stops the next run."""

VASP_RESTART_ARTIFACTS = ("CONTCAR", "vasp-run-report.json")
"""Kept by :func:`clean_vasp_outputs` unless named in ``also_remove``: restart promotion and remedies read them."""

VASP_ERROR_PATTERNS: tuple[tuple[str, str], ...] = (
    ("zbrent", "ZBRENT: fatal error"),
    ("subspace_matrix", "Sub-Space-Matrix is not hermitian"),
    ("edddav", "EDDDAV"),
    ("eddrmm", "EDDRMM"),
    ("too_few_bands", "TOO FEW BANDS"),
    ("too_few_bands", "number of bands is too small"),
    ("tetrahedron", "Tetrahedron method fails"),
    ("ibzkpt", "VERY BAD NEWS! internal error in subroutine IBZKPT"),
    ("rotation_matrix", "inverse of rotation matrix was not found"),
    ("brmix", "BRMIX: very serious problems"),
)
"""(diagnosis code, text) pairs; a line matches when it contains the text, ignoring case."""

DIAGNOSIS_SOURCES = ("vasp.out", "vasp.err", "OUTCAR")
"""Files scanned by :func:`diagnose_vasp_output`, relative to the workdir; missing ones are skipped."""

_OSZICAR_IONIC = re.compile(r"^\s*\d+\s+F=\s*(\S+)\s+E0=\s*(\S+)")
_OSZICAR_ELECTRONIC = re.compile(r"^\s*[A-Z]{2,3}\s*:\s*\d+\s")
_TOTEN = re.compile(r"free\s+energy\s+TOTEN\s*=\s*(\S+)")
_SIGMA0 = re.compile(r"energy\(sigma->0\)\s*=\s*(\S+)")
_ITERATION = re.compile(r"-\s*Iteration\s+(\d+)\s*\(\s*(\d+)\s*\)")
_ECHOED = re.compile(r"^\s+(NELM|NSW|IBRION)\s*=\s*(-?\d+)")  # OUTCAR's echo of the values VASP used


@attrs.frozen
class DiagnosisEvidence:
    """One matched error line: its code, the file, the 1-based line number, and the line."""

    code: str
    source: str
    line_number: int
    line: str


@attrs.frozen
class VaspResults:
    """What the outputs of one run say.

    ``energy`` is the last free energy (vasprun.xml ``e_fr_energy``, else
    OSZICAR ``F=``, else OUTCAR ``TOTEN``) and ``energy_sigma0`` the last σ→0
    energy, in eV. ``ionic_steps`` and ``electronic_steps`` (the SCF steps of
    the last ionic step) come from vasprun.xml when it has them, else OSZICAR
    (else, for the SCF steps, OUTCAR's last ``Iteration n(k)``).
    ``electronic_converged`` is VASP's own word when OUTCAR has it for the last
    SCF (``aborting loop because EDIFF is reached`` or VASP 6's ``EDIFF was not
    reached (unconverged)``), else whether the last SCF stopped before NELM
    steps. ``converged`` is ``finished`` (OUTCAR's timing section, else a
    complete vasprun.xml), no electronic non-convergence, for a relaxation
    (IBRION 1/2/3 with NSW > 0) ``reached_accuracy``, and no ``problems``.
    IBRION, NSW and NELM are the values VASP used (vasprun.xml
    ``<parameters>``, else OUTCAR's echo of them) when present, else the INCAR's. ``problems`` lists what
    could not be read — an unreadable INCAR or vasprun.xml is never taken for
    an empty one — and ``vasprun`` is the parsed vasprun.xml, if any.
    """

    energy: float | None
    energy_sigma0: float | None
    ionic_steps: int
    electronic_steps: int
    finished: bool
    reached_accuracy: bool
    electronic_converged: bool | None
    relaxation: bool
    converged: bool
    problems: tuple[str, ...] = ()
    vasprun: Vasprun | None = attrs.field(default=None, eq=False, repr=False)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _lines(path: Path) -> Iterable[str]:
    # Streamed: an OUTCAR can be gigabytes.
    with open(path, encoding="utf-8", errors="replace") as handle:
        yield from handle


def _int_tag(tags: Mapping[str, Any], name: str, default: int) -> int:
    value = tags.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float):
        return int(value)
    try:
        return int(float(str(value).split()[0]))
    except (ValueError, IndexError):
        return default


@attrs.frozen
class _Oszicar:
    energy: float | None
    sigma0: float | None
    ionic: int
    electronic: int


def _read_oszicar(path: Path) -> _Oszicar:
    energy = sigma0 = None
    ionic = electronic = current = 0  # current: SCF steps since the last ionic line; a killed run leaves one open
    for line in _lines(path):
        if match := _OSZICAR_IONIC.match(line):
            ionic += 1
            energy, sigma0 = _float(match.group(1)), _float(match.group(2))
            electronic, current = current, 0
        elif _OSZICAR_ELECTRONIC.match(line):
            current += 1
    return _Oszicar(energy=energy, sigma0=sigma0, ionic=ionic, electronic=current or electronic)


@attrs.frozen
class _Outcar:
    energy: float | None
    sigma0: float | None
    finished: bool
    reached: bool
    scf_verdict: bool | None  # VASP's own word on the last SCF, when it gave one for it
    scf_steps: int  # SCF steps of the last ionic step (the k of its last "Iteration n(k)")
    used: dict[str, int]  # NELM, NSW, IBRION as OUTCAR echoes them


def _read_outcar(path: Path) -> _Outcar:
    energy = sigma0 = None
    finished = reached = False
    ionic, verdict, verdict_step, steps = 0, None, -1, 0
    used: dict[str, int] = {}
    for line in _lines(path):
        if match := _ITERATION.search(line):
            ionic, steps = int(match.group(1)), int(match.group(2))
        elif match := _ECHOED.match(line):
            used.setdefault(match.group(1), int(match.group(2)))
        elif match := _TOTEN.search(line):
            energy = _float(match.group(1))
        elif match := _SIGMA0.search(line):
            sigma0 = _float(match.group(1))
        elif "aborting loop" in line:
            # VASP 5 writes only the converged form; VASP 6 also "EDIFF was not reached (unconverged)".
            verdict, verdict_step = "because EDIFF is reached" in line, ionic
        elif "General timing and accounting" in line:
            finished = True
        elif "reached required accuracy" in line:
            reached = True
    # A verdict from an earlier ionic step says nothing about the last SCF (VASP 5 is silent on failure).
    return _Outcar(energy, sigma0, finished, reached, verdict if verdict_step == ionic else None, steps, used)


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def extract_vasp_results(workdir: PathLike = ".") -> VaspResults:
    """Read vasprun.xml, OSZICAR, OUTCAR and INCAR of ``workdir`` (each optional) into :class:`VaspResults`."""
    directory = Path(workdir)
    problems: list[str] = []
    run = None
    if (directory / "vasprun.xml").is_file():
        try:
            run = read_vasprun(directory / "vasprun.xml")
        except VasprunError as error:
            problems.append(str(error))
    oszicar = _read_oszicar(directory / "OSZICAR") if (directory / "OSZICAR").is_file() else None
    outcar = _read_outcar(directory / "OUTCAR") if (directory / "OUTCAR").is_file() else None
    tags: Mapping[str, Any] = {}
    if (directory / "INCAR").is_file():
        try:
            tags = read_incar(directory / "INCAR")
        except IncarError as error:
            problems.append(f"the INCAR cannot be read: {error}")
    # What VASP used beats what the INCAR asked for: vasprun.xml's parameters and OUTCAR's echo have every
    # default resolved.
    parameters: dict[str, Any] = {**tags, **(outcar.used if outcar else {}), **(run.parameters if run else {})}
    with_steps = run if run is not None and run.ionic_steps else None
    energy = _first(with_steps and run.energy, oszicar and oszicar.energy, outcar and outcar.energy)
    sigma0 = _first(with_steps and run.energy_sigma0, oszicar and oszicar.sigma0, outcar and outcar.sigma0)
    ionic = with_steps.ionic_steps if with_steps else (oszicar.ionic if oszicar else 0)
    electronic = with_steps.electronic_steps[-1] if with_steps else 0
    electronic = electronic or (oszicar.electronic if oszicar else 0) or (outcar.scf_steps if outcar else 0)
    finished = outcar.finished if outcar is not None else bool(run is not None and run.complete)
    reached = outcar.reached if outcar is not None else bool(run is not None and run.ionic_converged)
    relaxation = _int_tag(parameters, "IBRION", -1) in (1, 2, 3) and _int_tag(parameters, "NSW", 0) > 0
    counted = electronic < _int_tag(parameters, "NELM", 60) if electronic else None
    electronic_ok = _first(outcar and outcar.scf_verdict, counted)
    if run is not None and not run.complete and outcar is None:
        problems.append(run.error or "vasprun.xml is truncated")
    converged = (
        finished and electronic_ok is not False and (reached or not relaxation) and not problems
    )
    return VaspResults(
        energy=energy, energy_sigma0=sigma0, ionic_steps=ionic, electronic_steps=electronic, finished=finished,
        reached_accuracy=reached, electronic_converged=electronic_ok, relaxation=relaxation, converged=converged,
        problems=tuple(problems), vasprun=run,
    )


def diagnose_vasp_output(
    workdir: PathLike = ".",
    sources: Sequence[str] = DIAGNOSIS_SOURCES,
    patterns: Sequence[tuple[str, str]] = VASP_ERROR_PATTERNS,
) -> list[DiagnosisEvidence]:
    """Every line of ``sources`` (relative to ``workdir``) that matches ``patterns``, at most one per code and file.

    Matching is a case-insensitive substring test. Order: by source, then line.
    """
    found: list[DiagnosisEvidence] = []
    lowered = [(code, text.lower()) for code, text in patterns]
    for source in sources:
        path = Path(workdir) / source
        if not path.is_file():
            continue
        seen: set[str] = set()
        for number, line in enumerate(_lines(path), start=1):
            low = line.lower()
            for code, text in lowered:
                if code not in seen and text in low:
                    seen.add(code)
                    found.append(DiagnosisEvidence(code=code, source=source, line_number=number, line=line.strip()))
    return found


def diagnosis_codes(evidence: Iterable[DiagnosisEvidence]) -> list[str]:
    """The distinct codes of ``evidence`` in first-seen order."""
    return list(dict.fromkeys(item.code for item in evidence))


def clean_vasp_outputs(
    workdir: PathLike = ".",
    also_remove: Sequence[str] = (),
    keep: Sequence[str] = (),
) -> list[str]:
    """Remove the usual VASP outputs from ``workdir`` before a fresh run; return the names removed.

    Removes the files of :data:`VASP_OUTPUT_FILES` plus ``also_remove``, minus
    ``keep``. :data:`VASP_RESTART_ARTIFACTS` are preserved unless named in
    ``also_remove``. Names are plain file names in ``workdir``; a name both kept
    and removed is refused, and directories are never removed.
    """
    for name in (*also_remove, *keep):
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"clean_vasp_outputs takes plain file names, got {name!r}")
    both = sorted(set(also_remove) & set(keep))
    if both:
        raise ValueError(f"names both kept and removed: {', '.join(both)}")
    names = [name for name in dict.fromkeys((*VASP_OUTPUT_FILES, *also_remove)) if name not in keep]
    removed = []
    for name in names:
        path = Path(workdir) / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(name)
    return removed
