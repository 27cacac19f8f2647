from __future__ import annotations

import math

import pytest
from test_vasp_support import FEO_POSCAR, SI_POSCAR

from httk.workflow.vasp import (
    PoscarError,
    contcar_to_poscar,
    derive_seed,
    rattle_poscar,
    read_poscar_header,
    reciprocal_lattice,
)


def write(tmp_path, text, name="POSCAR"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_diamond_header(tmp_path):
    header = read_poscar_header(write(tmp_path, SI_POSCAR))
    assert header.title == "Si2 diamond"
    assert header.scale == (5.43,)
    assert header.lattice[0] == (0.0, 0.5, 0.5)
    assert header.species == ("Si",) and header.counts == (2,) and header.natoms == 2
    assert not header.cartesian and not header.selective_dynamics
    assert header.volume == pytest.approx(5.43**3 / 4)


@pytest.mark.parametrize(
    ("text", "check"),
    [
        (SI_POSCAR.replace("5.43", "-40.0"), lambda h: h.volume == pytest.approx(40.0)),
        (SI_POSCAR.replace("5.43", "5.43 5.43 10.86"), lambda h: h.cell[0] == (0.0, 5.43 * 0.5, 10.86 * 0.5)),
        (SI_POSCAR.replace("Si\n2\n", "2\n"), lambda h: h.species == () and h.counts == (2,)),
        (SI_POSCAR.replace("Si\n", "Si/abc123\n"), lambda h: h.species == ("Si",)),
        (SI_POSCAR.replace("Direct", "Selective dynamics\nDirect").replace("0.25 0.25 0.25", "0.25 0.25 0.25 T T F"),
         lambda h: h.selective_dynamics),
        (FEO_POSCAR, lambda h: h.cartesian and h.species == ("Fe", "O") and h.natoms == 2),
    ],
)
def test_header_variants(tmp_path, text, check):
    assert check(read_poscar_header(write(tmp_path, text)))


@pytest.mark.parametrize(
    "text",
    [
        "too short\n",
        SI_POSCAR.replace("5.43", "abc"),
        SI_POSCAR.replace("Si\n2\n", "Si O\n2\n"),
        SI_POSCAR.replace("0.25 0.25 0.25\n", ""),
        SI_POSCAR.replace("0.0 0.5 0.5", "0.0 0.5"),
    ],
)
def test_malformed_poscars_are_refused(tmp_path, text):
    with pytest.raises(PoscarError):
        read_poscar_header(write(tmp_path, text))


def test_reciprocal_lattice_has_no_two_pi():
    b = reciprocal_lattice(((2.0, 0.0, 0.0), (0.0, 4.0, 0.0), (0.0, 0.0, 5.0)))
    assert b == ((0.5, 0.0, 0.0), (0.0, 0.25, 0.0), (0.0, 0.0, 0.2))


def test_derive_seed_is_sha256_based_and_stable():
    assert derive_seed("job-1/attempt-2") == derive_seed("job-1/attempt-2")
    assert derive_seed("job-1/attempt-2") != derive_seed("job-1/attempt-3")
    assert 0 <= derive_seed("x") < 2**64
    with pytest.raises(ValueError):
        derive_seed("")


@pytest.mark.parametrize("kwargs", [{}, {"seed": 1, "entropy": "x"}])
def test_rattle_needs_exactly_one_source_of_randomness(tmp_path, kwargs):
    with pytest.raises(ValueError, match="seed"):
        rattle_poscar(write(tmp_path, SI_POSCAR), 0.1, **kwargs)


def _cartesian_positions(path):
    header = read_poscar_header(path)
    rows = path.read_text().splitlines()[8 - (not header.species) : 8 + header.natoms]
    cell = header.cell
    out = []
    for row in rows:
        f = [float(v) for v in row.split()[:3]]
        if header.cartesian:
            out.append([f[i] * header.scale_factors[i] for i in range(3)])
        else:
            out.append([sum(f[k] * cell[k][i] for k in range(3)) for i in range(3)])
    return out


@pytest.mark.parametrize("text", [SI_POSCAR, FEO_POSCAR])
def test_rattle_moves_atoms_within_the_amplitude_reproducibly(tmp_path, text):
    original = write(tmp_path, text)
    before = _cartesian_positions(original)
    seed = rattle_poscar(original, 0.2, entropy="attempt-7", output=tmp_path / "A")
    assert seed == derive_seed("attempt-7")
    rattle_poscar(original, 0.2, seed=seed, output=tmp_path / "B")
    assert (tmp_path / "A").read_text() == (tmp_path / "B").read_text()
    after = _cartesian_positions(tmp_path / "A")
    distances = [math.dist(a, b) for a, b in zip(before, after, strict=True)]
    assert all(0 < d <= 0.2 + 1e-9 for d in distances)
    assert read_poscar_header(tmp_path / "A") == read_poscar_header(original)


def test_rattle_keeps_selective_flags(tmp_path):
    text = SI_POSCAR.replace("Direct", "Selective dynamics\nDirect").replace("0.25 0.25 0.25", "0.25 0.25 0.25 T T F")
    path = write(tmp_path, text)
    rattle_poscar(path, 0.1, seed=3)
    assert path.read_text().splitlines()[10].endswith(" T T F")


def test_contcar_promotion(tmp_path):
    write(tmp_path, SI_POSCAR)
    assert contcar_to_poscar(tmp_path) is False  # no CONTCAR
    write(tmp_path, "", "CONTCAR")
    assert contcar_to_poscar(tmp_path) is False  # empty
    write(tmp_path, "garbage\n", "CONTCAR")
    assert contcar_to_poscar(tmp_path) is False  # unparsable
    moved = SI_POSCAR.replace("0.25 0.25 0.25", "0.26 0.25 0.25")
    write(tmp_path, moved, "CONTCAR")
    assert contcar_to_poscar(tmp_path) is True
    assert (tmp_path / "POSCAR").read_text() == moved
    assert (tmp_path / "POSCAR.orig").read_text() == SI_POSCAR
    assert (tmp_path / "CONTCAR").exists()


@pytest.mark.parametrize(
    ("species_line", "counts_line", "species", "counts"),
    [
        ("Fe O   ! species", "1 1   ! counts", ("Fe", "O"), (1, 1)),
        ("Fe O", "1 1 !counts", ("Fe", "O"), (1, 1)),
        ("Fe O! glued", "1 1", ("Fe", "O"), (1, 1)),
        (None, "1 1 ! VASP 4: no species line", (), (1, 1)),
    ],
)
def test_a_trailing_comment_on_the_species_or_counts_line_is_ignored(
    tmp_path, species_line, counts_line, species, counts
):
    replacement = (f"{species_line}\n" if species_line is not None else "") + f"{counts_line}\n"
    header = read_poscar_header(write(tmp_path, FEO_POSCAR.replace("Fe O\n1 1\n", replacement)))
    assert header.species == species and header.counts == counts
