"""The parity table of docs/sdks/sdk_parity.md is enforced against the code (spec 002).

The checker parses the table and reports a listed Python member that does not
exist, a listed Bash function that shell/httk-workflow.sh does not define, and a
public member of ``Runner`` or ``Attempt``, or a public function of the Bash
library, that has no row. A Python cell without a submodule names a root export
of ``httk.workflow`` (or a member of one): the spec's reading of the table, so a
type the table names that ``from httk.workflow import ...`` cannot reach fails.
It is exercised on the real table and on modified copies, so a checker that
stopped checking would fail too.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "sdks" / "sdk_parity.md"
LIB = ROOT / "shell" / "httk-workflow.sh"
HEADER = ["Python", "Bash", "Semantics", "Protocol artifact"]
ABSENT = "—"
STEP_HANDLER = "step_<name>"
#: The named submodules a Python cell may spell (spec 002 "How to read the table"); any other
#: cell names a root export of httk.workflow.
SUBMODULES = ("protocol", "runtime", "runtime_utils", "supervision")
#: The rows of spec 002's table; docs/sdks/sdk_parity.md has exactly these (no row of its own).
SPEC_ROWS = 58


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every row of the table below ``## The table``, markup stripped."""
    section = markdown.split("## The table", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [re.sub(r"[`*]", "", cell).strip() for cell in line.strip().strip("|").split("|")]
        if cells == HEADER or set("".join(cells)) <= set("- "):
            continue
        assert len(cells) == 4, f"a parity row needs 4 cells: {line}"
        rows.append(cells)
    return rows


def resolve(name: str) -> Any:
    """The object a Python cell names; ``LookupError`` when it does not exist where the cell says."""
    parts = name.split(".")
    if parts[0] in SUBMODULES:
        value: Any = importlib.import_module(f"httk.workflow.{parts[0]}")
    else:
        # No submodule spelled: the name must be exported at the root (`from httk.workflow import X`).
        value = importlib.import_module("httk.workflow")
    for part in parts[1:] if parts[0] in SUBMODULES else parts:
        fields = getattr(value, "__attrs_attrs__", ())
        if hasattr(value, part):
            value = getattr(value, part)
        elif any(field.name == part for field in fields):
            value = next(field for field in fields if field.name == part)
        else:
            raise LookupError(name)
    return value


def bash_functions(lib: Path) -> set[str]:
    """The public functions the library defines, as Bash itself lists them."""
    listed = subprocess.run(
        ["bash", "-c", 'source "$1" && declare -F', "bash", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in listed.splitlines()}
    return {name for name in names if not name.startswith("_httk_")}


def public_members(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def problems(markdown: str, lib: Path = LIB) -> list[str]:
    """Everything the table and the code disagree on; empty when they agree."""
    from httk.workflow import Attempt, Runner

    found: list[str] = []
    rows = table_rows(markdown)
    python_cells = {row[0] for row in rows}
    bash_cells = {row[1].split()[0] for row in rows if row[1] != ABSENT}
    defined = bash_functions(lib)
    for python, bash, semantics, artifact in rows:
        if not semantics or not artifact:
            found.append(f"row {python} | {bash} has an empty cell")
        if python != ABSENT:
            try:
                resolve(python)
            except (LookupError, ImportError):
                found.append(f"Python member {python} does not exist")
        if bash != ABSENT and bash.split()[0] != STEP_HANDLER and bash.split()[0] not in defined:
            found.append(f"Bash function {bash.split()[0]} is not defined in {lib.name}")
        if python == ABSENT and bash == ABSENT:
            found.append(f"row '{semantics}' names neither a Python member nor a Bash function")
    for cls in (Runner, Attempt):
        for member in sorted(public_members(cls)):
            if f"{cls.__name__}.{member}" not in python_cells:
                found.append(f"{cls.__name__}.{member} has no row")
    for function in sorted(defined - bash_cells):
        found.append(f"Bash function {function} has no row")
    return found


def test_the_table_and_the_code_agree():
    assert problems(TABLE.read_text(encoding="utf-8")) == []


def test_the_table_has_the_specified_shape():
    rows = table_rows(TABLE.read_text(encoding="utf-8"))
    # Exactly the spec's rows: a row the spec lacks (the 2.1 synonyms once were) is a feature the spec
    # says does not exist, and a public member it would cover must then fail test_the_table_and_the_code_agree.
    assert len(rows) == SPEC_ROWS
    assert not [row for row in rows if row[2].startswith("Also accepted")]
    assert rows[0][:2] == ["Runner", "httk_workflow_runner"]
    assert rows[-1][:2] == ["runtime_utils.decompress_files", "httk_decompress"]
    # Rows without a Bash function name the environment variable Bash reads instead, where there is one.
    assert ["Attempt.control", ABSENT] == rows[12][:2] and "$HTTK_WORKFLOW_CONTROL_DIR" in rows[12][3]


def _without_row(markdown: str, python: str, bash: str) -> str:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| `{python}` | `{bash}` |"))
    return markdown.replace(line + "\n", "")


def test_the_checker_catches_a_missing_row():
    markdown = TABLE.read_text(encoding="utf-8")
    found = problems(_without_row(markdown, "Attempt.pause", "httk_workflow_pause"))
    assert found == ["Attempt.pause has no row", "Bash function httk_workflow_pause has no row"]


def test_the_checker_catches_members_and_functions_that_do_not_exist():
    markdown = TABLE.read_text(encoding="utf-8").replace(
        "| `Attempt.pause` | `httk_workflow_pause` |", "| `Attempt.snooze` | `httk_workflow_snooze` |"
    )
    found = problems(markdown)
    assert "Python member Attempt.snooze does not exist" in found
    assert "Bash function httk_workflow_snooze is not defined in httk-workflow.sh" in found
    assert "Attempt.pause has no row" in found


def test_the_checker_catches_an_undocumented_bash_function(tmp_path):
    lib = tmp_path / "httk-workflow.sh"
    lib.write_text(
        LIB.read_text(encoding="utf-8") + "\nhttk_workflow_extra() { :; }\n_httk_private_helper() { :; }\n",
        encoding="utf-8",
    )
    assert problems(TABLE.read_text(encoding="utf-8"), lib) == ["Bash function httk_workflow_extra has no row"]


def test_the_checker_catches_a_public_member_without_a_row(monkeypatch):
    from httk.workflow import Attempt

    # What the 2.1 alias Attempt.parameter was: public, and in no row of the table.
    monkeypatch.setattr(Attempt, "parameter", Attempt.input, raising=False)
    assert problems(TABLE.read_text(encoding="utf-8")) == ["Attempt.parameter has no row"]


def test_the_checker_catches_a_bare_name_that_is_not_a_root_export():
    # A type of a submodule named without its submodule is not what the cell says.
    markdown = TABLE.read_text(encoding="utf-8").replace(
        "| `runtime.AttemptContext.durable` |", "| `AttemptContext.durable` |"
    )
    assert problems(markdown) == ["Python member AttemptContext.durable does not exist"]


def test_resolve_reaches_root_exports_submodules_and_attrs_fields():
    import httk.workflow
    from httk.workflow.runtime import AttemptContext, JobState

    assert resolve("JobState.merge") is JobState.merge and httk.workflow.JobState is JobState
    assert resolve("runtime.AttemptContext.durable") is AttemptContext.durable  # a slot of the attrs class
    assert resolve("runtime_utils.render_template").__name__ == "render_template"
    for missing in ("Attempt.nothing", "runtime.Nothing", "Nothing", "AttemptContext", "CommandResult"):
        try:
            resolve(missing)
        except LookupError:
            continue
        raise AssertionError(f"{missing} resolved")
