"""The mock VASP (``python -m httk.workflow.testing.mock_vasp``) through the real helpers.

Its outputs must be what ``run_vasp``/``extract_vasp_results`` parse, and every
failure it can play must be diagnosed as the ``reviewed-v1`` remedy table
expects, with the first rung of that ladder making the rerun succeed.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ElementTree

import pytest
from test_vasp_support import SI_POSCAR

from httk.workflow.testing import mock_vasp
from httk.workflow.vasp import (
    apply_vasp_remedy,
    contcar_to_poscar,
    extract_vasp_results,
    plan_vasp_remedy,
    read_poscar_header,
    run_vasp,
    write_automatic_kpoints,
)
from httk.workflow.vasp.remedies import REVIEWED_V1_SEQUENCES

RELAX_INCAR = "ENCUT = 520\nIBRION = 2\nNSW = 30\nISIF = 3\nEDIFFG = -0.01\nALGO = Fast\nNBANDS = 16\n"


def mock(*options: str) -> list[str]:
    return [sys.executable, "-m", mock_vasp.MODULE, *options]


@pytest.fixture
def calc(tmp_path):
    """A diamond-Si relaxation directory: POSCAR, INCAR, a Monkhorst-Pack KPOINTS, no POTCAR."""
    workdir = tmp_path / "calc"
    workdir.mkdir()
    (workdir / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    (workdir / "INCAR").write_text(RELAX_INCAR, encoding="utf-8")
    write_automatic_kpoints((4, 4, 4), workdir / "KPOINTS")
    return workdir


def test_a_relaxation_is_parsed_as_converged(calc):
    result = run_vasp(calc, mock(), timeout=60)
    assert (result.returncode, result.diagnosis, result.converged) == (0, (), True)
    results = extract_vasp_results(calc)
    assert results.relaxation and results.finished and results.reached_accuracy
    assert results.ionic_steps >= 2 and results.energy == pytest.approx(result.energy)
    assert results.energy_sigma0 == pytest.approx(results.energy - 2e-4)
    assert "reached required accuracy" in (calc / "vasp.out").read_text()
    # CONTCAR is a POSCAR of the relaxed cell, and vasprun.xml is well formed and agrees on the energy.
    relaxed = read_poscar_header(calc / "CONTCAR")
    assert relaxed.species == ("Si",) and relaxed.counts == (2,)
    assert relaxed.volume != pytest.approx(read_poscar_header(calc / "POSCAR").volume)
    root = ElementTree.parse(calc / "vasprun.xml").getroot()
    last = root.findall("calculation")[-1].find("energy/i[@name='e_fr_energy']")
    assert float(last.text) == pytest.approx(result.energy)
    assert root.find("structure[@name='finalpos']") is not None


def test_energies_follow_the_inputs_alone(calc, tmp_path):
    first = run_vasp(calc, mock(), timeout=60).energy
    again = tmp_path / "again"
    again.mkdir()
    for name in ("POSCAR", "INCAR", "KPOINTS"):
        (again / name).write_bytes((calc / name).read_bytes())
    assert run_vasp(again, mock(), timeout=60).energy == first
    assert (again / "OSZICAR").read_bytes() == (calc / "OSZICAR").read_bytes()
    (again / "INCAR").write_text(RELAX_INCAR.replace("ENCUT = 520", "ENCUT = 300"), encoding="utf-8")
    assert run_vasp(again, mock(), timeout=60).energy != first


def test_a_static_run_takes_one_ionic_step(calc):
    (calc / "INCAR").write_text("ENCUT = 520\nIBRION = -1\nNSW = 0\n", encoding="utf-8")
    result = run_vasp(calc, mock(), timeout=60)
    results = extract_vasp_results(calc)
    assert result.converged and results.ionic_steps == 1 and not results.relaxation


@pytest.mark.parametrize("code", list(REVIEWED_V1_SEQUENCES))
def test_each_failure_is_diagnosed_and_its_first_rung_remedies_it(calc, code):
    command = mock("--fail", code, "--until-remedied")
    failed = run_vasp(calc, command, timeout=60)
    assert failed.diagnosis == (code,) and not failed.converged
    remedy = plan_vasp_remedy(calc, history_path="history.json")
    assert (remedy.code, remedy.rung) == (code, REVIEWED_V1_SEQUENCES[code][0])
    apply_vasp_remedy(calc, remedy, history_path="history.json")
    rerun = run_vasp(calc, command, timeout=60)
    assert (rerun.returncode, rerun.diagnosis, rerun.converged) == (0, (), True)


def test_until_remedied_keeps_failing_while_nothing_changed(calc):
    for _ in range(2):
        assert run_vasp(calc, mock("--fail", "zbrent", "--until-remedied"), timeout=60).diagnosis == ("zbrent",)
    # A change the zbrent remedy does not make is no remedy.
    (calc / "INCAR").write_text(RELAX_INCAR + "LWAVE = .FALSE.\n", encoding="utf-8")
    assert run_vasp(calc, mock("--fail", "zbrent", "--until-remedied"), timeout=60).diagnosis == ("zbrent",)
    assert json.loads((calc / mock_vasp.STATE_FILE).read_text())["runs"] == 3


def test_zbrent_leaves_a_contcar_to_restart_from(calc):
    result = run_vasp(calc, mock("--fail", "zbrent"), timeout=60)
    assert result.returncode == 1 and not extract_vasp_results(calc).finished
    assert contcar_to_poscar(calc) and (calc / "POSCAR.orig").is_file()


def test_fail_runs_counts_runs_in_the_directory(calc):
    command = mock("--fail", "subspace", "--fail-runs", "2")
    assert [run_vasp(calc, command, timeout=60).converged for _ in range(3)] == [False, False, True]


def test_the_environment_controls_it_too(calc):
    env = {**os.environ, "MOCK_VASP_FAIL": "brmix", "MOCK_VASP_FAIL_RUNS": "1"}
    assert run_vasp(calc, mock(), env=env, timeout=60).diagnosis == ("brmix",)
    assert run_vasp(calc, mock(), env=env, timeout=60).converged


def test_a_crash_has_no_diagnosis_and_no_remedy(calc):
    result = run_vasp(calc, mock("--fail", "crash"), timeout=60)
    assert (result.returncode, result.diagnosis, result.converged) == (1, (), False)
    assert plan_vasp_remedy(calc) is None


def test_an_unfinished_relaxation_ends_normally_without_the_accuracy(calc):
    result = run_vasp(calc, mock("--fail", "ionic_unconverged"), timeout=60)
    results = extract_vasp_results(calc)
    assert (result.returncode, result.diagnosis, result.converged) == (0, (), False)
    assert results.finished and results.relaxation and not results.reached_accuracy


def test_a_potcar_must_match_the_species(calc):
    (calc / "POTCAR").write_text("  PAW_PBE Si\n   TITEL  = PAW_PBE Si\n End of Dataset\n" * 2, encoding="utf-8")
    result = run_vasp(calc, mock(), timeout=60)
    assert result.returncode == 1 and "2 potentials but POSCAR has 1 species" in (calc / "vasp.out").read_text()
    (calc / "POTCAR").write_text("  PAW_PBE Si\n   TITEL  = PAW_PBE Si\n End of Dataset\n", encoding="utf-8")
    assert run_vasp(calc, mock(), timeout=60).converged


def test_missing_inputs_and_unknown_modes_are_refused(calc):
    (calc / "INCAR").unlink()
    result = run_vasp(calc, mock(), timeout=60)
    assert result.returncode == 1 and "INCAR could not be opened" in (calc / "vasp.out").read_text()
    unknown = run_vasp(calc, mock("--fail", "meltdown"), timeout=60)
    assert unknown.returncode == 2 and "unknown failure mode 'meltdown'" in (calc / "vasp.err").read_text()


def test_vasp_float_is_the_fortran_e_format():
    assert mock_vasp.vasp_float(-10.839211) == "-.10839211E+02"
    assert mock_vasp.vasp_float(0.05, 3) == ".500E-01"
    assert mock_vasp.vasp_float(9.9999999999) == ".10000000E+02"
    assert float(mock_vasp.vasp_float(-4.1072499)) == pytest.approx(-4.1072499)
