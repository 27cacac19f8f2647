"""A mock VASP: ``python -m httk.workflow.testing.mock_vasp [--fail MODE] [--fail-runs N] [--until-remedied]``.

It reads INCAR, POSCAR, KPOINTS and (when present) POTCAR in the current
directory and writes OUTCAR, OSZICAR, CONTCAR, vasprun.xml and VASP-like
stdout lines, in exactly the shapes :mod:`httk.workflow.vasp.outputs` parses.
Everything is deterministic: the energy is a function of the species, the atom
counts, the cell volume, ENCUT and the k-point mesh; a relaxation (IBRION 1/2/3
with NSW > 0) halves the distance to a species-derived equilibrium volume (ISIF
>= 3) or a residual internal-coordinate energy (ISIF < 3) every ionic step, and
reports ``reached required accuracy`` once an ionic step changes the energy by
less than the EDIFFG tolerance (``|EDIFFG|``, default ``10 * EDIFF``) within NSW steps.

It can be told to fail the ways the reviewed remedy ladder treats, through
``--fail MODE`` or ``MOCK_VASP_FAIL=MODE`` (see :data:`FAILURE_MODES`): every
diagnosis code of :data:`httk.workflow.vasp.VASP_ERROR_PATTERNS`, plus
``electronic_unconverged`` (the last SCF uses NELM steps), ``ionic_unconverged``
(the run ends normally without reaching the required accuracy) and ``crash``
(exit 1 with nothing a diagnosis recognizes). By default a failure repeats on
every run. ``--fail-runs N`` (``MOCK_VASP_FAIL_RUNS``) fails only the first N
runs in this directory, counted in ``.mock-vasp.json``; ``--until-remedied``
(``MOCK_VASP_UNTIL_REMEDIED=1``) fails until an input the remedy for that
failure edits (:data:`REMEDY_INPUTS`) differs from the first failing run, so a
test proves that the remedy, not a counter, made the retry succeed. Both may be
combined: a run fails only while both conditions still say so.

POTCAR is optional for the mock; when present it must hold one potential (one
``TITEL`` line) per POSCAR species, as for VASP. It needs only the standard
library and :mod:`httk.workflow.vasp`, so a workspace's ``vasp.command`` can
name it on any machine that has httk-workflow installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

import attrs

from httk.workflow.vasp.incar import IncarError, element_of, read_incar
from httk.workflow.vasp.kpoints import read_kpoint_mesh
from httk.workflow.vasp.poscar import PoscarError, PoscarHeader, read_poscar_header, reciprocal_lattice

MODULE = "httk.workflow.testing.mock_vasp"
STATE_FILE = ".mock-vasp.json"
"""Kept in the calculation directory (never removed by ``clean_vasp_outputs``): the run counter and snapshot."""

FAILURE_MODES: Mapping[str, tuple[str, ...]] = {
    "zbrent": (" ZBRENT: fatal error in bracketing", "     please rerun with smaller EDIFF, or copy CONTCAR",
               "     to POSCAR and continue"),
    "subspace_matrix": (" WARNING: Sub-Space-Matrix is not hermitian in DAV            4",
                        "         -0.2342512E+01"),
    "edddav": (" Error EDDDAV: Call to ZHEGV failed. Returncode =   7 1  16",),
    "eddrmm": (" WARNING in EDDRMM: call to ZHEGV failed, returncode =   6 3      16",),
    "too_few_bands": (" ERROR: TOO FEW BANDS!! Please increase the parameter NBANDS in file INCAR",),
    "tetrahedron": (" Tetrahedron method fails for NKPT<4. NKPT =   1",),
    "ibzkpt": (" VERY BAD NEWS! internal error in subroutine IBZKPT:",
               " Reciprocal lattice and k-lattice belong to different class of lattices."),
    "rotation_matrix": (" Error: inverse of rotation matrix was not found (increase SYMPREC)       5",),
    "brmix": (" BRMIX: very serious problems", " the old and the new charge density differ"),
    "electronic_unconverged": (),
    "ionic_unconverged": (),
    "crash": (" forrtl: severe (174): SIGSEGV, segmentation fault occurred",),
}
"""Mode -> the lines it prints on stdout (the diagnosis patterns match them)."""

ALIASES = {"subspace": "subspace_matrix", "bands": "too_few_bands", "scf": "electronic_unconverged"}

REMEDY_INPUTS: Mapping[str, tuple[str, ...]] = {
    "zbrent": ("INCAR:POTIM", "INCAR:IBRION", "POSCAR"),
    "subspace_matrix": ("INCAR:ALGO",),
    "edddav": ("INCAR:ALGO",),
    "eddrmm": ("INCAR:ALGO", "INCAR:POTIM"),
    "too_few_bands": ("INCAR:NBANDS",),
    "tetrahedron": ("KPOINTS", "INCAR:ISMEAR"),
    "ibzkpt": ("KPOINTS", "INCAR:SYMPREC"),
    "rotation_matrix": ("INCAR:SYMPREC", "INCAR:ISYM"),
    "brmix": ("INCAR:AMIX", "INCAR:BMIX"),
    "electronic_unconverged": ("INCAR:ALGO",),
    "ionic_unconverged": ("POSCAR", "INCAR:NSW"),
    "crash": (),
}
"""Mode -> what ``--until-remedied`` compares with the first failing run (an INCAR tag or a whole file)."""

#: Where in the run a failure strikes: before any SCF step, inside the first SCF, or after ionic steps.
_AT_START = {"too_few_bands", "tetrahedron", "ibzkpt", "rotation_matrix"}
_IN_SCF = {"subspace_matrix", "edddav", "eddrmm", "brmix", "crash"}


class MockVaspError(Exception):
    """An input the mock cannot run with; printed as VASP would, and the run exits 1."""


@attrs.frozen
class Inputs:
    """What one run read from its directory."""

    header: PoscarHeader
    fractional: tuple[tuple[float, float, float], ...]
    flags: tuple[str, ...]
    species: tuple[str, ...]
    tags: dict[str, str]
    kpoints: tuple[int, int, int]
    centering: str
    potentials: int | None


@attrs.frozen
class IonicStep:
    """One ionic step of the trajectory: its cell scale factor, energy and SCF step count."""

    factor: float
    energy: float
    electronic: int


# -- reading the inputs ------------------------------------------------------------------------------
def _tag(tags: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(tags[name].split()[0].replace("d", "e").replace("D", "e")) if name in tags else default
    except (ValueError, IndexError):
        raise MockVaspError(f"ERROR: INCAR tag {name} = {tags[name]!r} is not a number") from None


def _coordinates(path: Path, header: PoscarHeader) -> tuple[list[tuple[float, float, float]], list[str]]:
    """Fractional coordinates and selective-dynamics flags of every atom (Cartesian rows converted)."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    first = 5 + (1 if header.species else 0) + 1 + (1 if header.selective_dynamics else 0) + 1
    reciprocal = reciprocal_lattice(header.cell)
    factors = header.scale_factors
    positions, flags = [], []
    for row in lines[first:first + header.natoms]:
        fields = row.split()
        values = [float(value) for value in fields[:3]]
        if header.cartesian:
            cartesian = [values[i] * factors[i] for i in range(3)]
            values = [sum(cartesian[k] * reciprocal[i][k] for k in range(3)) for i in range(3)]
        positions.append((values[0], values[1], values[2]))
        flags.append(" ".join(fields[3:6]) if header.selective_dynamics else "")
    return positions, flags


