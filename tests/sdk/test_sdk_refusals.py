"""The Python runner SDK refuses hostile names, values and damaged attempt files, before anything is published."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from httk.workflow import codec
from httk.workflow.runtime import ChildSpec
from httk.workflow.sdk import Attempt, Runner

STEPS = frozenset({"start", "next"})


def _transactional(make_attempt, workspace_spec):
    fake = make_attempt("start", spec=workspace_spec(data_mode="transactional"))
    return fake, Attempt.initialize(steps=STEPS)


def test_bad_state_value_refused_before_publication_and_a_later_terminal_call_works(make_attempt, workspace_spec):
    fake, attempt = _transactional(make_attempt, workspace_spec)
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        attempt.advance("next", state={"x": float("nan")})
    with pytest.raises(TypeError, match="state keys are strings"):
        attempt.advance("next", state={1: "x"})
    assert attempt.state.read() == {}
    assert not attempt.published and not fake.ready.exists()
    attempt.succeed()
    assert fake.outcome()["action"] == "succeed"
    with pytest.raises(RuntimeError, match="already published"):
        attempt.fail("late", "second terminal call")


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.spawn(ChildSpec(step="start"), label="ok", placement="../.."),
        lambda a: a.spawn(ChildSpec(step="start"), label="ok", placement="/abs"),
        lambda a: a.spawn(ChildSpec(step="start"), label="ok", placement="x/.httk-workflow"),
        lambda a: a.spawn(ChildSpec(step="start"), label="../x"),
        lambda a: a.spawn(ChildSpec(step="start"), label="a/b"),
        lambda a: a.declare("../x", {}),
        lambda a: a.declaration("../x"),
        lambda a: a.put("/etc/hostname", "../x"),
        lambda a: a.put("/etc/hostname", "/abs"),
        lambda a: a.remove("a/../../b"),
    ],
)
def test_traversal_in_labels_placements_names_and_destinations_is_refused(make_attempt, workspace_spec, call):
    fake, attempt = _transactional(make_attempt, workspace_spec)
    with pytest.raises(ValueError):
        call(attempt)
    assert not fake.ready.exists()
    assert not (fake.workspace / "x").exists()


@pytest.mark.parametrize("path", ["../x", "/abs/x", "a/../../x", ".httk-runner/x", ""])
def test_workdir_batch_refuses_paths_leaving_the_workdir(make_attempt, workspace_spec, path):
    fake, attempt = _transactional(make_attempt, workspace_spec)
    with pytest.raises(ValueError), attempt.workdir_batch() as batch:
        batch.write(path, "x")
    assert not list((fake.workdir / ".httk-runner").glob("workdir-*/*"))


def test_workdir_batch_does_not_write_through_a_symlinked_directory(make_attempt, workspace_spec, tmp_path):
    fake, attempt = _transactional(make_attempt, workspace_spec)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, fake.workdir / "link")
    try:
        with attempt.workdir_batch() as batch:
            batch.write("link/escaped", "x")
    except (ValueError, OSError):
        pass
    assert not (outside / "escaped").exists()


@pytest.mark.parametrize(
    ("change", "member"),
    [
        ({"children": [{"label": 5}]}, "children[0].label"),
        ({"settings": []}, "settings"),
        ({"durable": "yes"}, "durable"),
        ({"step": "../x"}, "step"),
    ],
)
def test_corrupt_context_json_is_a_document_error_naming_the_member(make_attempt, change, member):
    fake = make_attempt("start")
    path = fake.control / "context.json"
    path.write_bytes(codec.encode({**json.loads(path.read_bytes()), **change}))
    with pytest.raises(codec.DocumentError, match="context.json @ " + re.escape("$." + member)):
        Attempt.initialize(steps=STEPS)


def test_unparseable_context_json_is_a_document_error(make_attempt):
    fake = make_attempt("start")
    (fake.control / "context.json").write_bytes(b"{")
    with pytest.raises(codec.DocumentError, match="context.json"):
        Attempt.initialize(steps=STEPS)


def _seal_batch(workdir: Path, operations: list) -> Path:
    ready = workdir / ".httk-runner" / "workdir-ready" / "b1"
    ready.mkdir(parents=True)
    document = {"format": "httk-workflow-workdir-batch", "format_version": 1, "id": "b1", "operations": operations}
    (ready / "ops.json").write_bytes(codec.encode(document))
    return ready


@pytest.mark.parametrize("operation", [{"op": "remove"}, "x"])
def test_damaged_sealed_batch_is_a_document_error(make_attempt, operation):
    fake = make_attempt("start")
    _seal_batch(fake.workdir, [operation])
    with pytest.raises(codec.DocumentError, match="ops.json"):
        Attempt.initialize(steps=STEPS)


def test_sealed_batch_with_traversing_staged_name_is_refused(make_attempt):
    fake = make_attempt("start")
    _seal_batch(fake.workdir, [{"op": "write", "path": "a", "staged": "../../../../x"}])
    with pytest.raises(ValueError, match="without '..'"):
        Attempt.initialize(steps=STEPS)
    assert not (fake.workdir / "a").exists()


def test_nested_non_string_state_key_is_refused(make_attempt):
    make_attempt("start")
    attempt = Attempt.initialize(steps=STEPS)
    with pytest.raises(TypeError):
        attempt.state.merge({"k": {1: "a"}})


def test_runner_main_says_an_unreadable_context_in_one_line_and_publishes_nothing(make_attempt, capsys):
    fake = make_attempt("start")
    (fake.control / "context.json").write_bytes(b"{")
    before = sorted(path.name for path in fake.control.iterdir())
    run = Runner("demo")
    run.step("start")(lambda a: a.succeed())
    assert run.main([]) == 2  # spec 002: a corrupt attempt context is a refusal, status 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: this attempt cannot start: ") and "context.json" in err
    assert sorted(path.name for path in fake.control.iterdir()) == before  # no outcome, no draft
