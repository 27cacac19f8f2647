"""fsck is safe to run live and complete (issue 10): confirmed suspicions, no blind spots.

A walk of the state tree is no snapshot, so a transition between the listing of
two kinds must not become a ``duplicate_marker`` (or a ``missing_marker``); the
in-memory filesystem's ``before_scandir`` hook makes that transition happen at
exactly that point. The blind spots — a misspelt marker name, a marker that is
gone or held by a directory, symlink, FIFO or non-empty file, a payload nothing
names — each have a code, and ``--repair`` restores what the journal can tell.
Finally fsck and two managers run on lagging views (stale names and sizes) and
report no damage the lag made up.
"""

from __future__ import annotations

from typing import Any

import pytest

from httk.workflow import codec
from httk.workflow.domain.frames import Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.engine.attempts import LaunchSettings
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store.markers import Marker
from httk.workflow.store.workspaces import Ports, WorkspaceHandle, WorkspaceService
from httk.workflow.testing import FakeProcessControl, memory_ports

ROOT = "/ws"
SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})


@pytest.fixture
def ports() -> Ports:
    return memory_ports()


@pytest.fixture
def handle(ports: Ports) -> WorkspaceHandle:
    handle = WorkspaceService(ports).init(ROOT, durable=False)
    spec = JobSpec(name="j", workflow="w", runner_path="run.sh")
    ports.fs.write_atomic("/src/p/job.json", spec.to_bytes(), durable=False)
    ports.fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=False)
    ports.clock.advance(10.0)  # older than any lag: every view sees the workspace itself
    return handle


def fresh(handle: WorkspaceHandle, fs: Any = None) -> WorkspaceHandle:
    """fsck runs in its own process (its own journal writer), optionally on another client's view."""
    ports = handle.ports if fs is None else Ports(fs=fs, clock=handle.ports.clock, ids=handle.ports.ids)
    return WorkspaceService(ports).open(handle.root)


def job(handle: WorkspaceHandle, *events: Event, placement: str = "p") -> Marker:
    """A submitted job moved through ``events`` (register first when given)."""
    marker = submit(handle, "/src/p", placement).marker
    frame = handle.store.read_job(marker).frame
    for event in events:
        changes: dict[str, Any] = {"step": "main"} if event is Event.REGISTER else {}
        if event is Event.CLAIM:
            changes = {"owner": Owner(manager_id="m-gone", host="h", lease_seconds=1.0, claimed_at=0.0)}
        marker, frame = handle.store.transition(marker, frame, event, **changes)
    return marker


def move(handle: WorkspaceHandle, marker: Marker, event: Event, **changes: Any) -> Marker:
    return handle.store.transition(marker, handle.store.read_frame(marker), event, **changes)[0]


def codes(report: dict[str, Any]) -> list[str]:
    return [problem["code"] for problem in report["problems"]]


def markers_of(handle: WorkspaceHandle) -> list[Marker]:
    return [marker for kind in StateKind for marker in handle.store.iter_markers(kind)]


# -- a transition between the listing of two kinds ---------------------------------------------
def test_a_job_moving_into_a_kind_not_yet_listed_is_no_duplicate(handle, ports):
    marker = job(handle, Event.REGISTER)
    claim = {"owner": Owner(manager_id="m-x", host="h", lease_seconds=900.0, claimed_at=0.0)}
    # ready is listed first; the claim lands just before claimed is listed, so the walk meets it twice.
    claimed = handle.layout.kind_dir(StateKind.CLAIMED)
    ports.fs.before_scandir(claimed, lambda: move(handle, marker, Event.CLAIM, **claim))
    report = Fsck(fresh(handle)).run()
    assert report["clean"], report["problems"]
    assert [m.kind for m in markers_of(handle)] == [StateKind.CLAIMED]


def test_a_job_moving_back_into_a_listed_kind_is_not_missing(handle, ports):
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    # paused is listed after ready: a continue in between hides the job from the whole walk.
    ports.fs.before_scandir(handle.layout.kind_dir(StateKind.CLAIMED),
                            lambda: move(handle, marker, Event.OPERATOR_CONTINUE))
    report = Fsck(fresh(handle), repair=True).run()
    assert report["clean"], report["problems"]
    assert [m.kind for m in markers_of(handle)] == [StateKind.READY]


