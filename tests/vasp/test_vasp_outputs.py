from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from httk.workflow.vasp import (
    VASP_OUTPUT_FILES,
    VASP_RESTART_ARTIFACTS,
    VaspWorkdirError,
    clean_vasp_outputs,
    diagnose_vasp_output,
    extract_vasp_results,
    validate_vasp_workdir,
)

OSZICAR = """       N       E                     dE             d eps       ncg     rms          rms(c)
DAV:   1    -0.1E+02   -0.1E+02   -0.2E+03   100   0.1E+02
DAV:   2    -0.108E+02   -0.2E+00   -0.2E+00   100   0.1E+01
   1 F= -.10839211E+02 E0= -.10838000E+02  d E =-.108392E+02
DAV:   1    -0.1E+02   -0.1E+02   -0.2E+03   100   0.1E+02
   2 F= -.10900000E+02 E0= -.10899000E+02  d E =-.6E-01
"""

OUTCAR_DONE = """ free  energy   TOTEN  =       -10.90000000 eV
  energy  without entropy=      -10.89800000  energy(sigma->0) =      -10.89900000
 reached required accuracy - stopping structural energy minimisation
 General timing and accounting informations for this job:
"""


def files(tmp_path, **contents):
    for name, text in contents.items():
        (tmp_path / name).write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ({"OSZICAR": OSZICAR, "OUTCAR": OUTCAR_DONE},
         {"energy": -10.9, "energy_sigma0": -10.899, "ionic_steps": 2, "electronic_steps": 1, "converged": True}),
        ({"OUTCAR": OUTCAR_DONE}, {"energy": -10.9, "energy_sigma0": -10.899, "ionic_steps": 0, "converged": True}),
        ({"OSZICAR": OSZICAR}, {"energy": -10.9, "finished": False, "converged": False}),
        ({"OSZICAR": OSZICAR, "OUTCAR": OUTCAR_DONE, "INCAR": "NELM = 1\n"},
         {"electronic_converged": False, "converged": False}),
        ({"OUTCAR": OUTCAR_DONE.replace(" reached required", " not"), "INCAR": "IBRION = 2 ; NSW = 10\n"},
         {"relaxation": True, "reached_accuracy": False, "converged": False}),
        ({}, {"energy": None, "finished": False, "converged": False, "electronic_converged": None}),
    ],
)
def test_extract_results(tmp_path, contents, expected):
    files(tmp_path, **contents)
    results = extract_vasp_results(tmp_path)
    for name, value in expected.items():
        assert getattr(results, name) == (pytest.approx(value) if isinstance(value, float) else value), name


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (" ZBRENT: fatal error in bracketing", "zbrent"),
        ("WARNING: Sub-Space-Matrix is not hermitian in DAV", "subspace_matrix"),
        ("Error EDDDAV: Call to ZHEGV failed. Returncode = 7 1 8", "edddav"),
        ("Error EDDRMM: call to ZHEGV failed, returncode = 6 3 16", "eddrmm"),
        ("ERROR: TOO FEW BANDS", "too_few_bands"),
        ("Tetrahedron method fails for NKPT<4. NKPT =   1", "tetrahedron"),
        ("VERY BAD NEWS! internal error in subroutine IBZKPT:", "ibzkpt"),
        ("inverse of rotation matrix was not found (increase SYMPREC)", "rotation_matrix"),
        ("BRMIX: very serious problems the old and the new charge density differ", "brmix"),
    ],
)
def test_diagnosis_recognises_classic_errors(tmp_path, line, code):
    files(tmp_path, **{"vasp.out": f"running\n{line}\n{line}\n"})
    evidence = diagnose_vasp_output(tmp_path)
    assert [(e.code, e.source, e.line_number) for e in evidence] == [(code, "vasp.out", 2)]


def test_diagnosis_of_a_clean_run_is_empty(tmp_path):
    files(tmp_path, OUTCAR=OUTCAR_DONE, **{"vasp.out": "DAV: 1 ...\n"})
    assert diagnose_vasp_output(tmp_path) == []


def test_clean_keeps_restart_artifacts_unless_asked(tmp_path):
    names = [*VASP_OUTPUT_FILES, *VASP_RESTART_ARTIFACTS, "POSCAR", "INCAR", "extra.log"]
    files(tmp_path, **{name: "x" for name in names})
    removed = clean_vasp_outputs(tmp_path, keep=("WAVECAR",))
    assert set(removed) == set(VASP_OUTPUT_FILES) - {"WAVECAR"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["CONTCAR", "INCAR", "POSCAR", "WAVECAR", "extra.log", "vasp-run-report.json"]
    )
    assert clean_vasp_outputs(tmp_path, also_remove=("CONTCAR", "extra.log")) == ["WAVECAR", "CONTCAR", "extra.log"]


@pytest.mark.parametrize(
    "kwargs", [{"also_remove": ("a/b",)}, {"keep": ("..",)}, {"also_remove": ("CONTCAR",), "keep": ("CONTCAR",)}]
)
def test_clean_refuses_ambiguous_names(tmp_path, kwargs):
    with pytest.raises(ValueError):
        clean_vasp_outputs(tmp_path, **kwargs)