def _potential_count(path: Path) -> int | None:
    if not path.is_file():
        return None
    return sum(1 for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
               if line.strip().startswith("TITEL"))


def _kspacing_grid(header: PoscarHeader, spacing: float) -> tuple[int, int, int]:
    # VASP's KSPACING rule: n_i = max(1, ceil(|b_i| * 2 pi / KSPACING)).
    grid = [max(1, math.ceil(math.sqrt(sum(v * v for v in row)) * 2 * math.pi / spacing - 1e-9))
            for row in reciprocal_lattice(header.cell)]
    return (grid[0], grid[1], grid[2])


def read_inputs(directory: Path) -> Inputs:
    """INCAR, POSCAR, KPOINTS and POTCAR of ``directory``; :class:`MockVaspError` for what VASP would refuse."""
    incar, poscar, kpoints = directory / "INCAR", directory / "POSCAR", directory / "KPOINTS"
    for required in (incar, poscar):
        if not required.is_file():
            raise MockVaspError(f"ERROR: the file {required.name} could not be opened (it is required)")
    try:
        tags = read_incar(incar)
        header = read_poscar_header(poscar)
    except (IncarError, PoscarError) as error:
        raise MockVaspError(f"ERROR: {error}") from None
    positions, flags = _coordinates(poscar, header)
    potentials = _potential_count(directory / "POTCAR")
    species = header.species or tuple(f"X{index + 1}" for index in range(len(header.counts)))
    if potentials is not None and potentials != len(header.counts):
        raise MockVaspError(
            f"ERROR: POTCAR holds {potentials} potentials but POSCAR has {len(header.counts)} species; "
            "assemble one potential per species, in POSCAR order"
        )
    centering = "Monkhorst-Pack"
    if kpoints.is_file():
        try:
            mesh = read_kpoint_mesh(kpoints)
        except (OSError, ValueError):
            mesh = None
        grid, centering = (mesh.grid, mesh.centering) if mesh is not None else ((1, 1, 1), "explicit")
    else:  # no KPOINTS: VASP 6 meshes by KSPACING (default 0.5 per Å), Gamma-centred unless KGAMMA = .FALSE.
        grid = _kspacing_grid(header, _tag(tags, "KSPACING", 0.5))
        centering = "Gamma" if tags.get("KGAMMA", ".TRUE.").strip().upper().startswith((".T", "T")) else centering
    return Inputs(
        header=header, fractional=tuple(positions), flags=tuple(flags), species=species, tags=tags,
        kpoints=grid, centering=centering, potentials=potentials,
    )


