"""POSCAR/CONTCAR reading, seeded rattling, and CONTCAR promotion.

Understands the VASP 5 layout (title, scale, three lattice rows, species line,
counts line, optional ``Selective dynamics``, ``Direct``/``Cartesian``, one
coordinate row per atom, anything after that such as CONTCAR velocities) and
the VASP 4 layout without a species line (``species`` is then empty). The scale
line holds one number (negative: the target cell volume in Å³) or three
per-axis factors. Species labels are cut at ``/`` because VASP 6 writes
``Si/<hash>`` labels; the part before it is kept verbatim (``Fe_pv`` stays).
A trailing ``!`` comment on the species or counts line is ignored.
"""

from __future__ import annotations

import hashlib
import math
import random
import shutil
from pathlib import Path

import attrs

from ._io import PathLike, read_text, write_text

Vector = tuple[float, float, float]
Matrix = tuple[Vector, Vector, Vector]


class PoscarError(ValueError):
    """A POSCAR/CONTCAR that cannot be parsed; the message names the file and line."""


@attrs.frozen
class PoscarHeader:
    """The header of a POSCAR: everything but the coordinates.

    ``lattice`` holds the rows exactly as written (unscaled); :attr:`cell` is
    the lattice in Å with the scale applied.
    """

    title: str
    scale: tuple[float, ...]
    lattice: Matrix
    species: tuple[str, ...]
    counts: tuple[int, ...]
    selective_dynamics: bool = False
    cartesian: bool = False

    @property
    def natoms(self) -> int:
        """Total number of atoms (sum of ``counts``)."""
        return sum(self.counts)

    @property
    def cell(self) -> Matrix:
        """The lattice rows in Å: per-axis scaling, or the volume rule for a negative scale."""
        factors = self.scale_factors
        return tuple(tuple(row[i] * factors[i] for i in range(3)) for row in self.lattice)  # type: ignore[return-value]

    @property
    def scale_factors(self) -> Vector:
        """The factor VASP multiplies each Cartesian component by (lattice rows and Cartesian positions)."""
        if len(self.scale) == 3:
            return self.scale  # type: ignore[return-value]
        factor = self.scale[0]
        if factor < 0:
            factor = (-factor / abs(determinant(self.lattice))) ** (1.0 / 3.0)
        return (factor, factor, factor)

    @property
    def volume(self) -> float:
        """Cell volume in Å³."""
        return abs(determinant(self.cell))


@attrs.frozen
class _Parsed:
    header: PoscarHeader
    lines: list[str]
    first_coordinate: int  # index into lines of the first coordinate row


def determinant(m: Matrix) -> float:
    """Determinant of a 3x3 matrix given as rows."""
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def _cross(a: Vector, b: Vector) -> Vector:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def reciprocal_lattice(cell: Matrix) -> Matrix:
    """Reciprocal lattice rows b_i with a_i·b_j = δ_ij, i.e. *without* the 2π factor (units 1/Å)."""
    volume = determinant(cell)
    if abs(volume) < 1e-12:
        raise PoscarError("the lattice vectors are linearly dependent (zero cell volume)")
    a1, a2, a3 = cell
    return tuple(tuple(c / volume for c in _cross(x, y)) for x, y in ((a2, a3), (a3, a1), (a1, a2)))  # type: ignore[return-value]


def _floats(line: str, count: int, what: str, where: str) -> tuple[float, ...]:
    fields = line.split()
    try:
        values = tuple(float(field) for field in fields[:count])
    except ValueError:
        raise PoscarError(f"{where}: {what} must be {count} numbers, got {line.strip()!r}") from None
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise PoscarError(f"{where}: {what} must be {count} finite numbers, got {line.strip()!r}")
    return values


def _parse(text: str, where: str) -> _Parsed:
    lines = text.splitlines()
    if len(lines) < 7:
        raise PoscarError(f"{where}: too short for a POSCAR ({len(lines)} lines)")
    scale_fields = lines[1].split()
    count = 3 if len(scale_fields) >= 3 and _all_numbers(scale_fields[:3]) else 1
    scale = _floats(lines[1], count, "the scale line", where)
    if any(value == 0 for value in scale) or (count == 3 and any(value < 0 for value in scale)):
        raise PoscarError(f"{where}: invalid scale {lines[1].strip()!r}")
    lattice = tuple(_floats(lines[i], 3, f"lattice row {i - 1}", where) for i in (2, 3, 4))
    index = 5
    species: tuple[str, ...] = ()
    if not _all_ints(_fields(lines[index])):
        species = tuple(label.split("/")[0] for label in _fields(lines[index]))
        index += 1
    count_fields = _fields(lines[index]) if index < len(lines) else []
    if not count_fields or not _all_ints(count_fields):
        raise PoscarError(f"{where}: line {index + 1} must hold the atom counts, got {_at(lines, index)!r}")
    counts = tuple(int(field) for field in count_fields)
    if species and len(species) != len(counts):
        raise PoscarError(f"{where}: {len(species)} species but {len(counts)} counts")
    if any(value <= 0 for value in counts):
        raise PoscarError(f"{where}: atom counts must be positive, got {counts}")
    index += 1
    selective = _at(lines, index).strip()[:1].lower() == "s"
    index += selective
    mode = _at(lines, index).strip()[:1].lower()
    if not mode:
        raise PoscarError(f"{where}: line {index + 1} must say Direct or Cartesian")
    cartesian = mode in ("c", "k")  # VASP treats C/c/K/k as Cartesian, anything else as direct
    index += 1
    natoms = sum(counts)
    if len(lines) < index + natoms:
        raise PoscarError(f"{where}: {natoms} atoms declared but only {len(lines) - index} coordinate rows")
    for row in range(index, index + natoms):
        _floats(lines[row], 3, f"coordinate row {row - index + 1}", where)
    header = PoscarHeader(
        title=lines[0].strip(), scale=scale, lattice=lattice, species=species,  # type: ignore[arg-type]
        counts=counts, selective_dynamics=selective, cartesian=cartesian,
    )
    return _Parsed(header=header, lines=lines, first_coordinate=index)


