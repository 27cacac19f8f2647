"""Automatic k-point meshes: choosing a grid from a length density, writing and re-centering KPOINTS.

Only the fully automatic *mesh* form is written and edited here::

    <comment>
    0
    Monkhorst-Pack | Gamma
    n1 n2 n3
    [s1 s2 s3]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import attrs

from ._io import PathLike, read_text, write_text
from .poscar import PoscarHeader, read_poscar_header, reciprocal_lattice

DEFAULT_KPOINT_CENTERING = "Monkhorst-Pack"
"""Where every automatic mesh starts; the remedy ladder promotes ``Gamma`` for k-point failures."""

KPOINT_CENTERINGS = ("Monkhorst-Pack", "Gamma")

Grid = tuple[int, int, int]


class KpointsError(ValueError):
    """A KPOINTS file or grid that is not an automatic mesh this module handles."""


@attrs.frozen
class KpointMesh:
    """An automatic-mesh KPOINTS file: its comment, centering, subdivisions, and shift."""

    comment: str
    centering: str
    grid: Grid
    shift: tuple[float, float, float] = (0.0, 0.0, 0.0)


KPOINT_ROUNDINGS = ("nearest", "up")
DEFAULT_KPOINT_ROUNDING = "nearest"
"""VASP's own rule for its fully automatic ``Auto`` length mode."""


def automatic_kpoint_grid(
    density: float,
    poscar: PathLike | PoscarHeader = "POSCAR",
    rounding: str = DEFAULT_KPOINT_ROUNDING,
) -> Grid:
    """Subdivisions along each reciprocal axis for a length ``density`` (Å).

    With ``rounding="nearest"`` (the default) this is VASP's fully automatic
    length mode (``Auto`` with length ``l`` in KPOINTS):
    ``N_i = max(1, int(l * |b_i| + 0.5))``, so ``automatic_kpoint_grid(40)`` is
    the grid VASP's own ``Auto 40`` would use. ``b_i`` are the reciprocal
    lattice vectors of the scaled cell *without* the 2π factor (``|b_i| = 1/d_i``,
    the inverse spacing of lattice planes; for an orthogonal cell
    ``N_i = round(l / a_i)``). ``rounding="up"`` gives
    ``N_i = max(1, ceil(l * |b_i|))`` instead, never coarser than ``l`` asks
    (a tiny tolerance keeps an exact integer from rounding up by float noise).
    Density 20–30 suits insulators and 40–60 metals.
    """
    if isinstance(density, bool) or not isinstance(density, int | float) or not math.isfinite(density) or density <= 0:
        raise KpointsError(f"k-point density must be a positive length in Å, got {density!r}")
    if rounding not in KPOINT_ROUNDINGS:
        raise KpointsError(f"k-point rounding must be one of {', '.join(KPOINT_ROUNDINGS)}, got {rounding!r}")
    header = poscar if isinstance(poscar, PoscarHeader) else read_poscar_header(poscar)
    grid = []
    for row in reciprocal_lattice(header.cell):
        subdivisions = density * math.sqrt(sum(value * value for value in row))
        grid.append(max(1, int(subdivisions + 0.5) if rounding == "nearest" else math.ceil(subdivisions - 1e-9)))
    return (grid[0], grid[1], grid[2])


def _check_grid(grid: Sequence[int]) -> Grid:
    values = tuple(grid)
    if len(values) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise KpointsError(f"a k-point grid is three positive integers, got {grid!r}")
    return values  # type: ignore[return-value]


def _check_centering(centering: str) -> str:
    # VASP only reads the first letter; accept any spelling of the two meshes, write the canonical word.
    first = centering.strip()[:1].lower() if isinstance(centering, str) else ""
    if first == "g":
        return "Gamma"
    if first == "m":
        return "Monkhorst-Pack"
    raise KpointsError(f"centering must be one of {', '.join(KPOINT_CENTERINGS)}, got {centering!r}")


def format_kpoint_mesh(mesh: KpointMesh) -> str:
    """The KPOINTS text of ``mesh`` (the shift line only when it is non-zero)."""
    grid = _check_grid(mesh.grid)
    lines = [mesh.comment or "automatic mesh", "0", _check_centering(mesh.centering), " ".join(map(str, grid))]
    if any(mesh.shift):
        lines.append(" ".join(repr(float(value)) for value in mesh.shift))
    return "\n".join(lines) + "\n"


def write_automatic_kpoints(
    grid: Sequence[int],
    path: PathLike = "KPOINTS",
    centering: str = DEFAULT_KPOINT_CENTERING,
    comment: str | None = None,
) -> KpointMesh:
    """Write an automatic-mesh KPOINTS with ``grid`` subdivisions and ``centering``; return what was written.

    ``centering`` is ``Monkhorst-Pack`` (default) or ``Gamma`` (any spelling
    whose first letter VASP would read the same way).
    """
    grid = _check_grid(grid)
    text = comment or f"automatic mesh {grid[0]}x{grid[1]}x{grid[2]}"
    mesh = KpointMesh(comment=text.replace("\n", " "), centering=_check_centering(centering), grid=grid)
    write_text(path, format_kpoint_mesh(mesh))
    return mesh


def read_kpoint_mesh(path: PathLike = "KPOINTS") -> KpointMesh | None:
    """The automatic mesh in the KPOINTS at ``path``, or ``None`` for any other KPOINTS form.

    ``None`` covers explicit lists, line mode, and the one-number fully
    automatic form (``Auto`` + length), none of which has a centering to change.
    """
    lines = read_text(path).splitlines()
    if len(lines) < 4 or lines[1].split()[:1] != ["0"]:
        return None
    first = lines[2].strip()[:1].lower()
    if first not in ("g", "m"):
        return None
    try:
        grid = tuple(int(value) for value in lines[3].split()[:3])
        shift = tuple(float(value) for value in lines[4].split()[:3]) if len(lines) > 4 and lines[4].strip() else ()
    except ValueError:
        return None
    if len(grid) != 3 or any(value < 1 for value in grid):
        return None
    return KpointMesh(
        comment=lines[0].strip(), centering=_check_centering(first), grid=grid,  # type: ignore[arg-type]
        shift=shift if len(shift) == 3 else (0.0, 0.0, 0.0),  # type: ignore[arg-type]
    )


def set_kpoint_centering(centering: str, path: PathLike = "KPOINTS") -> KpointMesh:
    """Rewrite the automatic mesh at ``path`` with another centering; refuse any other KPOINTS form."""
    mesh = read_kpoint_mesh(path)
    if mesh is None:
        raise KpointsError(f"{Path(path)} is not an automatic Monkhorst-Pack/Gamma mesh")
    changed = attrs.evolve(mesh, centering=_check_centering(centering))
    write_text(path, format_kpoint_mesh(changed))
    return changed
