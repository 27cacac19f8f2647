"""fsck on a job with more than one marker, and the generation a repair takes (audit of spec 000, fsck).

A repair must never turn a stale copy of a job's marker into a second state of the
job: the job's truth is the newest marker whose frame verifies, with every other
verifying one in its history, and the other names are set aside below
``quarantine/duplicates/``. A repair frame takes a generation above every frame the
journal holds for the job, so generations stay unique.
"""

from __future__ import annotations

from collections import Counter

import pytest
from test_fsck import corrupt

from httk.workflow import codec
from httk.workflow.domain.frames import Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.fsck import SET_ASIDE_LEFT, Fsck
from httk.workflow.operations.submission import submit
from httk.workflow.store.markers import Marker
from httk.workflow.store.store import LostRace
from httk.workflow.store.workspaces import WorkspaceService
from memory_support import write_payload


def fresh(handle):
    """fsck runs in its own process, with its own journal writer."""
    return WorkspaceService(handle.ports).open(handle.root)


def job(handle, *events, payload="/src/payload"):
    marker = submit(handle, write_payload(handle.fs, payload), "p").marker
    frame = handle.store.read_job(marker).frame
    for event in events:
        changes = {"step": "main"} if event is Event.REGISTER else {"reason": "x"}
        marker, frame = handle.store.transition(marker, frame, event, **changes)
    return marker


def markers(handle):
    return [marker for kind in StateKind for marker in handle.store.iter_markers(kind)]


def generations(handle, job_id):
    """How many readable journal frames hold each generation of the job."""
    counted = Counter()
    for writer in handle.fs.scandir(handle.layout.journal):
        for segment in handle.fs.scandir(writer.path):
            for _, document in handle.store.reader.iter_segment(segment.path):
                if isinstance(document, dict) and document.get("job_id") == job_id:
                    counted[document["generation"]] += 1
    return counted


def copy(handle, marker, kind, **changes):
    twin = Marker(kind, marker.placement, marker.key, marker.priority, changes.get("generation", marker.generation),
                  changes.get("ref", marker.ref))
    handle.fs.create_empty(handle.store.marker_path(twin), durable=False)
    return twin


def actions(report):
    return [(problem["code"], problem["action"]) for problem in report["problems"]]


def test_a_copy_of_a_valid_marker_under_another_kind_is_set_aside_not_repaired_above_it(handle):
    """The audit's vF: a succeeded marker copied into failed/ was rewritten at g+1, above the valid one."""
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    twin = copy(handle, marker, StateKind.FAILED)  # its frame names paused: identity_mismatch
    report = Fsck(fresh(handle)).run()
    assert [code for code, _ in actions(report)] == ["identity_mismatch", "duplicate_marker"]
    assert report["left_for_operator"] == 2
    repaired = Fsck(fresh(handle), repair=True).run()
    assert actions(repaired) == [("identity_mismatch", "repaired"), ("duplicate_marker", "repaired")]
    assert repaired["left_for_operator"] == 0
    assert f"kept {marker.relative_path()}" in repaired["problems"][1]["message"]
    assert markers(handle) == [marker]  # the valid marker, untouched; nothing resurrected above it
    aside = f"{handle.layout.quarantine}/duplicates/failed/p/{twin.name}"
    assert handle.fs.exists(aside)
    audit = codec.decode_object(handle.fs.read_bytes(f"{aside}.audit.json"), "audit")
    assert audit["code"] == "duplicate_marker" and audit["marker"] == handle.store.marker_path(twin)
    assert max(generations(handle, marker.job_id).values()) == 1  # no repair frame written
    assert Fsck(fresh(handle)).run()["clean"]


def test_a_stale_older_name_a_rename_left_behind_is_set_aside(handle):
    older = job(handle, Event.REGISTER)
    newer = handle.store.transition(older, handle.store.read_frame(older), Event.OPERATOR_PAUSE, reason="x")[0]
    handle.fs.create_empty(handle.store.marker_path(older), durable=False)  # both verify; g2 descends from g1
    assert [code for code, _ in actions(Fsck(fresh(handle)).run())] == ["duplicate_marker"]
    repaired = Fsck(fresh(handle), repair=True).run()
    assert actions(repaired) == [("duplicate_marker", "repaired")] and repaired["left_for_operator"] == 0
    assert markers(handle) == [newer]
    assert Fsck(fresh(handle)).run()["clean"]


def test_two_markers_that_verify_in_two_histories_are_left_for_an_operator(handle):
    marker = job(handle, Event.REGISTER)
    frame = handle.store.read_frame(marker)
    paused, _ = handle.store.transition(marker, frame, Event.OPERATOR_PAUSE, reason="x")
    # A second generation-2 frame with its own marker: which transition committed is unknown.
    fork = frame.successor(generation=2, kind=StateKind.CANCELLED, event=Event.OPERATOR_CANCEL.value,
                           previous_record_ref=marker.ref, created_at=1.0, priority=marker.priority)
    ref = handle.store.writer.append(codec.frame_to_json(fork))
    cancelled = copy(handle, paused, StateKind.CANCELLED, ref=str(ref))
    repaired = Fsck(fresh(handle), repair=True).run()
    [(code, action)] = actions(repaired)
    assert code == "duplicate_marker" and action.startswith("left: 2 markers verify at generation 2")
    assert repaired["left_for_operator"] == 1
    assert sorted(m.name for m in markers(handle)) == sorted([paused.name, cancelled.name])


