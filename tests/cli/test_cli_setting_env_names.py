"""Setting names that meet in one ``HTTK_*`` variable (spec 000 "Application settings").

``.``, ``-`` and ``_`` all become ``_`` in the exported name, so ``a.b-c`` and
``a.b_c`` are both ``HTTK_A_B_C``: ``settings set`` refuses the second name;
a hand-edited settings.json holding both is exported for neither (never for
whichever comes last) and ``precheck`` says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from httk.workflow.store.policy import env_collisions, scalar_settings_env


def _tree(path: str) -> dict[str, bytes | None]:
    root = Path(path)
    return {str(item.relative_to(root)): None if item.is_dir() else item.read_bytes() for item in root.rglob("*")}


@pytest.mark.parametrize(("first", "second"),
                         [("a.b-c", "a.b_c"), ("a.b_c", "a_b.c"), ("vasp.command", "vasp-command")])
def test_a_name_whose_variable_is_another_settings_is_refused(cli, workspace, first, second):
    cli("workspace", "settings", "set", workspace, first, '"one"')
    before = _tree(workspace)
    result = cli("workspace", "settings", "set", workspace, second, '"two"', code=2)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    variable = "HTTK_" + first.upper().replace(".", "_").replace("-", "_")
    assert first in lines[0] and second in lines[0] and variable in lines[0], lines[0]
    assert result.stdout == "" and _tree(workspace) == before
    # The same name again is a change of value, not a collision.
    cli("workspace", "settings", "set", workspace, first, '"three"')
    assert cli.json("workspace", "settings", "show", workspace) == {first: "three"}


def test_colliding_names_are_exported_for_neither():
    settings = {"a.b-c": "x", "a.b_c": "y", "vasp.command": "srun vasp", "flag": True}
    assert env_collisions(settings) == {"HTTK_A_B_C": ("a.b-c", "a.b_c")}
    assert scalar_settings_env(settings) == {"HTTK_VASP_COMMAND": "srun vasp", "HTTK_FLAG": "true"}


def test_precheck_reports_a_collision_in_a_hand_edited_settings_file(cli, workspace):
    path = Path(workspace) / ".httk-workflow" / "settings.json"
    path.write_text(json.dumps({"a.b-c": "x", "a.b_c": "y"}))
    result = cli("precheck", workspace)  # a notice, not a failure: exit 0
    notices = [line for line in result.stdout.splitlines() if line.startswith("notice: ")]
    assert any("a.b-c and a.b_c share the environment variable HTTK_A_B_C" in line for line in notices), notices
    report = cli.json("precheck", workspace)
    [collision] = report["settings_collisions"]
    assert collision["environment"] == "HTTK_A_B_C" and collision["settings"] == ["a.b-c", "a.b_c"]
    assert collision["fix"] == f"httk workflow workspace settings unset {workspace} a.b_c"
    assert report["failed"] is False


@pytest.mark.parametrize("name", ["workflow.step", "workflow_context", "workflow-x.y"])
def test_a_name_in_the_protocols_own_variables_is_refused(cli, workspace, name):
    """``workflow.step`` would be ``HTTK_WORKFLOW_STEP``, which the manager sets itself: ``a.setting`` would read
    the step's name, not the setting."""
    before = _tree(workspace)
    result = cli("workspace", "settings", "set", workspace, name, "1", code=2)
    assert result.stderr.count("\n") == 1 and "HTTK_WORKFLOW_* namespace" in result.stderr, result.stderr
    assert _tree(workspace) == before
    cli("workspace", "settings", "set", workspace, "workflows.step", "1")  # only the protocol's prefix is taken
