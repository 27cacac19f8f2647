"""The parity table of docs/sdks/sdk_parity.md is enforced against the code (spec 002).

The checker parses the table and reports a listed Python member that does not
exist, a listed Bash function that shell/httk-workflow.sh does not define, and a
public member of ``Runner`` or ``Attempt``, or a public function of the Bash
library, that has no row. A row marked *Also accepted (2.1 spelling) for P and
B* is a synonym: P and B must have rows of their own, and the synonym must be
the same object as P and call the same bridge command as B (one implementation).
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
#: Submodules a Python cell may spell; a bare name is a root export or a type of the SDK modules.
SUBMODULES = ("protocol", "runtime", "runtime_utils", "supervision", "sdk", "outcome")
SDK_MODULES = ("sdk", "runtime", "protocol", "outcome")
SYNONYM = re.compile(r"^Also accepted \(2\.1 spelling\) for (?P<python>[\w.]+)(?: and (?P<bash>httk_\w+))?:")


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
    """The object a Python cell names; ``LookupError`` when it does not exist."""
    parts = name.split(".")
    if parts[0] in SUBMODULES:
        value: Any = importlib.import_module(f"httk.workflow.{parts[0]}")
        parts = parts[1:]
    else:
        root = importlib.import_module("httk.workflow")
        try:
            value = getattr(root, parts[0])
        except AttributeError:
            for module in SDK_MODULES:
                candidate = importlib.import_module(f"httk.workflow.{module}")
                if hasattr(candidate, parts[0]):
                    value = getattr(candidate, parts[0])
                    break
            else:
                raise LookupError(name) from None
        parts = parts[1:]
    for part in parts:
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


def bridge_command(lib: Path, function: str) -> str:
    """The bridge command a library function calls (``_httk_call COMMAND``), as Bash prints its body."""
    body = subprocess.run(
        ["bash", "-c", 'source "$1" && declare -f "$2"', "bash", str(lib), function],
        capture_output=True, text=True, check=True,
    ).stdout
    match = re.search(r"_httk_call (\w+)", body)
    return match.group(1) if match else ""


def synonym_problems(rows: list[list[str]], lib: Path) -> list[str]:
    """Each synonym row names primaries with rows of their own, and is the very same implementation."""
    from httk.workflow.shell_bridge import COMMANDS

    found: list[str] = []
    primary_rows = [row for row in rows if not SYNONYM.match(row[2])]
    python_cells = {row[0] for row in primary_rows}
    bash_cells = {row[1].split()[0] for row in primary_rows}
    for python, bash, semantics, _artifact in rows:
        match = SYNONYM.match(semantics)
        if match is None:
            continue
        primary, primary_bash = match["python"], match["bash"]
        if primary not in python_cells:
            found.append(f"synonym {python} names {primary}, which has no row of its own")
        elif resolve(python) is not resolve(primary):
            found.append(f"synonym {python} is not the same member as {primary}")
        if primary_bash is None:
            continue
        function = bash.split()[0]
        if primary_bash not in bash_cells:
            found.append(f"synonym {function} names {primary_bash}, which has no row of its own")
            continue
        ours, theirs = bridge_command(lib, function), bridge_command(lib, primary_bash)
        if not ours or COMMANDS.get(ours) is None or COMMANDS.get(ours) is not COMMANDS.get(theirs):
            found.append(f"synonym {function} does not call the bridge command of {primary_bash}")
    return found


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
    return found + synonym_problems(rows, lib)


def test_the_table_and_the_code_agree():
    assert problems(TABLE.read_text(encoding="utf-8")) == []


def test_the_table_has_the_specified_shape():
    rows = table_rows(TABLE.read_text(encoding="utf-8"))
    assert len(rows) == 62
    synonyms = [row[:2] for row in rows if SYNONYM.match(row[2])]
    assert synonyms == [
        ["Attempt.parameters", "httk_workflow_parameter"],
        ["Attempt.parameter", "httk_workflow_parameter"],
        ["protocol.JobSpec", "httk_workflow_job_prepare"],
        ["ChildSpec", "httk_workflow_spawn --step"],
    ]
    assert rows[0][:2] == ["Runner", "httk_workflow_runner"]
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


def test_the_checker_catches_a_synonym_that_is_a_second_implementation(tmp_path):
    markdown = TABLE.read_text(encoding="utf-8")
    # A Python synonym that is another member, and one whose primary has no row.
    wrong = markdown.replace("for `Attempt.input` and", "for `Attempt.setting` and").replace(
        "for `Attempt.inputs` and", "for `Attempt.snooze` and"
    )
    assert problems(wrong) == [
        "synonym Attempt.parameters names Attempt.snooze, which has no row of its own",
        "synonym Attempt.parameter is not the same member as Attempt.setting",
    ]
    # A Bash synonym with a body of its own instead of the primary's bridge command.
    lib = tmp_path / "httk-workflow.sh"
    lib.write_text(
        LIB.read_text(encoding="utf-8").replace(
            "httk_workflow_parameter() { _httk_call parameter", "httk_workflow_parameter() { _httk_call setting"
        ),
        encoding="utf-8",
    )
    assert problems(markdown, lib) == [
        "synonym httk_workflow_parameter does not call the bridge command of httk_workflow_input"
    ] * 2


def test_resolve_reaches_root_exports_submodules_and_attrs_fields():
    from httk.workflow.runtime import AttemptContext, JobState

    assert resolve("JobState.merge") is JobState.merge
    assert resolve("runtime.AttemptContext.durable") is AttemptContext.durable  # a slot of the attrs class
    assert resolve("runtime_utils.render_template").__name__ == "render_template"
    for missing in ("Attempt.nothing", "runtime.Nothing", "Nothing"):
        try:
            resolve(missing)
        except LookupError:
            continue
        raise AssertionError(f"{missing} resolved")