# -- the deterministic model -------------------------------------------------------------------------
def _hash_unit(text: str) -> float:
    """A number in [0, 1) derived from ``text`` alone (the first 32 bits of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big") / 2**32


def reference_energy(element: str) -> float:
    """The mock's per-atom energy of an element, in eV, between -8 and -2."""
    return -2.0 - 6.0 * _hash_unit(f"energy:{element}")


def equilibrium_volume(element: str) -> float:
    """The mock's per-atom equilibrium volume of an element, in Å^3, between 10 and 25."""
    return 10.0 + 15.0 * _hash_unit(f"volume:{element}")


def trajectory(inputs: Inputs) -> list[IonicStep]:
    """Every ionic step the run takes; ``[0]`` is the starting geometry."""
    tags, header = inputs.tags, inputs.header
    elements = [element_of(label) for label in inputs.species]
    counts = header.counts
    v0 = sum(equilibrium_volume(e) * n for e, n in zip(elements, counts, strict=True))
    base = sum(reference_energy(e) * n for e, n in zip(elements, counts, strict=True))
    encut = _tag(tags, "ENCUT", 400.0)
    kpoints = inputs.kpoints[0] * inputs.kpoints[1] * inputs.kpoints[2]
    # Basis-set and k-point incompleteness: small, positive, and smaller for better settings.
    base += header.natoms * (0.2 * math.exp(-encut / 150.0) + 0.05 / kpoints)
    stiffness = 0.6 / v0  # eV per (Å^3)^2, about a 100 GPa bulk modulus for every structure
    volume = header.volume
    relaxation = int(_tag(tags, "IBRION", -1)) in (1, 2, 3) and int(_tag(tags, "NSW", 0)) > 0
    isif = int(_tag(tags, "ISIF", 2))
    positions = ",".join(f"{x:.4f}" for p in inputs.fractional for x in p)
    internal = 0.02 * header.natoms * _hash_unit(f"internal:{positions}")

    def energy(v: float, residual: float) -> float:
        return base + 0.5 * stiffness * (v - v0) ** 2 + residual

    steps = [IonicStep(1.0, energy(volume, internal), 14)]
    if not relaxation:
        return steps
    ediff = _tag(tags, "EDIFF", 1e-4)
    tolerance = abs(_tag(tags, "EDIFFG", 10 * ediff)) or 10 * ediff
    nsw = int(_tag(tags, "NSW", 0))
    v, residual = volume, internal
    for _ in range(nsw - 1):
        if isif >= 3:
            v = v0 + (v - v0) / 2
        residual /= 2
        step = IonicStep((v / volume) ** (1 / 3), energy(v, residual), 8)
        converged = abs(step.energy - steps[-1].energy) < tolerance
        steps.append(step)
        if converged:
            break
    return steps