def test_a_true_duplicate_is_still_reported(handle, ports):
    marker = job(handle, Event.REGISTER)
    twin = Marker(StateKind.PAUSED, marker.placement, marker.key, marker.priority, marker.generation, marker.ref)
    ports.fs.create_empty(handle.store.marker_path(twin), durable=False)
    report = Fsck(fresh(handle)).run()
    [problem] = [p for p in report["problems"] if p["code"] == "duplicate_marker"]
    assert problem["job"] == marker.job_id
    assert sorted(problem["path"].split(", ")) == sorted(handle.store.marker_path(m) for m in (marker, twin))


def test_a_true_duplicate_survives_a_transition_of_another_job_during_the_walk(handle, ports):
    marker = job(handle, Event.REGISTER)
    mover = job(handle, Event.REGISTER)
    twin = Marker(StateKind.SUCCEEDED, marker.placement, marker.key, marker.priority, marker.generation, marker.ref)
    ports.fs.create_empty(handle.store.marker_path(twin), durable=False)
    claim = {"owner": Owner(manager_id="m-x", host="h", lease_seconds=900.0, claimed_at=0.0)}
    claimed = handle.layout.kind_dir(StateKind.CLAIMED)
    ports.fs.before_scandir(claimed, lambda: move(handle, mover, Event.CLAIM, **claim))
    report = Fsck(fresh(handle)).run()
    duplicates = [problem["job"] for problem in report["problems"] if problem["code"] == "duplicate_marker"]
    assert duplicates == [marker.job_id]  # the mover is not one; the twin's frame also names another kind


# -- misspelt names ------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", ["p+0", "p00", "p-0"])
def test_a_misspelt_priority_is_reported_and_repaired_by_renaming(handle, ports, spelling):
    marker = job(handle, Event.REGISTER)
    path = handle.store.marker_path(marker)
    misspelt = path.replace(".p0.", f".{spelling}.")
    ports.fs.rename(path, misspelt, durable=False)
    report = Fsck(fresh(handle)).run()
    assert codes(report) == ["noncanonical_name"]  # not also missing_marker: the job was met
    assert report["problems"][0]["path"] == misspelt and report["left_for_operator"] == 1
    repaired = Fsck(fresh(handle), repair=True).run()
    [problem] = repaired["problems"]
    assert problem["action"] == "repaired" and problem["message"].endswith(f"; renamed to {marker.name}")
    assert repaired["left_for_operator"] == 0
    assert markers_of(handle) == [marker] and Fsck(fresh(handle)).run()["clean"]


def test_a_misspelt_name_is_not_respelt_into_a_duplicate_or_a_name_that_does_not_resolve(handle, ports):
    marker = job(handle, Event.REGISTER)
    extra = handle.store.marker_path(marker).replace(".p0.", ".p+0.")
    ports.fs.create_empty(extra, durable=False)  # a misspelt copy next to the real marker
    broken = f"{handle.layout.kind_dir(StateKind.PAUSED)}/p/{marker.key}.p0.g00.{marker.ref}"
    ports.fs.create_empty(broken, durable=False)  # spelt canonically: generation 0 with a journal reference
    report = Fsck(fresh(handle), repair=True).run()
    actions = {problem["path"]: problem["action"] for problem in report["problems"]}
    assert actions[extra].startswith("left: the job has a marker already")
    assert actions[broken] == "left: spelt canonically it would not resolve either (reference_mismatch)"
    ports.fs.remove(handle.store.marker_path(marker))
    ports.fs.remove(extra)
    report = Fsck(fresh(handle), repair=True).run()
    assert codes(report) == ["noncanonical_name", "missing_marker"]  # the journal still restores the job
    assert ports.fs.exists(broken) and [m.kind for m in markers_of(handle)] == [StateKind.READY]


def test_a_generation_with_a_leading_zero_is_noncanonical(handle, ports):
    marker = job(handle, Event.REGISTER)
    path = handle.store.marker_path(marker)
    ports.fs.rename(path, path.replace(".g1.", ".g01."), durable=False)
    assert codes(Fsck(fresh(handle)).run()) == ["noncanonical_name"]


