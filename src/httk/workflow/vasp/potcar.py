"""POTCAR assembly from a potential library, with recorded provenance.

A library is a directory of variant directories, ``<library>/<variant>/POTCAR``
(or ``POTCAR.gz``, or legacy Unix-compress ``POTCAR.Z``), as in VASP's
``potpaw_PBE`` distributions. Gzip is read with the standard library; ``.Z``
is read through a checked argv ``gzip -dc`` or ``uncompress -c`` — the only
external program this package ever runs on its own.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from ._io import PathLike, write_bytes, write_json
from .incar import element_of
from .poscar import PoscarHeader, read_poscar_header

DEFAULT_POTCAR_PREFERENCE = ("", "_pv", "_sv", "_d", "_3", "_2", "_h", "_s", "_GW")
"""Suffixes tried after the element symbol, in order: ``Fe``, then ``Fe_pv``, ``Fe_sv``, ``Fe_d``…"""

POTCAR_FILENAMES = ("POTCAR", "POTCAR.gz", "POTCAR.Z")
PROVENANCE_FORMAT = "httk-workflow-potcar-provenance"


class PotcarError(ValueError):
    """A species with no usable potential, or a POTCAR that cannot be read."""


@attrs.frozen
class PotcarChoice:
    """The potential chosen for one POSCAR species.

    ``sha256`` is the digest of the decompressed POTCAR text; ``titel`` the
    value of its ``TITEL`` line; ``zval`` its valence (``ZVAL``), or ``None``.
    """

    species: str
    variant: str
    source: str
    sha256: str
    titel: str
    zval: float | None = None


@attrs.frozen
class PotcarAssembly:
    """One assembled POTCAR: the choices in POSCAR order and the digest of the written file."""

    choices: tuple[PotcarChoice, ...]
    output: str
    sha256: str

    def nelect(self, counts: Sequence[int]) -> float:
        """Total valence electrons for per-species ``counts`` (POSCAR order), from each ``ZVAL``."""
        if len(counts) != len(self.choices) or any(choice.zval is None for choice in self.choices):
            raise PotcarError("nelect needs one count per choice and a ZVAL in every potential")
        return sum(float(choice.zval) * count for choice, count in zip(self.choices, counts, strict=True))  # type: ignore[arg-type]


def read_potcar_bytes(path: PathLike) -> bytes:
    """The decompressed bytes of a ``POTCAR``, ``POTCAR.gz`` or ``POTCAR.Z`` file."""
    source = Path(path)
    if source.suffix == ".gz":
        with gzip.open(source, "rb") as handle:
            return handle.read()
    if source.suffix == ".Z":
        return _uncompress(source)
    return source.read_bytes()


def _uncompress(source: Path) -> bytes:
    # Python has no LZW reader; gzip and uncompress both decode .Z. The argv is fixed and checked.
    for argv in (["gzip", "-dc"], ["uncompress", "-c"]):
        executable = shutil.which(argv[0])
        if executable is None:
            continue
        result = subprocess.run([executable, *argv[1:], os.fspath(source)], capture_output=True, check=False)
        if result.returncode != 0:
            message = result.stderr.decode("utf-8", "replace").strip()
            raise PotcarError(f"{argv[0]} could not decompress {source}: {message}")
        return result.stdout
    raise PotcarError(f"{source} is Unix-compressed and neither gzip nor uncompress is on PATH")


def potcar_metadata(data: bytes) -> tuple[str, float | None]:
    """(TITEL, ZVAL) of one potential's text; TITEL is ``''`` when absent."""
    titel, zval = "", None
    for line in data.decode("utf-8", "replace").splitlines():
        stripped = line.strip()
        if not titel and stripped.startswith("TITEL"):
            titel = stripped.split("=", 1)[1].strip() if "=" in stripped else ""
        elif zval is None and "ZVAL" in stripped:
            after = stripped.split("ZVAL", 1)[1].lstrip(" =")
            try:
                zval = float(after.split()[0].rstrip(";"))
            except (ValueError, IndexError):
                zval = None
        if titel and zval is not None:
            break
    return titel, zval


def _potcar_file(directory: Path) -> Path | None:
    for name in POTCAR_FILENAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def choose_potcar_variant(
    library: PathLike,
    species: str,
    variants: Mapping[str, str] | None = None,
    preference: Sequence[str] = DEFAULT_POTCAR_PREFERENCE,
) -> tuple[str, Path]:
    """(variant, file) for one species.

    An explicit ``variants[species]`` wins and must exist. Otherwise a species
    label that itself names a variant directory (``Fe_pv``) is used, and then
    ``element + suffix`` for each suffix of ``preference``, first found wins.
    """
    root = Path(library)
    if variants and species in variants:
        variant = variants[species]
        found = _potcar_file(root / variant)
        if found is None:
            raise PotcarError(f"explicit variant {variant!r} for {species} has no POTCAR under {root / variant}")
        return variant, found
    element = element_of(species)
    candidates = ([species] if species != element else []) + [element + suffix for suffix in preference]
    for variant in candidates:
        found = _potcar_file(root / variant)
        if found is not None:
            return variant, found
    raise PotcarError(f"no POTCAR for {species} in {root}; tried {', '.join(candidates)}")


def assemble_potcar(
    library: PathLike,
    poscar: PathLike | PoscarHeader = "POSCAR",
    output: PathLike = "POTCAR",
    variants: Mapping[str, str] | None = None,
    preference: Sequence[str] = DEFAULT_POTCAR_PREFERENCE,
) -> PotcarAssembly:
    """Concatenate one potential per POSCAR species, in species order, into ``output``.

    Variants are chosen by :func:`choose_potcar_variant`. Each potential is
    ended with a newline before the next is appended. Beside the POTCAR,
    ``<output>.provenance.json`` (format ``httk-workflow-potcar-provenance``
    version 1) records the library, the digest of the written POTCAR, and every
    choice; both files are published atomically.
    """
    header = poscar if isinstance(poscar, PoscarHeader) else read_poscar_header(poscar)
    if not header.species:
        raise PotcarError("the POSCAR has no species line (VASP 4 format); cannot choose potentials")
    unknown = sorted(set(variants or {}) - set(header.species))
    if unknown:
        raise PotcarError(f"variants name species not in the POSCAR: {', '.join(unknown)}")
    parts: list[bytes] = []
    choices = []
    for species in header.species:
        variant, source = choose_potcar_variant(library, species, variants, preference)
        data = read_potcar_bytes(source)
        if not data.endswith(b"\n"):
            data += b"\n"
        titel, zval = potcar_metadata(data)
        parts.append(data)
        choices.append(PotcarChoice(
            species=species, variant=variant, source=os.fspath(source.absolute()),
            sha256=hashlib.sha256(data).hexdigest(), titel=titel, zval=zval,
        ))
    combined = b"".join(parts)
    target = Path(output)
    write_bytes(target, combined)
    assembly = PotcarAssembly(
        choices=tuple(choices), output=os.fspath(target.absolute()), sha256=hashlib.sha256(combined).hexdigest(),
    )
    write_json(target.with_name(target.name + ".provenance.json"), {
        "format": PROVENANCE_FORMAT, "format_version": 1,
        "library": os.fspath(Path(library).absolute()), "potcar": assembly.output, "sha256": assembly.sha256,
        "choices": [attrs.asdict(choice) for choice in choices],
    })
    return assembly
