"""Reading VASP outputs: final energies and convergence, error diagnosis, and pre-run cleanup.

Diagnosis only reads files; it never changes inputs. Remedies are planned and
applied separately (:mod:`httk.workflow.vasp.remedies`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from ._io import PathLike
from .incar import IncarError, read_incar

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

    ``energy`` is the last free energy (OSZICAR ``F=``, else OUTCAR ``TOTEN``)
    and ``energy_sigma0`` the last ``E0``/``energy(sigma->0)``, in eV.
    ``electronic_steps`` counts the SCF steps of the last ionic step in OSZICAR.
    ``converged`` is ``finished`` (OUTCAR ends with its timing section) and the
    last SCF used fewer than NELM steps (INCAR, default 60) and, for a
    relaxation (IBRION 1/2/3 with NSW > 0), ``reached_accuracy``.
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


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _lines(path: Path) -> Iterable[str]:
    # Streamed: an OUTCAR can be gigabytes.
    with open(path, encoding="utf-8", errors="replace") as handle:
        yield from handle


def _int_tag(tags: dict[str, str], name: str, default: int) -> int:
    value = tags.get(name)
    if value is None:
        return default
    try:
        return int(float(value.split()[0]))
    except (ValueError, IndexError):
        return default


def extract_vasp_results(workdir: PathLike = ".") -> VaspResults:
    """Read OSZICAR, OUTCAR and INCAR of ``workdir`` (each optional) into :class:`VaspResults`."""
    directory = Path(workdir)
    energy = sigma0 = None
    ionic = electronic = 0
    oszicar = directory / "OSZICAR"
    if oszicar.is_file():
        current = 0  # SCF steps since the last ionic line; a killed run leaves an open block
        for line in _lines(oszicar):
            if match := _OSZICAR_IONIC.match(line):
                ionic += 1
                energy, sigma0 = _float(match.group(1)), _float(match.group(2))
                electronic, current = current, 0
            elif _OSZICAR_ELECTRONIC.match(line):
                current += 1
        electronic = current or electronic
    finished = reached = False
    outcar = directory / "OUTCAR"
    if outcar.is_file():
        outcar_energy = outcar_sigma0 = None
        for line in _lines(outcar):
            if match := _TOTEN.search(line):
                outcar_energy = _float(match.group(1))
            elif match := _SIGMA0.search(line):
                outcar_sigma0 = _float(match.group(1))
            elif "General timing and accounting" in line:
                finished = True
            elif "reached required accuracy" in line:
                reached = True
        energy = energy if energy is not None else outcar_energy
        sigma0 = sigma0 if sigma0 is not None else outcar_sigma0
    try:
        tags = read_incar(directory / "INCAR") if (directory / "INCAR").is_file() else {}
    except IncarError:
        tags = {}
    relaxation = _int_tag(tags, "IBRION", -1) in (1, 2, 3) and _int_tag(tags, "NSW", 0) > 0
    electronic_ok = electronic < _int_tag(tags, "NELM", 60) if electronic else None
    converged = finished and electronic_ok is not False and (reached or not relaxation)
    return VaspResults(
        energy=energy, energy_sigma0=sigma0, ionic_steps=ionic, electronic_steps=electronic, finished=finished,
        reached_accuracy=reached, electronic_converged=electronic_ok, relaxation=relaxation, converged=converged,
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