# -- a marker that is gone or not a marker --------------------------------------------------------
def test_a_deleted_marker_is_missing_and_restored_from_the_last_frame(handle, ports):
    marker = job(handle, Event.REGISTER, Event.OPERATOR_PAUSE)
    last = handle.store.read_frame(marker)
    ports.fs.remove(handle.store.marker_path(marker))
    before = ports.fs.operation_count
    report = Fsck(fresh(handle)).run()
    assert ports.fs.operation_count == before  # nothing written without --repair
    assert codes(report) == ["missing_marker"] and report["problems"][0]["job"] == str(marker.key)
    assert report["left_for_operator"] == 1
    repaired = Fsck(fresh(handle), repair=True).run()
    [problem] = repaired["problems"]
    assert problem["action"] == "repaired" and "; marker restored as paused/p/" in problem["message"]
    [restored] = markers_of(handle)
    frame = handle.store.read_frame(restored)
    assert restored.kind is StateKind.PAUSED and restored.generation == marker.generation + 1
    assert frame.event == "fsck_repair" and frame.previous_record_ref == marker.ref and frame.step == last.step
    assert Fsck(fresh(handle)).run()["clean"]


def test_a_missing_marker_of_an_owned_job_is_left_while_a_manager_heartbeats(handle, ports):
    marker = job(handle, Event.REGISTER, Event.CLAIM)
    ports.fs.write_atomic(f"{handle.layout.managers}/m-live/heartbeat.json",
                          codec.encode({"time": ports.clock.now(), "lease_seconds": 900.0}), durable=False)
    ports.fs.remove(handle.store.marker_path(marker))
    report = Fsck(fresh(handle), repair=True).run()
    assert codes(report) == ["missing_marker"] and report["problems"][0]["action"].startswith("left")
    assert markers_of(handle) == []


def test_a_deleted_generation_zero_marker_leaves_an_orphaned_payload(handle, ports):
    marker = job(handle)
    ports.fs.remove(handle.store.marker_path(marker))
    report = Fsck(fresh(handle), repair=True).run()
    assert codes(report) == ["orphaned_payload"]
    assert report["problems"][0]["path"] == handle.store.payload_dir(marker)
    assert report["problems"][0]["action"].startswith("left") and report["left_for_operator"] == 1
    assert markers_of(handle) == []


def test_a_payload_whose_job_has_a_marker_is_no_orphan_nor_is_a_quarantined_job(handle, ports):
    job(handle, placement="deep/a/b")
    quarantined = job(handle, Event.REGISTER)
    ports.fs.rename(handle.store.marker_path(quarantined),
                    f"{handle.layout.quarantine}/ready/p/{quarantined.name}", durable=False)
    assert Fsck(fresh(handle)).run()["clean"]


def test_a_directory_on_the_marker_name_is_reported_and_quarantined_only_when_asked(handle, ports):
    marker = job(handle, Event.REGISTER)
    path = handle.store.marker_path(marker)
    ports.fs.remove(path)
    ports.fs.makedirs(path)
    report = Fsck(fresh(handle)).run()
    assert codes(report) == ["marker_not_regular"] and report["problems"][0]["path"] == path
    left = Fsck(fresh(handle), repair=True).run()
    assert left["problems"][0]["action"].startswith("left") and ports.fs.lstat(path).is_dir
    repaired = Fsck(fresh(handle), repair=True, quarantine=True).run()
    assert repaired["left_for_operator"] == 0 and repaired["problems"][0]["action"] == "repaired"
    assert "moved into .httk-workflow/quarantine/" in repaired["problems"][0]["message"]
    assert ports.fs.lstat(f"{handle.layout.quarantine}/ready/p/{marker.name}").is_dir
    assert ports.fs.exists(f"{handle.layout.quarantine}/ready/p/{marker.name}.audit.json")
    [restored] = markers_of(handle)
    assert restored.kind is StateKind.READY and restored.generation == marker.generation + 1
    assert Fsck(fresh(handle)).run()["clean"]


def _symlink(fs, path):
    fs.symlink("/elsewhere", path)


def _fifo(fs, path):
    fs.mkfifo(path)


def _bytes(fs, path):
    fs.write_atomic(path, b"not empty", durable=False)


@pytest.mark.parametrize(("replace", "code"), [(_symlink, "marker_not_regular"), (_fifo, "marker_not_regular"),
                                               (_bytes, "marker_not_empty")])