def reached_accuracy(inputs: Inputs, steps: Sequence[IonicStep]) -> bool:
    """Whether the last ionic step changed the energy by less than the tolerance (a relaxation only)."""
    if len(steps) < 2:
        return False
    ediff = _tag(inputs.tags, "EDIFF", 1e-4)
    tolerance = abs(_tag(inputs.tags, "EDIFFG", 10 * ediff)) or 10 * ediff
    return abs(steps[-1].energy - steps[-2].energy) < tolerance


# -- failure control ---------------------------------------------------------------------------------
@attrs.frozen
class Control:
    """How this run is told to fail."""

    mode: str | None = None
    fail_runs: int | None = None
    until_remedied: bool = False


def _snapshot(directory: Path, inputs: Inputs, keys: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key in keys:
        if key.startswith("INCAR:"):
            value = inputs.tags.get(key.split(":", 1)[1])
            out[key] = None if value is None else " ".join(value.split()).lower()
        else:
            path = directory / key
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return out


def decide_failure(directory: Path, inputs: Inputs, control: Control) -> str | None:
    """Count this run in :data:`STATE_FILE` and return the failure mode it plays, or ``None``."""
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        state = {}
    runs = int(state.get("runs", 0)) + 1
    state["runs"] = runs
    mode = control.mode
    failing = mode is not None and (control.fail_runs is None or runs <= control.fail_runs)
    if failing and control.until_remedied:
        snapshot = _snapshot(directory, inputs, REMEDY_INPUTS[mode])  # type: ignore[index]
        first = state.get("first_failure")
        if first is None or first.get("mode") != mode:
            state["first_failure"] = {"mode": mode, "inputs": snapshot}
        elif first["inputs"] != snapshot:
            failing = False
    state["last"] = {"run": runs, "failure": mode if failing else None}
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return mode if failing else None


def control_from(argv: Sequence[str], environ: Mapping[str, str]) -> Control:
    """The failure control from the command line, else the ``MOCK_VASP_*`` environment."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="A deterministic mock of VASP.")
    parser.add_argument("--fail", metavar="MODE", help=f"fail as: {', '.join(FAILURE_MODES)}")
    parser.add_argument("--fail-runs", type=int, metavar="N", help="fail only the first N runs in this directory")
    parser.add_argument("--until-remedied", action="store_true", help="fail until the remedy's inputs changed")
    args = parser.parse_args(list(argv))
    mode = args.fail if args.fail is not None else environ.get("MOCK_VASP_FAIL") or None
    runs_text = environ.get("MOCK_VASP_FAIL_RUNS") or None
    fail_runs = args.fail_runs if args.fail_runs is not None else int(runs_text) if runs_text else None
    until = args.until_remedied or environ.get("MOCK_VASP_UNTIL_REMEDIED", "") in ("1", "true", "yes")
    if mode is not None:
        mode = ALIASES.get(mode, mode)
        if mode not in FAILURE_MODES:
            parser.error(f"unknown failure mode {mode!r}; choose one of {', '.join(FAILURE_MODES)}")
    if fail_runs is not None and fail_runs < 0:
        parser.error("--fail-runs must be zero or more")
    return Control(mode=mode, fail_runs=fail_runs, until_remedied=until)


# -- writing the outputs -----------------------------------------------------------------------------
def vasp_float(value: float, digits: int = 8) -> str:
    """VASP's Fortran ``E`` format: ``-10.839211`` -> ``-.10839211E+02``."""
    if value == 0:
        return f".{'0' * digits}E+00"
    exponent = math.floor(math.log10(abs(value))) + 1
    mantissa = abs(value) / 10**exponent
    text = f"{mantissa:.{digits}f}"
    if text.startswith("1."):  # rounding carried into the next decade
        exponent += 1
        text = f"{mantissa / 10:.{digits}f}"
    sign = "-" if value < 0 else ""
    return f"{sign}{text[1:]}E{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"


def _cell(inputs: Inputs, factor: float) -> list[tuple[float, float, float]]:
    return [(row[0] * factor, row[1] * factor, row[2] * factor) for row in inputs.header.cell]


def poscar_text(inputs: Inputs, factor: float) -> str:
    """The structure after scaling the cell by ``factor``, as a VASP 5 CONTCAR (Direct coordinates)."""
    header = inputs.header
    lines = [header.title or "mock", "   1.00000000000000"]
    lines += ["    " + "  ".join(f"{value:20.16f}" for value in row) for row in _cell(inputs, factor)]
    lines.append("   " + "   ".join(inputs.species))
    lines.append("   " + "   ".join(str(count) for count in header.counts))
    if header.selective_dynamics:
        lines.append("Selective dynamics")
    lines.append("Direct")
    for position, flags in zip(inputs.fractional, inputs.flags, strict=True):
        lines.append("  " + "  ".join(f"{value:.16f}" for value in position) + (f"   {flags}" if flags else ""))
    return "\n".join(lines) + "\n"


def _scf_label(tags: Mapping[str, str]) -> str:
    algo = tags.get("ALGO", "Normal").strip().lower()[:1]
    return {"f": "RMM", "v": "RMM", "a": "CG", "d": "DAV"}.get(algo, "DAV")


def oszicar_text(inputs: Inputs, steps: Sequence[IonicStep], *, open_scf: int = 0) -> str:
    """One SCF block and one ``F= ... E0=`` line per ionic step; ``open_scf`` SCF lines without an ionic line."""
    label = _scf_label(inputs.tags)
    lines = ["       N       E                     dE             d eps       ncg     rms          rms(c)"]
    natoms = inputs.header.natoms
    previous = 0.0
    for number, step in enumerate(steps, start=1):
        for scf in range(1, step.electronic + 1):
            value = step.energy + 0.5 ** scf
            lines.append(f"{label}: {scf:3d}   {vasp_float(value, 12)}   {vasp_float(value - previous, 5)}   "
                         f"{vasp_float(-0.1 * 0.5 ** scf, 5)}   {16 * natoms:4d}   {vasp_float(0.5 ** scf, 3)}")
            previous = value
        sigma0 = step.energy - 1e-4 * natoms
        lines.append(f"{number:4d} F= {vasp_float(step.energy)} E0= {vasp_float(sigma0)}  "
                     f"d E ={vasp_float(step.energy - (steps[number - 2].energy if number > 1 else 0.0), 6)}")
    for scf in range(1, open_scf + 1):
        lines.append(f"{label}: {scf:3d}   {vasp_float(1.0 + 0.5 ** scf, 12)}   {vasp_float(0.5 ** scf, 5)}   "
                     f"{vasp_float(-0.1, 5)}   {16 * natoms:4d}   {vasp_float(0.5 ** scf, 3)}")
    return "\n".join(lines) + "\n"


def outcar_text(inputs: Inputs, steps: Sequence[IonicStep], *, finished: bool, accuracy: bool,
                error: Sequence[str] = ()) -> str:
    """A VASP-shaped OUTCAR: per-step TOTEN and sigma->0 energies, then the closing sections."""
    header, tags = inputs.header, inputs.tags
    lines = [
        " vasp.6.4.2 (httk-workflow mock VASP) complex",
        " running on    1 total cores",
        f" POSCAR = {header.title}",
        f" POTCAR: {'none (mock run)' if inputs.potentials is None else f'{inputs.potentials} potentials'}",
        "",
        f"   NIONS = {header.natoms:6d}",
        f"   k-points: {inputs.kpoints[0]} {inputs.kpoints[1]} {inputs.kpoints[2]} ({inputs.centering})",
        " INCAR:",
        *(f"   {name} = {value}" for name, value in tags.items()),
        "",
    ]
    for number, step in enumerate(steps, start=1):
        lines += [
            f"--------------------------------------- Iteration {number:6d}(  {step.electronic:3d})  "
            "---------------------------------------",
            "",
            f"  volume of cell : {header.volume * step.factor ** 3:14.4f}",
            "  FREE ENERGIE OF THE ION-ELECTRON SYSTEM (eV)",
            "  ---------------------------------------------------",
            f"  free  energy   TOTEN  = {step.energy:20.8f} eV",
            "",
            f"  energy  without entropy= {step.energy:18.8f}"
            f"  energy(sigma->0) = {step.energy - 1e-4 * header.natoms:18.8f}",
            "",
        ]
    lines += list(error)
    if accuracy:
        lines.append(" reached required accuracy - stopping structural energy minimisation")
    if finished:
        lines += [
            "",
            " General timing and accounting informations for this job:",
            " ========================================================",
            "",
            f"                  Total CPU time used (sec):    {0.01 * sum(s.electronic for s in steps):10.3f}",
        ]
    return "\n".join(lines) + "\n"


def _structure_xml(inputs: Inputs, factor: float, name: str | None = None) -> list[str]:
    opening = f' <structure name="{name}">' if name else "  <structure>"
    cell = _cell(inputs, factor)
    volume = inputs.header.volume * factor**3
    return [
        opening,
        "   <crystal>",
        '    <varray name="basis">',
        *(f"     <v> {row[0]:16.8f} {row[1]:16.8f} {row[2]:16.8f} </v>" for row in cell),
        "    </varray>",
        f'    <i name="volume"> {volume:16.8f} </i>',
        "   </crystal>",
        '   <varray name="positions">',
        *(f"    <v> {p[0]:16.8f} {p[1]:16.8f} {p[2]:16.8f} </v>" for p in inputs.fractional),
        "   </varray>",
        "  </structure>" if not name else " </structure>",
    ]


def vasprun_text(inputs: Inputs, steps: Sequence[IonicStep], *, finished: bool) -> str:
    """A small, well-formed vasprun.xml when ``finished``; truncated mid-document otherwise, as VASP leaves it."""
    header = inputs.header
    lines = [
        '<?xml version="1.0" encoding="ISO-8859-1"?>',
        "<modeling>",
        " <generator>",
        '  <i name="program" type="string">vasp </i>',
        '  <i name="version" type="string">6.4.2 (httk-workflow mock)</i>',
        " </generator>",
        " <incar>",
        *(f'  <i name="{escape(name)}">{escape(value)}</i>' for name, value in inputs.tags.items()),
        " </incar>",
        " <kpoints>",
        f'  <generation param="{escape(inputs.centering)}">',
        f'   <v type="int" name="divisions">{inputs.kpoints[0]} {inputs.kpoints[1]} {inputs.kpoints[2]}</v>',
        "  </generation>",
        " </kpoints>",
        " <atominfo>",
        f"  <atoms>{header.natoms}</atoms>",
        f"  <types>{len(header.counts)}</types>",
        '  <array name="atomtypes">',
        "   <set>",
        *(f"    <rc><c>{count}</c><c>{escape(label)}</c></rc>"
          for label, count in zip(inputs.species, header.counts, strict=True)),
        "   </set>",
        "  </array>",
        " </atominfo>",
        *_structure_xml(inputs, 1.0, "initialpos"),
    ]
    for step in steps:
        lines += [
            " <calculation>",
            *_structure_xml(inputs, step.factor),
            "  <energy>",
            f'   <i name="e_fr_energy"> {step.energy:16.8f} </i>',
            f'   <i name="e_wo_entrp"> {step.energy:16.8f} </i>',
            f'   <i name="e_0_energy"> {step.energy - 1e-4 * header.natoms:16.8f} </i>',
            "  </energy>",
            " </calculation>",
        ]
    if finished:
        lines += [*_structure_xml(inputs, steps[-1].factor, "finalpos"), "</modeling>"]
    return "\n".join(lines) + "\n"


def _write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text, encoding="utf-8")


