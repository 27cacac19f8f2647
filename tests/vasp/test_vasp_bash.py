"""The VASP functions of the Bash library (shell/httk-vasp.sh) against the Python helpers they call.

The fake ``vasp`` on ``PATH`` is the mock VASP (``httk.workflow.testing.mock_vasp``),
which writes the OUTCAR, OSZICAR, CONTCAR and vasprun.xml the output parsers read.
Statuses: spec 002 ("The VASP functions add 20, 21, and 3"), docs/sdks/native_bash_api.md "VASP".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_vasp_support import INCAR, SI_POSCAR

from httk.workflow.testing import mock_vasp
from httk.workflow.vasp import (
    DEFAULT_KPOINT_CENTERING,
    automatic_kpoint_grid,
    run_vasp,
    update_incar,
    write_automatic_kpoints,
)

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "shell" / "httk-workflow.sh"
VASP_LIB = ROOT / "shell" / "httk-vasp.sh"
RELAX_INCAR = "ENCUT = 520\nIBRION = 2\nNSW = 30\nISIF = 3\nEDIFFG = -0.01\nALGO = Fast\nNBANDS = 16\n"


@pytest.fixture
def calc(tmp_path: Path) -> Path:
    """A diamond-Si relaxation directory, and a ``vasp`` program (the mock) in ``tmp_path/bin``."""
    workdir = tmp_path / "calc"
    workdir.mkdir()
    (workdir / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    (workdir / "INCAR").write_text(RELAX_INCAR, encoding="utf-8")
    write_automatic_kpoints((4, 4, 4), workdir / "KPOINTS")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vasp = bin_dir / "vasp"
    vasp.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {mock_vasp.MODULE} "$@"\n', encoding="utf-8")
    vasp.chmod(0o755)
    return workdir


def bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` after sourcing both libraries, in ``cwd``, with the fake ``vasp`` first on ``PATH``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HTTK_VASP_")}
    environ.update(
        HTTK_WORKFLOW_PYTHON=sys.executable, PATH=f"{cwd.parent / 'bin'}{os.pathsep}{os.environ['PATH']}", **env
    )
    text = f'source "{LIB}"\nsource "{VASP_LIB}"\n{script}'
    return subprocess.run(["bash", "-c", text], cwd=cwd, env=environ, capture_output=True, text=True, timeout=120)


def status_of(call: str, cwd: Path, **env: str) -> tuple[int, str, str]:
    result = bash(call, cwd, **env)
    return result.returncode, result.stdout, result.stderr


def twin(calc: Path, name: str) -> Path:
    """A copy of the inputs of ``calc`` beside it, for the Python side of a comparison."""
    other = calc.parent / name
    other.mkdir()
    for file in ("POSCAR", "INCAR", "KPOINTS"):
        (other / file).write_bytes((calc / file).read_bytes())
    return other


def report(directory: Path) -> dict:
    document = json.loads((directory / "vasp-run-report.json").read_bytes())
    document["argv"] = document["argv"][-2:]  # the Bash side ran `vasp`, the Python side the interpreter
    return document


# --------------------------------------------------------------------------- httk_vasp_run


def test_a_converged_run_is_0_and_reports_what_python_reports(calc):
    assert status_of("httk_vasp_run -- vasp", calc) == (0, "", "")
    python = twin(calc, "python")
    result = run_vasp(python, [sys.executable, "-m", mock_vasp.MODULE])
    assert result.converged
    bash_report, python_report = report(calc), report(python)
    bash_report["argv"] = python_report["argv"] = []
    assert bash_report == python_report and bash_report["converged"] is True
    assert (calc / "vasp.out").read_bytes() == (python / "vasp.out").read_bytes()
    assert status_of("httk_vasp_report converged", calc) == (0, "true\n", "")


@pytest.mark.parametrize(
    ("mode", "status", "diagnosis"),
    [
        ("ionic_unconverged", 20, []),  # ended normally, no diagnosis, not converged
        ("electronic_unconverged", 21, ["electronic_unconverged"]),
        ("zbrent", 21, ["zbrent"]),  # exit 1 too: the diagnosis wins over the nonzero exit
        ("crash", 22, []),  # exit 1, nothing a diagnosis recognizes
    ],
)
def test_the_status_is_the_class_of_the_run(calc, mode, status, diagnosis):
    code, out, err = status_of(f"httk_vasp_run -- vasp --fail {mode}", calc)
    assert (code, out, err) == (status, "", "")
    document = json.loads((calc / "vasp-run-report.json").read_bytes())
    assert document["diagnosis"] == diagnosis and document["converged"] is False


def test_a_timeout_is_124_and_the_command_comes_from_the_setting(calc):
    assert status_of("httk_vasp_run --timeout 0.5 -- sleep 30", calc)[0] == 124
    assert json.loads((calc / "vasp-run-report.json").read_bytes())["timed_out"] is True
    # No ARGV: $HTTK_VASP_COMMAND, the environment form of the vasp.command setting, split like a shell line.
    assert status_of("httk_vasp_run", calc, HTTK_VASP_COMMAND="vasp --fail crash")[0] == 22
    code, _, err = status_of("httk_vasp_run", calc)
    assert code == 2 and "vasp.command" in err and len(err.splitlines()) == 1


def test_a_program_that_cannot_start_is_125(calc):
    code, _, err = status_of("httk_vasp_run -- ./no-such-vasp", calc)
    assert code == 125 and "httk_vasp_run: could not start './no-such-vasp'" in err


def test_an_invalid_workdir_is_3_and_nothing_is_run_or_written(calc):
    spaced = calc.parent / "with space"
    spaced.mkdir()
    code, _, err = status_of(f"httk_vasp_run --workdir '{spaced}' -- vasp", calc)
    assert code == 3 and err == f"httk_vasp_run: workdir path contains whitespace: {str(spaced)!r}\n"
    assert list(spaced.iterdir()) == []
    deep = calc / ("d" * 250)
    code, _, err = status_of(f"httk_vasp_run --workdir {deep} -- vasp", calc)
    assert code == 3 and "over the limit of 240" in err
    assert status_of("httk_vasp_validate_workdir", calc) == (0, f"{calc}\n", "")
    assert status_of(f"httk_vasp_validate_workdir '{spaced}'", calc)[0] == 3
    assert sorted(path.name for path in calc.iterdir()) == ["INCAR", "KPOINTS", "POSCAR"]


def test_a_runner_branches_on_the_status_inside_a_handler(make_attempt, calc):
    """Under httk_workflow_main (and its co-process) the status reaches the handler as documented."""
    attempt = make_attempt("relax")
    for name in ("POSCAR", "INCAR", "KPOINTS"):
        (attempt.workdir / name).write_bytes((calc / name).read_bytes())
    runner = calc.parent / "runner.sh"
    runner.write_text(
        f'source "{LIB}"\nsource "{VASP_LIB}"\nhttk_workflow_runner demo relax\n'
        "step_relax() {\n"
        "    local status=0\n"
        "    httk_vasp_run --timeout 60 -- vasp --fail zbrent || status=$?\n"
        "    case $status in\n"
        "        0) httk_workflow_succeed ;;\n"
        '        21) httk_workflow_fail "$(httk_vasp_report diagnosis.0)" "diagnosed" ;;\n'
        '        *) httk_workflow_fail vasp_failed "status $status" ;;\n'
        "    esac\n"
        "}\n"
        'httk_workflow_main "$@"\n',
        encoding="utf-8",
    )
    environ = {**os.environ, "HTTK_WORKFLOW_PYTHON": sys.executable, "HTTK_WORKFLOW_SHELL_LIB": str(LIB)}
    environ["PATH"] = f"{calc.parent / 'bin'}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(
        ["bash", str(runner)], cwd=attempt.workdir, env=environ, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    outcome = attempt.outcome()
    assert (outcome["action"], outcome["failure"]["code"]) == ("fail", "zbrent")


def test_the_guides_vasp_handler_runs_to_success(make_attempt, calc):
    """The VASP example of docs/sdks/native_bash_api.md, verbatim, as a runner with the mock as vasp.command."""
    guide = (ROOT / "docs" / "sdks" / "native_bash_api.md").read_text(encoding="utf-8")
    (block,) = [body for body in re.findall(r"^```bash\n(.*?)^```$", guide, re.M | re.S) if "httk-vasp.sh" in body]
    attempt = make_attempt("relax")
    (attempt.workdir / "POSCAR").write_bytes((calc / "POSCAR").read_bytes())
    (attempt.workdir / "INCAR").write_bytes((calc / "INCAR").read_bytes())
    runner = calc.parent / "guide.sh"
    runner.write_text(block + 'httk_workflow_runner demo relax\nhttk_workflow_main "$@"\n', encoding="utf-8")
    environ = {**os.environ, "HTTK_WORKFLOW_PYTHON": sys.executable, "HTTK_WORKFLOW_SHELL_LIB": str(LIB)}
    environ.update(PATH=f"{calc.parent / 'bin'}{os.pathsep}{os.environ['PATH']}", HTTK_VASP_COMMAND="vasp")
    result = subprocess.run(
        ["bash", str(runner)], cwd=attempt.workdir, env=environ, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert attempt.outcome()["action"] == "succeed"
    assert (attempt.workdir / "KPOINTS").read_text().splitlines()[2] == "Monkhorst-Pack"
    assert "NBANDS" not in (attempt.workdir / "INCAR").read_text()


# --------------------------------------------------------------------------- the run report


def test_the_report_reads_whole_or_by_field_and_no_report_is_absent(calc):
    assert status_of("httk_vasp_report", calc) == (1, "", "")  # no run has reported here yet
    status_of("httk_vasp_run -- vasp --fail zbrent", calc)
    code, out, _ = status_of("httk_vasp_report", calc)
    assert code == 0 and json.loads(out) == json.loads((calc / "vasp-run-report.json").read_bytes())
    assert status_of("httk_vasp_report diagnosis.0", calc) == (0, "zbrent\n", "")
    status_of("httk_vasp_run -- vasp --fail crash", calc)
    assert status_of("httk_vasp_report energy", calc) == (1, "", "")  # null: absent
    assert status_of("httk_vasp_report no.such", calc) == (1, "", "")
    assert status_of("httk_vasp_report diagnosis.²", calc) == (1, "", "")  # '²'.isdigit(), yet no index
    (calc / "other.json").write_text('{"format": "something-else", "format_version": 1}', encoding="utf-8")
    code, _, err = status_of("httk_vasp_report --path other.json", calc)
    assert code == 2 and "is not an httk-workflow-vasp-run-report document" in err


# --------------------------------------------------------------------------- KPOINTS and INCAR


def test_kpoints_start_at_the_default_centering_and_write_the_python_bytes(calc):
    assert DEFAULT_KPOINT_CENTERING == "Monkhorst-Pack"
    code, out, err = status_of("httk_vasp_kpoints 3 4 5", calc)
    assert (code, err) == (0, "") and json.loads(out) == {
        "centering": "Monkhorst-Pack", "comment": "automatic mesh 3x4x5", "grid": [3, 4, 5]
    }
    write_automatic_kpoints((3, 4, 5), calc / "KPOINTS.py")
    assert (calc / "KPOINTS").read_bytes() == (calc / "KPOINTS.py").read_bytes()

    grid = automatic_kpoint_grid(40, calc / "POSCAR", "up")
    assert status_of("httk_vasp_kpoints --density 40 --rounding up --centering gamma --output K2", calc)[0] == 0
    write_automatic_kpoints(grid, calc / "K2.py", "Gamma")
    assert (calc / "K2").read_bytes() == (calc / "K2.py").read_bytes()


@pytest.mark.parametrize(
    "call",
    [
        "httk_vasp_kpoints 4 4",
        "httk_vasp_kpoints 4 4 0",
        "httk_vasp_kpoints 4 4 x",
        "httk_vasp_kpoints 4 4 4 --centering hexagonal",
        "httk_vasp_kpoints --density -3",
        "httk_vasp_kpoints --density abc",
        "httk_vasp_kpoints 4 4 4 --poscar POSCAR",
    ],
)
def test_a_bad_kpoints_call_is_refused_and_writes_nothing(calc, call):
    before = (calc / "KPOINTS").read_bytes()
    code, out, err = status_of(call.replace("KPOINTS", "K"), calc)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("httk_vasp_kpoints: ")
    assert (calc / "KPOINTS").read_bytes() == before


@pytest.mark.parametrize("word", ["²", "٣", "+4", " 4"])
def test_a_grid_count_that_is_not_ascii_digits_is_refused_naming_it(calc, word):
    # '²' and '٣' pass str.isdigit(); int() refuses the first, and neither is a count a user means.
    before = (calc / "KPOINTS").read_bytes()
    code, out, err = status_of(f"httk_vasp_kpoints 4 4 {shlex.quote(word)}", calc)
    assert (code, out) == (2, "")
    assert err == f"httk_vasp_kpoints: a k-point grid is three positive integers, got {'4 4 ' + word!r}\n"
    assert (calc / "KPOINTS").read_bytes() == before


def test_incar_set_updates_statements_as_python_does(calc):
    (calc / "INCAR").write_text(INCAR, encoding="utf-8")
    (calc / "INCAR.py").write_text(INCAR, encoding="utf-8")
    call = "httk_vasp_incar_set ISPIN=1 ENCUT=520 LREAL=true 'SYSTEM=a ; b' --unset NBANDS"
    assert status_of(call, calc) == (0, "", "")
    update_incar({"ISPIN": 1, "ENCUT": 520, "LREAL": True, "SYSTEM": "a ; b", "NBANDS": None}, calc / "INCAR.py")
    assert (calc / "INCAR").read_bytes() == (calc / "INCAR.py").read_bytes()
    assert re.search(r"^ISPIN = 1 ; ISYM = 2", (calc / "INCAR").read_text(), re.M)  # no stale second ISPIN
    assert status_of("httk_vasp_incar_get ispin", calc) == (0, "1\n", "")
    assert status_of("httk_vasp_incar_get LREAL", calc) == (0, ".TRUE.\n", "")
    assert status_of("httk_vasp_incar_get NBANDS", calc) == (1, "", "")
    code, out, _ = status_of("httk_vasp_incar_get", calc)
    assert code == 0 and json.loads(out)["SYSTEM"] == "a ; b"


def test_incar_refusals_write_nothing(calc):
    before = (calc / "INCAR").read_bytes()
    for call in ("httk_vasp_incar_set", "httk_vasp_incar_set NOEQUALS", "httk_vasp_incar_set 'BAD TAG=1'",
                 "httk_vasp_incar_set 'SYSTEM=a ! b'"):
        code, _, err = status_of(call, calc)
        assert code == 2 and len(err.splitlines()) == 1, (call, err)
    assert (calc / "INCAR").read_bytes() == before
    code, _, err = status_of("httk_vasp_incar_get ENCUT --path missing/INCAR", calc)
    assert code == 2 and "missing/INCAR" in err


# --------------------------------------------------------------------------- the library itself


def test_every_vasp_function_is_a_thin_call_into_a_bridge_command():
    from httk.workflow.shell_bridge import COMMANDS, command_name

    listed = subprocess.run(
        ["bash", "-c", f'source "{LIB}"; before=$(declare -F); source "{VASP_LIB}"; diff <(echo "$before") '
         '<(declare -F) | sed -n "s/^> declare -f //p"'],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    thin = re.compile(r"^(httk_\w+)\(\) \{ _httk_call (\w+) \"\$@\" \|\| return; \}$", re.M)
    wrappers = dict(thin.findall(VASP_LIB.read_text(encoding="utf-8")))
    assert sorted(listed) == sorted(wrappers) and all(name.startswith("httk_vasp_") for name in wrappers)
    assert all(command_name(name) == command and command in COMMANDS for name, command in wrappers.items())


def test_the_vasp_library_needs_the_workflow_library_first(tmp_path):
    result = subprocess.run(["bash", "-c", f'source "{VASP_LIB}"'], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and "source httk-workflow.sh first" in result.stderr