@pytest.mark.parametrize("events", [(), (Event.REGISTER, Event.OPERATOR_PAUSE)], ids=["g0", "g2"])
def test_a_marker_that_is_no_empty_file_is_reported_and_set_aside_when_asked(handle, ports, replace, code, events):
    marker = job(handle, *events)
    path = handle.store.marker_path(marker)
    ports.fs.remove(path)
    replace(ports.fs, path)
    report = Fsck(fresh(handle)).run()
    assert codes(report) == [code] and report["problems"][0]["path"] == path
    assert Fsck(fresh(handle), repair=True).run()["left_for_operator"] == 1
    repaired = Fsck(fresh(handle), repair=True, quarantine=True).run()
    assert [p["action"] for p in repaired["problems"]] == ["repaired"] and repaired["left_for_operator"] == 0
    assert ports.fs.lstat(f"{handle.layout.quarantine}/{marker.kind.value}/p/{marker.name}") is not None
    [restored] = markers_of(handle)
    assert restored.kind is marker.kind and ports.fs.lstat(handle.store.marker_path(restored)).is_file
    assert Fsck(fresh(handle)).run()["clean"]


# -- lagging views --------------------------------------------------------------------------------
def test_a_stale_old_name_is_no_duplicate(handle, ports):
    marker = job(handle, Event.REGISTER)
    ports.clock.advance(10.0)
    lagging = ports.fs.reader(0.0, stale_seconds=2.0)  # sees the new name at once, the old one for 2 s
    move(handle, marker, Event.OPERATOR_PAUSE)
    assert len([m for kind in StateKind for m in fresh(handle, lagging).store.iter_markers(kind)]) == 2
    report = Fsck(fresh(handle, lagging)).run()
    assert report["clean"], report["problems"]


def test_a_hidden_new_name_is_not_missing(handle, ports):
    marker = job(handle, Event.REGISTER)
    ports.clock.advance(10.0)
    lagging = ports.fs.reader(1.0, stale_seconds=0.0)  # the old name goes at once, the new one shows after 1 s
    move(handle, marker, Event.OPERATOR_PAUSE)
    assert markers_of(fresh(handle, lagging)) == []
    report = Fsck(fresh(handle, lagging), repair=True).run()
    assert report["clean"], report["problems"]
    assert len(markers_of(handle)) == 1  # nothing restored on top of the real marker


def _outcome_publisher(fs):
    def behaviour(launch: Any) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        document = {"format": "httk-workflow-outcome", "format_version": 1, "action": "succeed"}
        fs.write_atomic(f"{control}/outcome.tmp.1/outcome.json", codec.encode(document), durable=False)
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=False)
        return 0

    return behaviour


def test_managers_and_fsck_on_lagging_views_report_no_damage(handle, ports):
    """Two managers, one on a lagging view, and fsck on another after every tick: all clean."""
    jobs = [job(handle) for _ in range(6)]
    ports.clock.advance(10.0)
    clock = ports.clock
    views = {"m-true": ports.fs, "m-lag": ports.fs.reader(0.3, stale_seconds=0.6)}
    managers = []
    for name, fs in views.items():
        view_handle = fresh(handle, fs)
        proc = FakeProcessControl(clock, _outcome_publisher(fs), uid=fs.uid)
        manager = Manager(view_handle, proc, SETTINGS, ManagerConfig(workers=2), manager_id=name, out=lambda line: None)
        manager.publish_manifest()
        managers.append((manager, proc))
    checker = ports.fs.reader(0.2, stale_seconds=0.4)
    for _ in range(40):
        for manager, _ in managers:
            manager.heartbeat(force=True)
            manager.tick()
            clock.advance(0.1)
            report = Fsck(fresh(handle, checker)).run()
            assert report["clean"], report["problems"]
        if all(m.kind is StateKind.SUCCEEDED for m in markers_of(handle)):
            break
    final = markers_of(handle)
    assert sorted(m.job_id for m in final) == sorted(m.job_id for m in jobs)
    assert all(m.kind is StateKind.SUCCEEDED for m in final)
    assert sum(len(proc.processes) for _, proc in managers) == len(jobs)  # each job ran once
    refused = [entry.name for name in views for entry in ports.fs.scandir(f"{handle.layout.managers}/{name}/refused")]
    assert refused == []
    assert Fsck(fresh(handle)).run()["clean"]
