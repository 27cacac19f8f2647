from __future__ import annotations

import attrs
import pytest
from test_vasp_support import FEO_POSCAR, make_library, make_workdir

from httk.workflow.vasp import VaspPreparationOptions, prepare_vasp_inputs, read_incar, read_kpoint_mesh


def test_prepare_writes_all_three_files(tmp_path):
    library = make_library(tmp_path)
    workdir = make_workdir(tmp_path, FEO_POSCAR, incar="OLD = 1\n")
    options = VaspPreparationOptions(
        incar_tags={"ENCUT": 520, "magmom": "1 1"}, kpoint_density=43, potcar_library=library, magnetic=True,
        potcar_variants={"O": "O_h"},
    )
    prepared = prepare_vasp_inputs(workdir, options)
    assert read_incar(workdir / "INCAR") == {"ENCUT": "520", "MAGMOM": "1 1", "ISPIN": "2"}
    assert read_kpoint_mesh(workdir / "KPOINTS").centering == "Monkhorst-Pack"
    assert prepared.grid == (10, 10, 10)
    assert [c.variant for c in prepared.potcar.choices] == ["Fe_pv", "O_h"]
    assert (workdir / "POTCAR.provenance.json").is_file()


def test_derived_magmom_and_gamma(tmp_path):
    workdir = make_workdir(tmp_path, FEO_POSCAR, incar=None)
    prepare_vasp_inputs(workdir, VaspPreparationOptions(kpoint_density=20, centering="Gamma", magnetic=True))
    assert read_incar(workdir / "INCAR") == {"ISPIN": "2", "MAGMOM": "1*5.0 1*0.6"}
    assert read_kpoint_mesh(workdir / "KPOINTS").centering == "Gamma"
    assert not (workdir / "POTCAR").exists()


def test_options_are_frozen_and_copy_their_tags():
    tags = {"ENCUT": 1}
    options = VaspPreparationOptions(incar_tags=tags)
    tags["ENCUT"] = 2
    assert options.incar_tags == {"ENCUT": 1}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.magnetic = True  # type: ignore[misc]
