"""Starting magnetic moments: the named tables, and the ``vasp.magnetic_moments`` workspace setting that chooses one.

The setting is checked when ``workspace settings set`` writes it (spec 000 "Application
settings": a refusal is one line, exit 2, nothing written) by the same rule the
helpers apply when they read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_vasp_support import FEO_POSCAR

from httk.workflow.domain import settings as settings_rules
from httk.workflow.vasp import (
    MAGNETIC_MOMENT_TABLES,
    VaspPreparationOptions,
    magnetic_moment_table,
    prepare_vasp_inputs,
    read_incar,
    suggested_magnetic_moments,
)


def test_the_named_tables_are_the_ones_the_setting_rule_knows():
    assert tuple(MAGNETIC_MOMENT_TABLES) == settings_rules.MAGNETIC_MOMENT_TABLE_NAMES
    assert magnetic_moment_table() is MAGNETIC_MOMENT_TABLES["httk"]


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (None, [5.0, 5.0, 1.0, 0.6, 7.0]),  # httk: high-spin Co, Cu 1, Gd by its 4f count
        ("httk", [5.0, 5.0, 1.0, 0.6, 7.0]),
        ("materials-project", [0.6, 0.6, 0.6, 0.6, 0.6]),  # MPRelaxSet: Co 0.6, Cu and plain Gd unlisted
        ({"Co": 3.0, "Gd": 7}, [3.0, 3.0, 0.6, 0.6, 7.0]),
    ],
)
def test_suggested_moments_follow_the_chosen_table(table, expected):
    assert suggested_magnetic_moments(["Co", "Cu", "O", "Gd"], [2, 1, 1, 1], table) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("pymatgen", "unknown table 'pymatgen'; use one of httk, materials-project"),
        ({"fe": 5}, "'fe' is not an element symbol"),
        ({"Fe": "5"}, "the moment of Fe must be a finite number"),
        ({"Fe": True}, "the moment of Fe must be a finite number"),
        ([5, 5], "must be a table name or an object"),
    ],
)
def test_a_bad_table_is_refused_by_the_helpers(value, message):
    with pytest.raises(ValueError, match=message):
        suggested_magnetic_moments(["Fe"], [1], value)


def test_prepare_writes_the_magmom_of_the_chosen_table(tmp_path):
    (tmp_path / "POSCAR").write_text(FEO_POSCAR.replace("Fe O", "Co O"), encoding="utf-8")
    prepare_vasp_inputs(tmp_path, VaspPreparationOptions(magnetic=True, magnetic_moments="materials-project"))
    assert read_incar(tmp_path / "INCAR")["MAGMOM"] == "2*0.6"
    prepare_vasp_inputs(tmp_path, VaspPreparationOptions(magnetic=True))
    assert read_incar(tmp_path / "INCAR")["MAGMOM"] == "1*5.0 1*0.6"


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in root.rglob("*")}


def test_settings_set_stores_a_good_table(cli, tmp_path):
    workspace = str(tmp_path / "ws")
    cli("workspace", "init", workspace)
    cli("workspace", "settings", "set", workspace, "vasp.magnetic_moments", "materials-project")
    cli("workspace", "settings", "set", workspace, "vasp.magnetic_moments", '{"Fe": 4.0, "Co": 3}')
    assert cli.json("workspace", "settings", "show", workspace)["vasp.magnetic_moments"] == {"Fe": 4.0, "Co": 3}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("pymatgen", "error: setting vasp.magnetic_moments: unknown table 'pymatgen'; use one of httk, "
                     'materials-project or an object such as {"Fe": 4.0, "Co": 3.0}'),
        ('{"Fe": "high"}',
         "error: setting vasp.magnetic_moments: the moment of Fe must be a finite number, not 'high'"),
        ("[5, 5]", "error: setting vasp.magnetic_moments must be a table name or an object of element -> moment, "
                   "not [5, 5]"),
    ],
)
def test_settings_set_refuses_a_bad_table_and_writes_nothing(cli, tmp_path, value, message):
    workspace = tmp_path / "ws"
    cli("workspace", "init", str(workspace))
    before = _tree(workspace)
    assert cli.refused("workspace", "settings", "set", str(workspace), "vasp.magnetic_moments", value) == message
    assert _tree(workspace) == before
    settings = workspace / "settings.json"
    assert not settings.exists() or "vasp.magnetic_moments" not in json.loads(settings.read_text())
