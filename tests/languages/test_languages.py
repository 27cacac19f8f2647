"""The realization rule and the v1 task format: pure functions, no workspace."""

from __future__ import annotations

import pytest

from httk.workflow.languages import (
    LANGUAGES,
    Realization,
    missing_modules,
    realization_of,
)
from httk.workflow.languages.v1_format import (
    TaskName,
    V1FormatError,
    job_priority,
    outcome_of,
    parse_task_name,
    tag_for,
)


@pytest.mark.parametrize(
    ("source", "path", "expected"),
    [
        ("workspace", "languages/jobflow", Realization("language", "jobflow")),
        ("workspace", "compat/httk-v1", Realization("httk-v1")),
        ("workspace", "languages/cwl", Realization("native")),  # not a known language: a runner of yours
        ("payload", "languages/jobflow", Realization("native")),  # only the workspace store holds packaged ones
        ("installed", "compat/httk-v1", Realization("native")),
        ("workspace", "shipped/vasp-relax", Realization("native")),
    ],
)
def test_the_realization_is_read_off_the_pinned_runner(source, path, expected):
    assert realization_of(source, path) == expected


def test_missing_modules_asks_the_import_system_without_importing():
    asked: list[str] = []

    def find(name: str) -> object | None:
        asked.append(name)
        if name == "maggma":
            raise ModuleNotFoundError(name)  # a finder that refuses counts as missing
        return None if name == "jobflow" else object()

    assert missing_modules(LANGUAGES["jobflow"], find) == ["jobflow", "maggma"]
    assert asked == ["jobflow", "monty", "maggma"]


def test_a_v1_task_name_parses_into_its_fields_and_back():
    name = parse_task_name("ht.task.vasp.si-001.relax1.2.tskmgr-x.4.waitstep")
    assert name == TaskName("vasp", "si-001", "relax1", 2, "tskmgr-x", 4, "waitstep")
    assert name.with_status("finished") == "ht.task.vasp.si-001.relax1.2.unclaimed.4.finished"


@pytest.mark.parametrize(
    "bad",
    ["ht.task.any.x.start.0.unclaimed.3", "ht.tmp.task.any.x.start.0.none.3.waitstart", "task",
     "ht.task.any.x.start.zero.unclaimed.3.waitstart", "ht.task..x.start.0.unclaimed.3.waitstart",
     "ht.task.any.x.start.\u00b2.unclaimed.3.waitstart", "ht.task.any.x.start.0.unclaimed.\u00b3.waitstart"],
)
def test_names_that_are_not_v1_tasks_are_refused(bad):
    with pytest.raises(V1FormatError):
        parse_task_name(bad)


def test_v1_priorities_exit_codes_and_tags_map_as_the_v1_taskmanager_read_them():
    assert [job_priority(p) for p in range(1, 6)] == [2, 1, 0, -1, -2]
    assert [outcome_of(code, False) for code in (10, 2, 3, 4, 99, 0, 1, 64)] == [
        "finished", "next", "subtasks", "broken", "timeout", "stopped", "stopped", "stopped"]
    assert outcome_of(10, True) == "timeout"
    assert tag_for("SiO2_Alpha quartz") == "sio2_alpha-quartz" and tag_for("...") == "v1-task"
