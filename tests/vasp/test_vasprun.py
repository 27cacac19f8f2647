"""The streaming vasprun.xml reader, on the VASP 6.3-shaped sample of tests/data/vasp (see its README)."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import pytest

from httk.workflow.vasp import VasprunError, extract_vasp_results, read_vasprun

DATA = Path(__file__).resolve().parents[1] / "data" / "vasp"
SAMPLE = DATA / "vasprun.xml"
VOLUME = 28.46521915  # Å³, the sample's <i name="volume">
EV_PER_KB_A3 = 1e-22 / 1.60217733e-19  # VASP's EVTOJ: 1 kB·Å³ in eV


def test_the_sample_reads_as_vasp_wrote_it():
    run = read_vasprun(SAMPLE)
    assert run.version == "6.3.0" and run.complete and run.error is None
    assert run.species == ("Si", "Si")
    assert run.incar == {
        "SYSTEM": "Si-II, atom 2 displaced", "PREC": "accurate", "ENCUT": 400.0, "EDIFF": 1e-6, "ISMEAR": 0,
        "SIGMA": 0.1, "ISYM": 0, "PSTRESS": 120.0, "LWAVE": False, "LCHARG": False,
    }  # fmt: skip
    # The last SCF step's energies (OUTCAR's TOTEN); the step's own <energy> adds PSTRESS * V = 120 kB * 28.465 Å³.
    assert (run.energy, run.energy_sigma0) == (-10.28370484, -10.27894668)
    assert run.enthalpy == -8.15171468 and run.enthalpy - run.energy == pytest.approx(120 * VOLUME * EV_PER_KB_A3)
    assert run.forces == ((-0.455124, 0.0910248, 0.250842), (0.455124, -0.0910248, -0.250842))
    assert run.stress == (
        (121.87123414, 0.42130988, 0.88324519), (0.42130988, 119.44310271, -0.08712644),
        (0.88324519, -0.08712644, 117.02641837),
    )  # fmt: skip
    assert run.structure is not None and run.structure.lattice == (
        (-2.346, 2.346, 1.293), (2.346, -2.346, 1.293), (2.346, 2.346, -1.293),
    )  # fmt: skip
    assert run.structure.positions == ((0.0, 0.0, 0.0), (0.762, 0.25, 0.492))
    assert run.electronic_steps == (13,) and run.ionic_steps == 1
    assert run.electronic_converged is True and run.relaxation is False and run.ionic_converged is None


def test_parameters_are_what_vasp_used_typed():
    parameters = read_vasprun(SAMPLE).parameters
    assert {name: parameters[name] for name in ("NELM", "IBRION", "NSW", "LCOMPAT", "SYSTEM", "MAGMOM", "EDIFF")} == {
        "NELM": 60, "IBRION": -1, "NSW": 0, "LCOMPAT": False, "SYSTEM": "Si-II, atom 2 displaced",
        "MAGMOM": [1.0, 1.0], "EDIFF": 1e-6,
    }  # fmt: skip
    # Two <separator> levels down ("electronic convergence detail", "electronic mixer details") and the tags
    # outside any separator are read too: every one of the sample's 107, defaults resolved, not the INCAR's 10.
    assert (parameters["EBREAK"], parameters["MREMOVE"], parameters["GGA_COMPAT"]) == (3e-8, 5, True)
    assert len(parameters) == 107


@pytest.mark.parametrize(("nelm", "converged"), [(13, False), (14, True)])
def test_an_scf_that_used_all_nelm_steps_is_unconverged(tmp_path, nelm, converged):
    path = tmp_path / "vasprun.xml"
    path.write_text(SAMPLE.read_text(encoding="iso-8859-1").replace('name="NELM">    60<', f'name="NELM"> {nelm:5d}<'),
                    encoding="iso-8859-1")
    run = read_vasprun(path)
    assert (run.parameters["NELM"], run.electronic_steps) == (nelm, (13,)) and run.electronic_converged is converged


def test_a_truncated_file_reads_up_to_the_break(tmp_path):
    text = SAMPLE.read_text(encoding="iso-8859-1")
    cut = tmp_path / "vasprun.xml"
    cut.write_text(text[: text.index("<eigenvalues>")], encoding="iso-8859-1")  # killed while writing step 1
    run = read_vasprun(cut)
    assert not run.complete and "truncated" in (run.error or "")
    assert run.energy == -10.28370484 and run.electronic_steps == (13,)


@pytest.mark.parametrize("text", ["", "<html><body/></html>\n"])
def test_no_vasp_document_at_all_is_refused(tmp_path, text):
    path = tmp_path / "vasprun.xml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(VasprunError, match="not a vasprun.xml"):
        read_vasprun(path)


def _relaxation(steps: int, nsw: int, *, complete: bool = True) -> str:
    """The sample with its one <calculation> repeated ``steps`` times and IBRION = 2, NSW = ``nsw``."""
    text = SAMPLE.read_text(encoding="iso-8859-1")
    text = text.replace('name="IBRION">    -1<', 'name="IBRION">     2<')
    text = text.replace('name="NSW">     0<', f'name="NSW"> {nsw}<')
    start, end = text.index(" <calculation>"), text.index(" </calculation>") + len(" </calculation>\n")
    body = text[:start] + text[start:end] * steps + text[end:]
    return body if complete else body[: body.rindex("<calculation>")]


@pytest.mark.parametrize(
    ("steps", "nsw", "complete", "converged"),
    [(3, 50, True, True), (50, 50, True, False), (3, 50, False, False)],
)
def test_a_relaxation_converges_when_it_stopped_before_nsw(tmp_path, steps, nsw, complete, converged):
    path = tmp_path / "vasprun.xml"
    path.write_text(_relaxation(steps, nsw, complete=complete), encoding="iso-8859-1")
    run = read_vasprun(path)
    assert run.relaxation and run.ionic_steps == (steps if complete else steps - 1)
    assert run.ionic_converged is converged
    results = extract_vasp_results(tmp_path)  # no INCAR, no OUTCAR: vasprun.xml alone decides
    assert results.relaxation and results.ionic_steps == run.ionic_steps
    assert results.converged is converged


def test_memory_stays_bounded_by_one_ionic_step_not_the_file(tmp_path):
    path = tmp_path / "vasprun.xml"
    path.write_text(_relaxation(500, 1000), encoding="iso-8859-1")
    size = path.stat().st_size
    assert size > 10_000_000
    tracemalloc.start()
    try:
        run = read_vasprun(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.ionic_steps == 500 and run.complete
    assert peak < 2_000_000, f"peak {peak} bytes for a {size}-byte file"  # ElementTree.parse keeps ~130 MB here


def test_extract_prefers_vasprun_and_reports_its_truncation(tmp_path):
    shutil.copy(SAMPLE, tmp_path / "vasprun.xml")
    results = extract_vasp_results(tmp_path)
    assert results.finished and results.converged and results.energy == -10.28370484
    assert results.electronic_steps == 13 and results.vasprun is not None and results.problems == ()
    text = SAMPLE.read_text(encoding="iso-8859-1")
    (tmp_path / "vasprun.xml").write_text(text[: text.index("<dos>")], encoding="iso-8859-1")
    results = extract_vasp_results(tmp_path)
    assert not results.finished and not results.converged and "truncated" in results.problems[0]