def test_validate_workdir(tmp_path):
    assert validate_vasp_workdir(tmp_path) == tmp_path.absolute()
    spaced = tmp_path / "has space"
    spaced.mkdir()
    long = tmp_path / ("x" * (241 - len(str(tmp_path))))
    for bad, match in ((spaced, "whitespace"), (long, "over the limit"), (tmp_path / "missing", "not a directory")):
        with pytest.raises(VaspWorkdirError, match=match):
            validate_vasp_workdir(bad)


DATA = Path(__file__).resolve().parents[1] / "data" / "vasp"
RELAX_INCAR_QUOTED = 'SYSTEM = "Si ; relax"\nIBRION = 2\nNSW = 50\n'


@pytest.mark.parametrize(
    ("incar", "problem"),
    [
        ("IBRION = 2\nNSW 50\n", "has no '='"),  # VASP would stop on it too: never read as "no tags"
        ('SYSTEM = "never closed\nIBRION = 2\n', "never closed"),
    ],
)
def test_an_unreadable_incar_is_a_problem_never_an_empty_incar(tmp_path, incar, problem):
    files(tmp_path, OUTCAR=OUTCAR_DONE.replace(" reached required", " not"), INCAR=incar)
    results = extract_vasp_results(tmp_path)
    assert not results.converged
    assert len(results.problems) == 1 and "INCAR cannot be read" in results.problems[0]
    assert problem in results.problems[0]


def test_an_unfinished_relaxation_with_a_quoted_incar_is_not_converged(tmp_path):
    # The case: the quoted SYSTEM used to make read_incar raise, the INCAR read as empty, the run "converged".
    files(tmp_path, OUTCAR=OUTCAR_DONE.replace(" reached required", " not"), INCAR=RELAX_INCAR_QUOTED)
    results = extract_vasp_results(tmp_path)
    assert results.relaxation and not results.reached_accuracy and not results.converged and results.problems == ()


VASP6_UNCONVERGED = (
    "------------------------ aborting loop EDIFF was not reached (unconverged)  ----------------------------\n"
)


def test_vasp6_unconverged_scf_in_outcar_alone_is_not_converged(tmp_path):
    files(tmp_path, OUTCAR=VASP6_UNCONVERGED + OUTCAR_DONE.replace(" reached required", " not"))
    results = extract_vasp_results(tmp_path)
    assert results.finished and results.electronic_converged is False and not results.converged


def test_the_shipped_vasp6_sample_says_unconverged(tmp_path):
    # 12 SCF steps and no NELM echo: counted against the default NELM 60 they look converged; VASP's line says not.
    shutil.copy(DATA / "OUTCAR.vasp6-unconverged", tmp_path / "OUTCAR")
    results = extract_vasp_results(tmp_path)
    assert results.electronic_steps == 12 and results.electronic_converged is False


def test_a_verdict_of_an_earlier_ionic_step_says_nothing_of_the_last_scf(tmp_path):
    step = "---------------------------------- Iteration    {}(   {})  ----------------------------------\n"
    converged = "------------------------ aborting loop because EDIFF is reached ------------------------\n"
    outcar = step.format(1, 1) + converged + step.format(2, 1) + VASP6_UNCONVERGED + step.format(3, 1) + OUTCAR_DONE
    files(tmp_path, OUTCAR=outcar)
    # Step 3 has no verdict (VASP 5 is silent when NELM runs out): its own count (1 of NELM 60) decides, not step 2.
    assert extract_vasp_results(tmp_path).electronic_converged is True
    files(tmp_path, OUTCAR=outcar.replace(step.format(3, 1), ""))
    assert extract_vasp_results(tmp_path).electronic_converged is False


def test_the_shipped_samples_read(tmp_path):
    for name in ("OUTCAR", "OSZICAR"):
        shutil.copy(DATA / name, tmp_path / name)
    results = extract_vasp_results(tmp_path)
    # The two are of different runs. OSZICAR (3 ionic steps of 12, 6 and 5 SCF steps) wins the energies and the
    # counts; the OUTCAR (a static run of 13 SCF steps) says finished.
    assert (results.energy, results.energy_sigma0) == (-10.817726, -10.817714)
    assert results.ionic_steps == 3 and results.electronic_steps == 5 and results.finished
    (tmp_path / "OSZICAR").unlink()
    results = extract_vasp_results(tmp_path)
    assert results.energy == pytest.approx(-10.28370484) and results.energy_sigma0 == pytest.approx(-10.27894668)
    assert results.electronic_steps == 13 and results.ionic_steps == 0
    assert results.finished and results.electronic_converged is True and results.converged


def test_an_outcar_alone_is_judged_by_its_own_scf_count_and_echoed_nelm(tmp_path):
    # VASP 5 writes no verdict when NELM runs out; OUTCAR's "Iteration 1( 40)" and its echo "NELM = 40" still tell.
    echo = "   NELM   =     40;   NELMIN=  2; NELMDL= -5     # of ELM steps\n   IBRION =     -1    ionic relax\n"
    step = "----------------------------------------- Iteration    1(  {})  ----------------------------------------\n"
    files(tmp_path, OUTCAR=echo + "".join(step.format(k) for k in range(1, 41)) + OUTCAR_DONE)
    results = extract_vasp_results(tmp_path)
    assert results.electronic_steps == 40 and results.electronic_converged is False and not results.converged
    files(tmp_path, OUTCAR=echo.replace("40;", "60;") + "".join(step.format(k) for k in range(1, 41)) + OUTCAR_DONE)
    assert extract_vasp_results(tmp_path).converged
