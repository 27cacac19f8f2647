"""A streaming ``vasprun.xml`` reader: final energy, forces, stress, structure, convergence, parameters.

``vasprun.xml`` is VASP's most complete output, and it can be gigabytes (DOS,
projections, eigenvalues per ionic step). :func:`read_vasprun` reads it with
:func:`xml.etree.ElementTree.iterparse` and keeps only the element it is
reading: every finished element is detached from its parent, so memory stays
bounded by the deepest element the reader needs (one ``<structure>``, one
``<varray>``), never by the file. A file a killed run left truncated is read up
to the break and reported with ``complete = False``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

import attrs

from ._io import PathLike

Vector = tuple[float, float, float]
Matrix = tuple[Vector, Vector, Vector]

#: Elements whose whole subtree the reader needs; everything else is dropped as soon as it closes.
_KEPT = {"generator", "incar", "parameters", "atominfo", "structure", "varray", "energy"}


class VasprunError(ValueError):
    """A ``vasprun.xml`` that holds no VASP document at all (not merely a truncated one)."""


@attrs.frozen
class VasprunStructure:
    """A cell (Å, rows are lattice vectors) and fractional positions, in ``vasprun.xml`` order."""

    lattice: Matrix
    positions: tuple[Vector, ...]


@attrs.frozen
class Vasprun:
    """What one ``vasprun.xml`` says about its run.

    ``parameters`` are the values VASP actually used (``<parameters>``, every
    tag with its default resolved, typed: int, float, bool, str, or a list);
    ``incar`` is what the INCAR asked for (``<incar>``). ``energy`` is the free
    energy (``e_fr_energy``, OUTCAR's ``TOTEN``) and ``energy_sigma0`` the σ→0
    energy (``e_0_energy``) of the last SCF step of the last ionic step, in eV;
    ``enthalpy`` is that ionic step's own ``<energy>``, which adds PSTRESS·V
    (the same as ``energy`` when PSTRESS is 0). ``forces`` (eV/Å, one row per
    atom), ``stress`` (kB, VASP's sign convention) and ``structure`` are that
    step's. ``electronic_steps`` counts the SCF steps of each ionic step.
    ``complete`` is whether the document closed (VASP writes the end tag last);
    ``error`` names where a truncated one broke off.
    """

    version: str | None
    incar: Mapping[str, Any]
    parameters: Mapping[str, Any]
    species: tuple[str, ...]
    initial_structure: VasprunStructure | None
    structure: VasprunStructure | None
    energy: float | None
    energy_sigma0: float | None
    enthalpy: float | None
    forces: tuple[Vector, ...] | None
    stress: Matrix | None
    electronic_steps: tuple[int, ...]
    complete: bool
    error: str | None = None

    @property
    def ionic_steps(self) -> int:
        """How many ionic steps (``<calculation>`` blocks) the file holds."""
        return len(self.electronic_steps)

    @property
    def relaxation(self) -> bool:
        """IBRION 1, 2 or 3 with NSW > 0, by the parameters VASP used."""
        return _int(self.parameters.get("IBRION"), -1) in (1, 2, 3) and _int(self.parameters.get("NSW"), 0) > 0

    @property
    def electronic_converged(self) -> bool | None:
        """The last SCF stopped before NELM steps (``None`` without SCF steps or NELM to judge by)."""
        nelm = self.parameters.get("NELM")
        if not self.electronic_steps or not self.electronic_steps[-1] or not isinstance(nelm, int):
            return None
        return self.electronic_steps[-1] < nelm

    @property
    def ionic_converged(self) -> bool | None:
        """A relaxation stopped before NSW ionic steps, in a complete file (VASP stops early only when
        EDIFFG is met); ``None`` when this is no relaxation."""
        if not self.relaxation:
            return None
        return self.complete and self.ionic_steps < _int(self.parameters.get("NSW"), 0)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _scalar(text: str | None, kind: str | None) -> Any:
    value = (text or "").strip()
    if kind == "string":
        return value
    if kind == "logical":
        return value.upper().lstrip(".").startswith("T")
    try:
        return int(value) if kind == "int" else float(value)
    except ValueError:
        return value  # a hand-made or unusual file: keep the text rather than guess


def _value(element: ET.Element) -> Any:
    kind = element.get("type")
    if element.tag == "v":
        return [_scalar(item, kind) for item in (element.text or "").split()]
    return _scalar(element.text, kind)


def _named(element: ET.Element, into: dict[str, Any]) -> None:
    # <i>/<v> items, flattened out of nested <separator>s; the first occurrence of a name wins.
    for item in element.iter():
        if item.tag in ("i", "v") and item.get("name"):
            into.setdefault(item.get("name", "").upper(), _value(item))


def _rows(varray: ET.Element) -> list[list[float]]:
    rows = []
    for row in varray.findall("v"):
        try:
            rows.append([float(value) for value in (row.text or "").split()])
        except ValueError:
            rows.append([float("nan")] * 3)  # VASP prints ******** for overflowing numbers
    return rows


def _vector(row: list[float]) -> Vector:
    return (row[0], row[1], row[2])


def _structure(element: ET.Element) -> VasprunStructure | None:
    basis = element.find("crystal/varray[@name='basis']")
    positions = element.find("varray[@name='positions']")
    if basis is None or positions is None:
        return None
    lattice = [_vector(row) for row in _rows(basis) if len(row) >= 3]
    if len(lattice) != 3:
        return None
    return VasprunStructure(
        lattice=(lattice[0], lattice[1], lattice[2]),
        positions=tuple(_vector(row) for row in _rows(positions) if len(row) >= 3),
    )


def _species(atominfo: ET.Element) -> tuple[str, ...]:
    for array in atominfo.findall("array"):
        if array.get("name") == "atoms":
            return tuple(
                (row.findtext("c") or "").strip() for row in array.iterfind("set/rc")
            )
    return ()


def _energies(element: ET.Element) -> dict[str, float]:
    out = {}
    for item in element.findall("i"):
        value = _scalar(item.text, None)
        if isinstance(value, float):
            out[item.get("name", "")] = value
    return out


@attrs.define
class _Reading:
    """The state of one pass; fields become the :class:`Vasprun`."""

    version: str | None = None
    incar: dict[str, Any] = attrs.field(factory=dict)
    parameters: dict[str, Any] = attrs.field(factory=dict)
    species: tuple[str, ...] = ()
    initial: VasprunStructure | None = None
    structure: VasprunStructure | None = None
    final: VasprunStructure | None = None
    energy: dict[str, float] = attrs.field(factory=dict)
    scf_energy: dict[str, float] = attrs.field(factory=dict)
    forces: tuple[Vector, ...] | None = None
    stress: Matrix | None = None
    scsteps: list[int] = attrs.field(factory=list)
    in_calculation: bool = False

    def start(self, element: ET.Element) -> None:
        if element.tag == "calculation":
            self.in_calculation = True
            self.scsteps.append(0)
            self.energy, self.scf_energy, self.forces, self.stress, self.structure = {}, {}, None, None, None
        elif element.tag == "scstep" and self.in_calculation:
            self.scsteps[-1] += 1

    def end(self, element: ET.Element, path: list[str]) -> None:
        tag, parent = element.tag, path[-1] if path else ""
        if tag == "generator":
            self.version = (element.findtext("i[@name='version']") or "").strip() or None
        elif tag == "incar" and parent == "modeling":
            _named(element, self.incar)
        elif tag == "parameters" and parent == "modeling":
            _named(element, self.parameters)
        elif tag == "atominfo":
            self.species = _species(element)
        elif tag == "structure":
            self._structure(element, parent)
        elif tag == "varray" and parent == "calculation":
            rows = [_vector(row) for row in _rows(element) if len(row) >= 3]
            if element.get("name") == "forces":
                self.forces = tuple(rows)
            elif element.get("name") == "stress" and len(rows) == 3:
                self.stress = (rows[0], rows[1], rows[2])
        elif tag == "energy" and parent == "calculation":
            self.energy = _energies(element)
        elif tag == "energy" and parent == "scstep" and self.in_calculation:
            self.scf_energy = _energies(element)
        elif tag == "calculation":
            self.in_calculation = False

    def _structure(self, element: ET.Element, parent: str) -> None:
        read = _structure(element)
        if element.get("name") == "initialpos":
            self.initial = read
        elif element.get("name") == "finalpos":
            self.final = read
        elif parent == "calculation":
            self.structure = read

    def result(self, complete: bool, error: str | None) -> Vasprun:
        return Vasprun(
            version=self.version, incar=self.incar, parameters=self.parameters, species=self.species,
            initial_structure=self.initial, structure=self.final or self.structure or self.initial,
            energy=self.scf_energy.get("e_fr_energy", self.energy.get("e_fr_energy")),
            energy_sigma0=self.scf_energy.get("e_0_energy", self.energy.get("e_0_energy")),
            enthalpy=self.energy.get("e_fr_energy"),
            forces=self.forces, stress=self.stress, electronic_steps=tuple(self.scsteps),
            complete=complete, error=error,
        )


def read_vasprun(path: PathLike = "vasprun.xml") -> Vasprun:
    """Stream the ``vasprun.xml`` at ``path`` into a :class:`Vasprun`, in bounded memory.

    A truncated file (a killed or still-running VASP) gives what was read up to
    the break, ``complete=False`` and the parser's message in ``error``; a file
    whose root is not ``<modeling>`` raises :class:`VasprunError`. A missing
    file raises ``FileNotFoundError``.
    """
    reading = _Reading()
    stack: list[ET.Element] = []
    path_tags: list[str] = []
    keep_depth = 0  # > 0 while inside a subtree the reader needs whole
    try:
        for event, element in ET.iterparse(path, events=("start", "end")):
            if event == "start":
                if not stack and element.tag != "modeling":
                    raise VasprunError(f"{path}: not a vasprun.xml (the root element is <{element.tag}>)")
                stack.append(element)
                path_tags.append(element.tag)
                keep_depth += keep_depth > 0 or element.tag in _KEPT
                reading.start(element)
                continue
            stack.pop()
            path_tags.pop()
            reading.end(element, path_tags)
            keep_depth -= keep_depth > 0
            if stack and not keep_depth:
                stack[-1].remove(element)  # detach what is read: memory stays bounded by the open path
    except ET.ParseError as error:
        if not stack and reading.version is None and not path_tags:
            raise VasprunError(f"{path}: not a vasprun.xml ({error})") from None
        return reading.result(complete=False, error=f"{path}: truncated or malformed ({error})")
    return reading.result(complete=True, error=None)
