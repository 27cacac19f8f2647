"""``job show`` and ``job why`` on a waiting job name every child's state kind, never a made-up one.

Spec 000 "Inspecting jobs": ``job why`` on a waiting job lists "every child with its label
and state", and ``job show`` reports "the join and per-child state of a waiting job". A
child with a terminal note has the note's kind; one without has the kind of its current
marker (``submitted``, ``ready``, ``running`` ...), found by the one lookup ``context.json``
uses (``store.store.current_kinds``), or ``unresolvable`` when it has no marker at all.
Before, such a child was ``active`` in ``job why`` and ``pending`` in ``job show``.

The commands run through the CLI on the production container configured for memory, so
nothing here touches the disk or the real registry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cli_support import Cli
from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, JoinRecord, Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations import diagnosis, inspection
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store.markers import Marker
from httk.workflow.store.store import NOT_TERMINAL_KINDS
from httk.workflow.store.workspaces import WorkspaceHandle
from httk.workflow.testing import memory_container

WS = "/ws"
KIDS = "p/kids"
OWNER = Owner(manager_id="m-gone", host="elsewhere", lease_seconds=60.0, claimed_at=0.0)
REGISTER = (Event.REGISTER, {"step": "main"})
CLAIM = (Event.CLAIM, {"owner": OWNER, "activation_ordinal": 1, "attempt_ordinal": 1, "total_attempts": 1,
                       "attempt_id": "a1"})
RUN = (REGISTER, CLAIM, (Event.LAUNCH, {}))
SUCCEED = (*RUN, (Event.PUBLISH, {}), (Event.COMMIT_SUCCEED, {"owner": None}))
#: Each child's label -> the transitions it goes through after submission.
CHILDREN: dict[str, tuple[tuple[Event, dict[str, Any]], ...]] = {
    "queued": (), "registered": (REGISTER,), "busy": RUN, "done": SUCCEED, "unnoted": SUCCEED, "orphan": (),
}
#: What ``job show`` and the ``children`` of ``job why --json`` report for each child.
KINDS = {"queued": "submitted", "registered": "ready", "busy": "running", "done": "succeeded",
         "unnoted": "succeeded", "orphan": "unresolvable", "gone": "unresolvable"}


def _advance(handle: WorkspaceHandle, marker: Marker, steps: tuple[tuple[Event, dict[str, Any]], ...]) -> Marker:
    store = handle.store
    for event, changes in steps:
        marker, _frame = store.transition(marker, store.read_job(marker).frame, event, **changes)
    return marker


def _note(handle: WorkspaceHandle, parent: Marker, label: str, child: Marker) -> None:
    """The terminal note the child's manager writes for its parent (engine.commit.note_for_parent)."""
    note = {"kind": child.kind.value, "failure": None, "job_id": child.job_id, "job_key": str(child.key),
            "label": label, "placement": child.placement, "data": None, "workdir": None}
    handle.fs.write_atomic(f"{handle.layout.control}/joins/{parent.job_id}/{child.job_id}.json",
                           codec.encode(note), durable=False)


def _waiting_parent(handle: WorkspaceHandle, children: dict[str, tuple[tuple[Event, dict[str, Any]], ...]],
                    *, notes: tuple[str, ...] = ("done",), gone: bool = True) -> Marker:
    """A parent waiting on ``children`` (submitted at ``p/kids`` and advanced), plus a ``gone`` one."""
    fs = handle.fs
    job = JobSpec(name="j", workflow="w", runner_path="run.sh")
    fs.write_atomic("/src/p/job.json", job.to_bytes(), durable=False)
    fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=False)
    parent = submit(handle, "/src/p", "p").marker
    refs, placed = [], {}
    for label, steps in children.items():
        placed[label] = _advance(handle, submit(handle, "/src/p", KIDS, tag=label).marker, steps)
        refs.append(ChildRef(label, placed[label].job_id, str(placed[label].key), KIDS))
    if gone:  # a child whose payload (and marker) left the workspace
        missing = str(uuid.uuid4())
        refs.append(ChildRef("gone", missing, f"gone--{missing}", KIDS))
    join = JoinRecord(step="gather", when="all_terminal", children=tuple(refs))
    parent = _advance(handle, parent, (*RUN, (Event.PUBLISH, {}), (Event.COMMIT_WAIT, {"join": join})))
    for label in notes:
        _note(handle, parent, label, placed[label])
    if "orphan" in placed:  # its payload is there, its marker is not
        fs.remove(handle.store.marker_path(placed["orphan"]))
    return parent


