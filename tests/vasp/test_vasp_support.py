"""Shared builders for the VASP tests (imported by the sibling test modules), and the import-hygiene test."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

SI_POSCAR = """Si2 diamond
5.43
0.0 0.5 0.5
0.5 0.0 0.5
0.5 0.5 0.0
Si
2
Direct
0.00 0.00 0.00
0.25 0.25 0.25
"""

FEO_POSCAR = """FeO rocksalt
4.3
1.0 0.0 0.0
0.0 1.0 0.0
0.0 0.0 1.0
Fe O
1 1
Cartesian
0.0 0.0 0.0
0.5 0.5 0.5
"""

INCAR = """SYSTEM = test   ! a comment
ISPIN = 2 ; ISYM = 2
encut = 400  # lower-case tag
NBANDS = 16
"""


def potcar_text(element: str, variant: str, zval: float) -> str:
    return (
        f"  PAW_PBE {variant} 01Jan2000\n {zval:.1f}\n parameters from PSCTR are:\n"
        f"   VRHFIN ={element}: s p\n   TITEL  = PAW_PBE {variant} 01Jan2000\n"
        f"   POMASS =   10.000; ZVAL   =    {zval:.3f}    mass and valenz\n End of Dataset\n"
    )


def make_library(root: Path) -> Path:
    """Si (plain), Fe only as Fe_pv (gzip), O and O_h (plain), Mn as POTCAR.Z (gzip data, read via gzip -dc)."""
    library = root / "potpaw_PBE"
    for variant, element, zval in (("Si", "Si", 4.0), ("O", "O", 6.0), ("O_h", "O", 6.0)):
        (library / variant).mkdir(parents=True)
        (library / variant / "POTCAR").write_text(potcar_text(element, variant, zval), encoding="utf-8")
    (library / "Fe_pv").mkdir()
    (library / "Fe_pv" / "POTCAR.gz").write_bytes(gzip.compress(potcar_text("Fe", "Fe_pv", 14.0).encode()))
    (library / "Mn").mkdir()
    (library / "Mn" / "POTCAR.Z").write_bytes(gzip.compress(potcar_text("Mn", "Mn", 7.0).encode()))
    return library


def make_workdir(root: Path, poscar: str = SI_POSCAR, incar: str | None = INCAR) -> Path:
    workdir = root / "calc"
    workdir.mkdir()
    (workdir / "POSCAR").write_text(poscar, encoding="utf-8")
    if incar is not None:
        (workdir / "INCAR").write_text(incar, encoding="utf-8")
    return workdir


def test_importing_the_vasp_package_pulls_only_attrs_from_outside_the_stdlib():
    code = (
        "import sys\n"
        "import httk.workflow.vasp\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(r for r in roots if r not in sys.stdlib_module_names and not r.startswith('_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['attr', 'attrs', 'httk']"


def test_the_builders_make_what_they_say(tmp_path):
    library = make_library(tmp_path)
    assert sorted(p.name for p in library.iterdir()) == ["Fe_pv", "Mn", "O", "O_h", "Si"]
    assert (make_workdir(tmp_path) / "INCAR").is_file()
