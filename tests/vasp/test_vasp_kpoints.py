from __future__ import annotations

import pytest
from test_vasp_support import FEO_POSCAR, SI_POSCAR

from httk.workflow.vasp import (
    DEFAULT_KPOINT_CENTERING,
    KpointMesh,
    KpointsError,
    automatic_kpoint_grid,
    read_kpoint_mesh,
    read_poscar_header,
    set_kpoint_centering,
    write_automatic_kpoints,
)


@pytest.mark.parametrize(
    ("poscar", "density", "grid"),
    [
        (SI_POSCAR, 40, (13, 13, 13)),  # |b| = sqrt(3)/5.43 = 0.319 -> 12.76 -> int(13.26)
        (SI_POSCAR, 20, (6, 6, 6)),  # 6.38 -> 6, as VASP's "Auto 20" (round-up gave 7x7x7)
        (SI_POSCAR, 0.1, (1, 1, 1)),
        (FEO_POSCAR, 43, (10, 10, 10)),  # exactly 43/4.3 = 10
        (FEO_POSCAR, 45, (10, 10, 10)),  # 10.47 -> 10
        (FEO_POSCAR, 45.15, (11, 11, 11)),  # 10.5 -> 11: halves go up, int(l*|b| + 0.5)
        (FEO_POSCAR.replace("0.0 0.0 1.0", "0.0 0.0 2.0"), 43, (10, 10, 5)),
    ],
)
def test_automatic_grid_is_vasps_fully_automatic_rule(tmp_path, poscar, density, grid):
    (tmp_path / "POSCAR").write_text(poscar, encoding="utf-8")
    assert automatic_kpoint_grid(density, poscar=tmp_path / "POSCAR") == grid
    assert automatic_kpoint_grid(density, poscar=read_poscar_header(tmp_path / "POSCAR")) == grid


@pytest.mark.parametrize(
    ("poscar", "density", "grid"),
    [
        (SI_POSCAR, 20, (7, 7, 7)),
        (SI_POSCAR, 40, (13, 13, 13)),
        (FEO_POSCAR, 43, (10, 10, 10)),  # exactly 10: no float round-up
        (FEO_POSCAR, 45, (11, 11, 11)),
    ],
)
def test_round_up_is_an_explicit_option(tmp_path, poscar, density, grid):
    (tmp_path / "POSCAR").write_text(poscar, encoding="utf-8")
    assert automatic_kpoint_grid(density, poscar=tmp_path / "POSCAR", rounding="up") == grid


def test_an_unknown_rounding_is_refused(tmp_path):
    (tmp_path / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    with pytest.raises(KpointsError, match="nearest, up"):
        automatic_kpoint_grid(20, poscar=tmp_path / "POSCAR", rounding="ceil")


@pytest.mark.parametrize("density", [0, -1, float("nan"), "40", True])
def test_bad_density(tmp_path, density):
    (tmp_path / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    with pytest.raises(KpointsError):
        automatic_kpoint_grid(density, poscar=tmp_path / "POSCAR")


def test_write_and_read_mesh(tmp_path):
    path = tmp_path / "KPOINTS"
    assert DEFAULT_KPOINT_CENTERING == "Monkhorst-Pack"
    mesh = write_automatic_kpoints((4, 4, 2), path)
    assert path.read_text() == "automatic mesh 4x4x2\n0\nMonkhorst-Pack\n4 4 2\n"
    assert read_kpoint_mesh(path) == mesh == KpointMesh("automatic mesh 4x4x2", "Monkhorst-Pack", (4, 4, 2))
    write_automatic_kpoints([3, 3, 3], path, centering="gamma", comment="mine")
    assert path.read_text() == "mine\n0\nGamma\n3 3 3\n"


@pytest.mark.parametrize("grid", [(0, 1, 1), (1, 1), (1.5, 1, 1), (True, 1, 1)])
def test_bad_grids(tmp_path, grid):
    with pytest.raises(KpointsError):
        write_automatic_kpoints(grid, tmp_path / "KPOINTS")


def test_bad_centering(tmp_path):
    with pytest.raises(KpointsError, match="Monkhorst-Pack, Gamma"):
        write_automatic_kpoints((1, 1, 1), tmp_path / "KPOINTS", centering="Auto")


@pytest.mark.parametrize(
    "text",
    ["auto\n0\nAuto\n20\n", "explicit\n2\nReciprocal\n0 0 0 1\n0.5 0 0 1\n", "line\n10\nLine-mode\nrec\n"],
)
def test_other_kpoint_forms_are_not_meshes(tmp_path, text):
    (tmp_path / "KPOINTS").write_text(text, encoding="utf-8")
    assert read_kpoint_mesh(tmp_path / "KPOINTS") is None
    with pytest.raises(KpointsError):
        set_kpoint_centering("Gamma", tmp_path / "KPOINTS")


def test_recentering_keeps_grid_and_shift(tmp_path):
    (tmp_path / "KPOINTS").write_text("c\n0\nM\n4 4 4\n0.5 0 0\n", encoding="utf-8")
    mesh = set_kpoint_centering("Gamma", tmp_path / "KPOINTS")
    assert mesh == KpointMesh("c", "Gamma", (4, 4, 4), (0.5, 0.0, 0.0))
    assert (tmp_path / "KPOINTS").read_text() == "c\n0\nGamma\n4 4 4\n0.5 0.0 0.0\n"