def test_a_job_whose_markers_none_verify_is_left_whole(handle):
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    twin = copy(handle, marker, StateKind.FAILED)
    corrupt(handle, marker)  # now neither resolves
    repaired = Fsck(fresh(handle), repair=True).run()
    assert all(action.startswith("left: none of its markers resolves") for _, action in actions(repaired))
    assert repaired["left_for_operator"] == 3  # each marker's damage, and the duplicate
    assert sorted(m.name for m in markers(handle)) == sorted([marker.name, twin.name])
    assert generations(handle, marker.job_id)[3] == 0  # nothing repaired into a third history


@pytest.mark.parametrize("writer", ["another", "the same"])
def test_a_repair_takes_a_generation_above_every_frame_of_the_job(handle, writer):
    """The audit's finding: a damaged g2 repaired as g3 while a g3 frame was in the journal already.

    Written by the same writer, the g3 frame lies behind the damaged one in the same
    segment: the journal walk must go on past a frame whose checksum fails to find it.
    """
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    frame = handle.store.read_frame(marker)
    other = fresh(handle) if writer == "another" else handle
    path = handle.store.marker_path(marker)
    handle.fs.rename(path, f"{path}.away", durable=False)
    try:
        other.store.transition(marker, frame, Event.OPERATOR_CONTINUE)  # a lost race: its g3 frame stays
    except LostRace:
        pass
    handle.fs.rename(f"{path}.away", path, durable=False)
    corrupt(handle, marker)
    assert generations(handle, marker.job_id)[3] == 1
    report = Fsck(fresh(handle), repair=True).run()
    assert actions(report) == [("checksum_mismatch", "repaired")]
    [repaired] = markers(handle)
    assert repaired.kind is StateKind.PAUSED and repaired.generation == 4
    held = generations(handle, marker.job_id)
    assert held[4] == 1 and all(count == 1 for count in held.values()), held
    assert handle.store.read_frame(repaired).event == "fsck_repair"
    assert Fsck(fresh(handle)).run()["clean"]


@pytest.mark.parametrize("held_by", ["symlink", "bytes"])
def test_a_stale_copy_that_is_no_marker_file_is_moved_only_with_quarantine_unrepairable(handle, held_by):
    """As a lone bad marker name: plain --repair leaves a symlink or non-empty file for an operator."""
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    twin = Marker(StateKind.FAILED, marker.placement, marker.key, marker.priority, marker.generation, marker.ref)
    path = handle.store.marker_path(twin)
    handle.fs.makedirs(path.rsplit("/", 1)[0])
    if held_by == "symlink":
        handle.fs.symlink("/elsewhere", path)
    else:
        handle.fs.write_new(path, b"not empty", durable=False)
    code = "marker_not_regular" if held_by == "symlink" else "marker_not_empty"
    repaired = Fsck(fresh(handle), repair=True).run()
    assert actions(repaired) == [(code, SET_ASIDE_LEFT),
                                 ("duplicate_marker", "left: not every stale copy could be moved")]
    assert repaired["left_for_operator"] == 2
    assert handle.fs.lstat(path) is not None and not handle.fs.exists(handle.layout.quarantine)
    asked = Fsck(fresh(handle), repair=True, quarantine=True).run()
    assert actions(asked) == [(code, "repaired"), ("duplicate_marker", "repaired")]
    assert handle.fs.lstat(path) is None
    assert handle.fs.lstat(f"{handle.layout.quarantine}/duplicates/failed/p/{twin.name}") is not None
    assert markers(handle) == [marker]


@pytest.mark.parametrize(("live", "repaired"), [("m-other", True), ("m-gone", False)])
def test_a_stale_owned_copy_waits_only_for_its_own_owner(handle, ports, live, repaired):
    """A stale claimed/ name whose frame's owner is dead is set aside while another manager serves the workspace."""
    owner = Owner(manager_id="m-gone", host="h", lease_seconds=900.0, claimed_at=ports.clock.now())
    older = job(handle, Event.REGISTER)
    older, frame = handle.store.transition(older, handle.store.read_job(older).frame, Event.CLAIM, owner=owner)
    newer = handle.store.transition(older, frame, Event.RELEASE_CLAIM, owner=None)[0]
    handle.fs.create_empty(handle.store.marker_path(older), durable=False)  # a stale claimed/ name left behind
    handle.fs.write_atomic(f"{handle.layout.managers}/{live}/heartbeat.json",
                           codec.encode({"time": ports.clock.now(), "lease_seconds": 900.0}), durable=False)
    report = Fsck(fresh(handle), repair=True).run()
    if repaired:
        assert actions(report) == [("duplicate_marker", "repaired")]
        assert markers(handle) == [newer]
    else:
        assert actions(report) == [("duplicate_marker", "left: a manager is still heartbeating within its lease; "
                                                        "run the repair again once it stops")]
        assert set(markers(handle)) == {older, newer}