def _fields(line: str) -> list[str]:
    # The species and counts lines may end in a '!' comment (VASP and ASE read past it).
    return line.split("!", 1)[0].split()


def _at(lines: list[str], index: int) -> str:
    return lines[index] if index < len(lines) else ""


def _all_ints(fields: list[str]) -> bool:
    return bool(fields) and all(field.isascii() and field.isdigit() for field in fields)


def _all_numbers(fields: list[str]) -> bool:
    try:
        [float(field) for field in fields]
    except ValueError:
        return False
    return True


def read_poscar_header(path: PathLike = "POSCAR") -> PoscarHeader:
    """Parse the POSCAR/CONTCAR at ``path`` and return its header.

    The coordinate rows are checked (``natoms`` rows of three numbers) but not
    returned. Raises :class:`PoscarError` (a ``ValueError``) for a malformed file.
    """
    return _parse(read_text(path), str(path)).header


def derive_seed(entropy: str) -> int:
    """A rattle seed from an entropy string: the first 64 bits of its UTF-8 SHA-256, as an int."""
    if not isinstance(entropy, str) or not entropy:
        raise ValueError("entropy must be a non-empty string, e.g. the job id and attempt number")
    return int.from_bytes(hashlib.sha256(entropy.encode("utf-8")).digest()[:8], "big")


def _inverse(m: Matrix) -> Matrix:
    # Rows of the inverse of the row-matrix m are the columns of reciprocal_lattice(m).
    b = reciprocal_lattice(m)
    return tuple(tuple(b[j][i] for j in range(3)) for i in range(3))  # type: ignore[return-value]


def rattle_poscar(
    path: PathLike,
    amplitude: float,
    seed: int | None = None,
    entropy: str | None = None,
    output: PathLike | None = None,
) -> int:
    """Displace every atom of the POSCAR at ``path`` randomly; return the seed used.

    Exactly one of ``seed`` and ``entropy`` is required (``entropy`` goes
    through :func:`derive_seed`): two retries that rattle identically would be
    the same calculation. Each atom moves by a vector of uniformly random
    direction and a length drawn uniformly from [0, ``amplitude``] Å, drawn
    from ``random.Random(seed)`` in atom order. Coordinates are rewritten in
    the file's own mode (Direct or Cartesian, with 10 decimals); selective
    dynamics flags, per-atom labels, and everything after the coordinates are
    kept verbatim. The result goes to ``output`` (default: ``path`` itself).
    """
    if (seed is None) == (entropy is None):
        raise ValueError("rattle_poscar needs exactly one of seed= or entropy= (an attempt-derived string)")
    if not isinstance(amplitude, int | float) or not math.isfinite(amplitude) or amplitude <= 0:
        raise ValueError(f"amplitude must be a positive number of Å, got {amplitude!r}")
    used = seed if seed is not None else derive_seed(entropy)  # type: ignore[arg-type]
    parsed = _parse(read_text(path), str(path))
    header, lines = parsed.header, list(parsed.lines)
    rng = random.Random(used)
    cell = header.cell
    inverse = _inverse(cell)
    # Cartesian rows are multiplied by the scale when VASP reads them, so a shift in Å is divided by it.
    factors = header.scale_factors
    for row in range(parsed.first_coordinate, parsed.first_coordinate + header.natoms):
        fields = lines[row].split()
        position = [float(value) for value in fields[:3]]
        shift = _random_shift(rng, amplitude)
        if header.cartesian:
            position = [position[i] + shift[i] / factors[i] for i in range(3)]
        else:
            fractional = [sum(shift[k] * inverse[k][i] for k in range(3)) for i in range(3)]
            position = [position[i] + fractional[i] for i in range(3)]
        lines[row] = "  " + "  ".join(f"{value:.10f}" for value in position) + "".join(" " + f for f in fields[3:])
    write_text(output if output is not None else path, "\n".join(lines) + "\n")
    return used


def _random_shift(rng: random.Random, amplitude: float) -> Vector:
    # Direction uniform on the sphere (normalised Gaussian triple), length uniform in [0, amplitude].
    while True:
        direction = [rng.gauss(0.0, 1.0) for _ in range(3)]
        norm = math.sqrt(sum(value * value for value in direction))
        if norm > 1e-12:
            break
    length = rng.uniform(0.0, amplitude)
    return tuple(value / norm * length for value in direction)  # type: ignore[return-value]


def contcar_to_poscar(workdir: PathLike = ".", backup: str = "POSCAR.orig") -> bool:
    """Promote ``CONTCAR`` to ``POSCAR`` in ``workdir``; return whether it did.

    Nothing happens (``False``) when CONTCAR is missing, empty, or does not
    parse as a POSCAR — a crashed run may leave exactly those. Otherwise the
    current POSCAR is copied to ``backup`` (overwriting an older backup, so it
    always holds the structure the last run started from) and CONTCAR is
    copied, atomically, over POSCAR. CONTCAR itself is left in place.
    """
    directory = Path(workdir)
    contcar, poscar = directory / "CONTCAR", directory / "POSCAR"
    try:
        text = read_text(contcar)
    except FileNotFoundError:
        return False
    if not text.strip():
        return False
    try:
        _parse(text, str(contcar))
    except PoscarError:
        return False
    if poscar.exists():
        shutil.copyfile(poscar, directory / backup)
    write_text(poscar, text)
    return True
