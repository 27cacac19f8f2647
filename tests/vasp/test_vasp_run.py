from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_vasp_support import SI_POSCAR

from httk.workflow.vasp import read_vasp_run_report, run_vasp, vasp_command

FAKE_VASP = '''
import sys
mode = sys.argv[1]
if mode == "ok":
    open("OSZICAR", "w").write("DAV:   1    -0.1E+02   -0.1E+02   -0.2E+03   100   0.1E+02\\n"
                               "   1 F= -.10839211E+02 E0= -.10838000E+02  d E =-.108392E+02\\n")
    open("OUTCAR", "w").write(" free  energy   TOTEN  =  -10.839211 eV\\n General timing and accounting\\n")
    print("running on 1 total cores")
elif mode == "zbrent":
    open("OUTCAR", "w").write(" partial\\n")
    print(" ZBRENT: fatal error in bracketing")
    print("     please rerun with smaller EDIFF, or copy CONTCAR")
    sys.exit(1)
elif mode == "sleep":
    import time
    time.sleep(30)
'''


@pytest.fixture
def calc(tmp_path):
    workdir = tmp_path / "calc"
    workdir.mkdir()
    (workdir / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    (tmp_path / "fake_vasp.py").write_text(FAKE_VASP, encoding="utf-8")
    return workdir


def argv(calc, mode):
    return [sys.executable, str(calc.parent / "fake_vasp.py"), mode]


def test_successful_run(calc):
    result = run_vasp(calc, argv(calc, "ok"), timeout=60)
    assert (result.returncode, result.diagnosis, result.converged) == (0, (), True)
    assert result.energy == pytest.approx(-10.839211)
    report = read_vasp_run_report(calc / "vasp-run-report.json")
    assert report["format"] == "httk-workflow-vasp-run-report" and report["format_version"] == 1
    assert report["returncode"] == 0 and report["diagnosis"] == [] and report["converged"] is True
    assert (calc / "vasp.out").read_text().startswith("running")
    assert (calc / "process-report.json").is_file()


def test_zbrent_run_is_diagnosed(calc):
    result = run_vasp(calc, argv(calc, "zbrent"), timeout=60)
    assert (result.returncode, result.diagnosis, result.converged, result.energy) == (1, ("zbrent",), False, None)
    report = json.loads((calc / "vasp-run-report.json").read_text())
    assert report["diagnosis"] == ["zbrent"]
    assert report["evidence"][0]["source"] == "vasp.out"


def test_timeout(calc):
    result = run_vasp(calc, argv(calc, "sleep"), timeout=0.5)
    assert result.timed_out and not result.converged
    assert read_vasp_run_report(calc / "vasp-run-report.json")["timed_out"] is True


def test_command_from_string_and_environment(calc, monkeypatch):
    assert vasp_command("mpirun -n 4 'vasp std'") == ["mpirun", "-n", "4", "vasp std"]
    monkeypatch.delenv("HTTK_VASP_COMMAND", raising=False)
    with pytest.raises(ValueError, match="vasp.command"):
        vasp_command(None)
    monkeypatch.setenv("HTTK_VASP_COMMAND", f"{sys.executable} {calc.parent / 'fake_vasp.py'} ok")
    assert run_vasp(calc).converged


def test_a_missing_program_raises(calc):
    with pytest.raises(OSError):
        run_vasp(calc, [str(calc / "no-such-vasp")])


def test_report_format_is_checked(tmp_path):
    (tmp_path / "r.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError):
        read_vasp_run_report(tmp_path / "r.json")


def test_a_vasprun_that_used_nelm_steps_is_diagnosed_electronic_unconverged(calc, tmp_path):
    # No OSZICAR, no OUTCAR: the diagnosis reads vasprun.xml (the sample, its NELM lowered to its 13 SCF steps).
    sample = (Path(__file__).resolve().parents[1] / "data" / "vasp" / "vasprun.xml").read_text(encoding="iso-8859-1")
    assert 'name="NELM">    60<' in sample and sample.count("<scstep>") == 13
    (tmp_path / "vasprun.xml").write_text(sample.replace('name="NELM">    60<', 'name="NELM">    13<'),
                                          encoding="iso-8859-1")
    copier = tmp_path / "copy_vasprun.py"
    copier.write_text(f"import shutil\nshutil.copy({str(tmp_path / 'vasprun.xml')!r}, 'vasprun.xml')\n")
    result = run_vasp(calc, [sys.executable, str(copier)], timeout=60)
    assert result.returncode == 0 and result.diagnosis == ("electronic_unconverged",) and not result.converged
    assert result.energy == pytest.approx(-10.28370484)
    (tmp_path / "vasprun.xml").write_text(sample, encoding="iso-8859-1")
    result = run_vasp(calc, [sys.executable, str(copier)], timeout=60)
    assert result.diagnosis == () and result.converged and result.report["problems"] == []