def run(directory: Path, control: Control, out: list[str]) -> int:
    """One mock VASP run in ``directory``: write the outputs, append stdout lines to ``out``, return the status."""
    try:
        inputs = read_inputs(directory)
    except MockVaspError as error:
        out.append(f" {error}")
        return 1
    failure = decide_failure(directory, inputs, control)
    steps = trajectory(inputs)
    header = inputs.header
    out += [" running on    1 total cores", " vasp.6.4.2 (httk-workflow mock VASP)",
            f" POSCAR found :  {len(header.counts)} types and {header.natoms:7d} ions"]
    error_lines = list(FAILURE_MODES[failure]) if failure is not None else []
    if failure in _AT_START:
        out += error_lines
        _write(directory, "OUTCAR", outcar_text(inputs, [], finished=False, accuracy=False, error=error_lines))
        _write(directory, "vasprun.xml", vasprun_text(inputs, [], finished=False))
        return 1
    if failure in _IN_SCF:
        out += error_lines
        _write(directory, "OSZICAR", oszicar_text(inputs, [], open_scf=4))
        _write(directory, "OUTCAR", outcar_text(inputs, [], finished=False, accuracy=False, error=error_lines))
        _write(directory, "vasprun.xml", vasprun_text(inputs, [], finished=False))
        return 1
    if failure == "zbrent":
        # Strikes in the line minimisation after two ionic steps; CONTCAR holds the last geometry.
        done = steps[: min(2, len(steps))]
        out += error_lines
        _write(directory, "OSZICAR", oszicar_text(inputs, done))
        _write(directory, "OUTCAR", outcar_text(inputs, done, finished=False, accuracy=False, error=error_lines))
        _write(directory, "CONTCAR", poscar_text(inputs, done[-1].factor))
        _write(directory, "vasprun.xml", vasprun_text(inputs, done, finished=False))
        return 1
    if failure == "electronic_unconverged":
        nelm = int(_tag(inputs.tags, "NELM", 60))
        steps = [attrs.evolve(step, electronic=nelm) for step in steps[:1]]
    accuracy = reached_accuracy(inputs, steps) and failure != "ionic_unconverged"
    if failure == "ionic_unconverged" and len(steps) > 1:
        steps = steps[:-1]  # NSW ran out one step short of convergence
    label = _scf_label(inputs.tags)
    for number, step in enumerate(steps, start=1):
        out.append(f"{label}: {step.electronic:3d}   {vasp_float(step.energy, 12)}")
        out.append(f"{number:4d} F= {vasp_float(step.energy)} E0= {vasp_float(step.energy - 1e-4 * header.natoms)}")
    if accuracy:
        out.append(" reached required accuracy - stopping structural energy minimisation")
    _write(directory, "OSZICAR", oszicar_text(inputs, steps))
    _write(directory, "OUTCAR", outcar_text(inputs, steps, finished=True, accuracy=accuracy))
    _write(directory, "CONTCAR", poscar_text(inputs, steps[-1].factor))
    _write(directory, "vasprun.xml", vasprun_text(inputs, steps, finished=True))
    return 0


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run once in the current directory, printing VASP-like lines on stdout."""
    control = control_from(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
    out: list[str] = []
    status = run(Path.cwd(), control, out)
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
