"""docs/vasp_runners.md cannot rot: its python blocks run, in order, against a fake POTCAR library and fake VASP."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_vasp_support import SI_POSCAR, make_library

import httk.workflow
from httk.workflow import vasp

PAGE = Path(__file__).resolve().parents[2] / "docs" / "vasp_runners.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SPEC_NAMES = ("assemble_potcar", "automatic_kpoint_grid", "update_incar", "write_automatic_kpoints")

FAKE_VASP = (
    "import sys\n"
    "print(' ZBRENT: fatal error in bracketing')\n"
    "open('CONTCAR', 'w').write(open('POSCAR').read())\n"
    "sys.exit(1)\n"
)


def blocks() -> list[str]:
    return [body for lang, body in FENCE.findall(PAGE.read_text(encoding="utf-8")) if lang == "python"]


@pytest.fixture
def calculation(tmp_path, monkeypatch):
    """A diamond-Si directory as cwd and the fake library in place of /data/vasp/potpaw_PBE."""
    library = make_library(tmp_path)
    workdir = tmp_path / "calc"
    workdir.mkdir()
    (workdir / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    (workdir / "INCAR").write_text("ISPIN = 1 ; ISYM = 2\nIBRION = 2 ; NSW = 20\n", encoding="utf-8")
    (tmp_path / "fake_vasp.py").write_text(FAKE_VASP, encoding="utf-8")
    monkeypatch.chdir(workdir)
    for name in SPEC_NAMES:  # the spec's example imports them from the package root
        assert getattr(httk.workflow, name) is getattr(vasp, name)
    return {"library": library, "workdir": workdir, "tmp": tmp_path}


def adapt(source: str, library: Path) -> str:
    return source.replace("/data/vasp/potpaw_PBE", str(library))


def test_the_spec_example_is_on_the_page():
    assert any('assembled = assemble_potcar("/data/vasp/potpaw_PBE", poscar="POSCAR", output="POTCAR")' in b
               for b in blocks())


def test_the_page_runs(calculation, capsys):
    namespace = {"VASP_COMMAND": [sys.executable, str(calculation["tmp"] / "fake_vasp.py")],
                 "PAYLOAD": str(calculation["tmp"] / "payload")}
    executed = 0
    for index, body in enumerate(blocks()):
        code = compile(adapt(body, calculation["library"]), f"{PAGE.name} python block {index}", "exec")
        if "Runner(" in body:
            continue  # the complete runner needs a manager; it is compiled above
        exec(code, namespace)
        executed += 1
    assert executed >= 6
    out = capsys.readouterr().out
    assert "[('Si', 'Si', " in out
    assert "1 ('zbrent',) False None" in out
    assert "zbrent reduce_potim {'POTIM': 0.25}" in out
    workdir = calculation["workdir"]
    assert vasp.read_incar(workdir / "INCAR")["ENCUT"] == "520"
    assert (workdir / "POTCAR.provenance.json").is_file()
    assert (calculation["tmp"] / "payload" / ".httk-job" / "vasp-remedies.json").is_file()


def test_every_exported_helper_is_named_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    wanted = [
        "read_poscar_header", "automatic_kpoint_grid", "write_automatic_kpoints", "DEFAULT_KPOINT_CENTERING",
        "read_incar", "update_incar", "calculate_nbands", "bump_nbands", "suggested_magnetic_moments",
        "assemble_potcar", "PotcarAssembly", "VaspPreparationOptions", "prepare_vasp_inputs",
        "validate_vasp_workdir", "clean_vasp_outputs", "VASP_RESTART_ARTIFACTS", "contcar_to_poscar",
        "extract_vasp_results", "run_vasp", "plan_vasp_remedy", "apply_vasp_remedy", "job_remedy_history_path",
        "register_remedy_policy", "remedy_policy_names", "rattle_poscar", "derive_seed",
        "read_vasprun", "magnetic_moment_table", "MAGNETIC_MOMENT_TABLES", "vasp.magnetic_moments",
    ]
    assert [name for name in wanted if name not in text] == []
