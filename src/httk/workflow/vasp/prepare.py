"""One-call preparation of INCAR, KPOINTS and POTCAR for a calculation directory holding a POSCAR."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ._io import PathLike
from .incar import MagneticMomentTable, format_magmom, suggested_magnetic_moments, write_incar
from .kpoints import (
    DEFAULT_KPOINT_CENTERING,
    DEFAULT_KPOINT_ROUNDING,
    Grid,
    automatic_kpoint_grid,
    write_automatic_kpoints,
)
from .poscar import read_poscar_header
from .potcar import PotcarAssembly, assemble_potcar


def _optional_dict(value: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if value is None else dict(value)


@attrs.frozen
class VaspPreparationOptions:
    """What :func:`prepare_vasp_inputs` writes.

    ``incar_tags`` are written first, in their order, and nothing derived
    overwrites them. ``kpoint_density`` (Å, see
    :func:`~httk.workflow.vasp.kpoints.automatic_kpoint_grid`) writes KPOINTS
    with ``centering``, the grid rounded by ``kpoint_rounding``
    (``"nearest"``, VASP's own rule, or ``"up"``); ``potcar_library`` writes
    POTCAR with ``potcar_variants``; ``magnetic`` derives ``ISPIN = 2`` and
    ``MAGMOM`` from :func:`~httk.workflow.vasp.incar.suggested_magnetic_moments`
    with ``magnetic_moments`` (a table name, an element → μB mapping, or
    ``None`` for the ``httk`` table: the value of the ``vasp.magnetic_moments``
    setting). ``None`` skips the corresponding file.
    """

    incar_tags: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)
    kpoint_density: float | None = None
    centering: str = DEFAULT_KPOINT_CENTERING
    potcar_library: PathLike | None = None
    potcar_variants: Mapping[str, str] | None = attrs.field(default=None, converter=_optional_dict)
    magnetic: bool = False
    magnetic_moments: MagneticMomentTable | None = None
    kpoint_rounding: str = DEFAULT_KPOINT_ROUNDING


@attrs.frozen
class PreparedVaspInputs:
    """What :func:`prepare_vasp_inputs` wrote: the INCAR tags, the grid, and the POTCAR assembly."""

    incar: Mapping[str, Any]
    grid: Grid | None
    potcar: PotcarAssembly | None


def prepare_vasp_inputs(workdir: PathLike, options: VaspPreparationOptions) -> PreparedVaspInputs:
    """Write INCAR (always, replacing any existing one), KPOINTS and POTCAR from ``<workdir>/POSCAR``.

    Derived INCAR tags (``ISPIN``, ``MAGMOM`` when ``magnetic``) are appended
    after the explicit tags and only for tags the caller did not set (compared
    case-insensitively).
    """
    directory = Path(workdir)
    header = read_poscar_header(directory / "POSCAR")
    tags: dict[str, Any] = dict(options.incar_tags)
    explicit = {tag.upper() for tag in tags}
    derived: dict[str, Any] = {}
    if options.magnetic:
        derived["ISPIN"] = 2
        moments = suggested_magnetic_moments(header.species, header.counts, options.magnetic_moments)
        derived["MAGMOM"] = format_magmom(moments)
    tags.update({tag: value for tag, value in derived.items() if tag not in explicit})
    grid = None
    if options.kpoint_density is not None:
        grid = automatic_kpoint_grid(options.kpoint_density, poscar=header, rounding=options.kpoint_rounding)
        write_automatic_kpoints(grid, directory / "KPOINTS", centering=options.centering)
    potcar = None
    if options.potcar_library is not None:
        potcar = assemble_potcar(
            options.potcar_library, poscar=header, output=directory / "POTCAR", variants=options.potcar_variants,
        )
    write_incar(tags, directory / "INCAR")
    return PreparedVaspInputs(incar=tags, grid=grid, potcar=potcar)