@pytest.fixture
def memory_cli(tmp_path) -> Cli:
    cli = Cli(tmp_path)
    cli.container = memory_container()
    cli("workspace", "init", WS)
    return cli


@pytest.fixture
def waiting(memory_cli: Cli) -> tuple[WorkspaceHandle, Marker]:
    handle = memory_cli.container.workspaces().open(WS)
    return handle, _waiting_parent(handle, CHILDREN)


def test_job_show_reports_each_childs_state_kind(memory_cli: Cli, waiting):
    _handle, parent = waiting
    report = memory_cli.json("job", "show", WS, parent.job_id)
    assert report["kind"] == "waiting"
    assert {child["label"]: child["kind"] for child in report["children"]} == KINDS
    assert {child["placement"] for child in report["children"]} == {KIDS}
    text = memory_cli("job", "show", WS, parent.job_id).stdout
    rows = {line.split()[0]: line.split()[-1] for line in text.splitlines() if line.startswith("  ")}
    assert {label: rows[label] for label in KINDS} == KINDS
    assert "pending" not in text and "active" not in text


def test_job_why_lists_each_child_with_its_state_kind(memory_cli: Cli, waiting):
    _handle, parent = waiting
    report = memory_cli.json("job", "why", WS, parent.job_id)
    assert {child["label"]: child["kind"] for child in report["children"]} == KINDS
    by_label = {child["label"]: child for child in report["children"]}
    # What the waiting pass decides on: only the noted child is settled; the gone one cannot be resolved.
    assert [label for label, child in by_label.items() if child["noted"]] == ["done"]
    assert [label for label, child in by_label.items() if not child["resolvable"]] == ["gone"]
    text = memory_cli("job", "why", WS, parent.job_id).stdout
    said = {line.split()[1]: line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("  child ")}
    assert {label: said[label] for label in ("queued", "registered", "busy", "done")} == {
        "queued": "submitted", "registered": "ready", "busy": "running", "done": "succeeded"}
    assert said["unnoted"].startswith("succeeded, but its terminal note is missing")
    assert said["orphan"].startswith("unresolvable: it has no marker, but its payload is present")
    assert said["gone"].startswith("cannot be resolved in this workspace")
    assert "active" not in "\n".join(said.values())


def _counting(scandir: Callable[[str], Iterator[Any]], kind_dirs: dict[str, StateKind],
              listed: list[StateKind]) -> Callable[[str], Iterator[Any]]:
    """``scandir`` that also records the kind of each of ``kind_dirs`` it lists."""
    def counted(path: str) -> Iterator[Any]:
        if path in kind_dirs:
            listed.append(kind_dirs[path])
        return scandir(path)
    return counted


@pytest.mark.parametrize("command", ["show", "why"])
def test_the_children_are_found_with_one_listing_per_placement_and_kind(memory_cli: Cli, monkeypatch,
                                                                        command: str):
    """The cost of a big fan-out: each kind directory is listed once, whatever the number of children."""
    handle = memory_cli.container.workspaces().open(WS)
    kind_dirs = {f"{handle.layout.kind_dir(kind)}/{KIDS}": kind for kind in StateKind}
    for count in (3, 40):
        parent = _waiting_parent(handle, {f"c{count}-{index}": (REGISTER,) for index in range(count)}, notes=(),
                                 gone=False)
        marker = inspection.resolve_job(handle, parent.job_id)
        listed: list[StateKind] = []
        with monkeypatch.context() as patch:
            patch.setattr(handle.fs, "scandir", _counting(handle.fs.scandir, kind_dirs, listed))
            report = inspection.show_job(handle, marker) if command == "show" else diagnosis.why(handle, marker)
        assert [child["kind"] for child in report["children"]] == ["ready"] * count
        # Found in ready: the terminal trees (the workspace's history) are not listed at all.
        assert sorted(listed) == sorted(NOT_TERMINAL_KINDS)
