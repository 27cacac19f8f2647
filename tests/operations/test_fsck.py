"""fsck through the in-memory filesystem: report, repair, quarantine, and leave live owners alone."""

from __future__ import annotations

from httk.workflow import codec
from httk.workflow.domain.frames import Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.submission import submit
from httk.workflow.store.journal import RecordRef
from httk.workflow.store.workspaces import WorkspaceService
from memory_support import write_payload


def fresh(handle):
    """fsck runs in its own process, with its own journal writer."""
    return WorkspaceService(handle.ports).open(handle.root)


def advanced(handle, transitions):
    marker = submit(handle, write_payload(handle.fs, "/src/payload"), "p").marker
    frame = handle.store.read_job(marker).frame
    for event, changes in transitions:
        marker, frame = handle.store.transition(marker, frame, event, **changes)
    return marker


def corrupt(handle, marker):
    ref = RecordRef.parse(marker.ref)
    path = f"{handle.layout.journal}/{ref.writer}/{ref.segment}.journal"
    data = bytearray(handle.fs.read_bytes(path))
    data[ref.offset + 12] ^= 0xFF
    handle.fs.write_atomic(path, bytes(data), durable=True)


def test_clean_workspace_reports_nothing(handle):
    advanced(handle, [(Event.REGISTER, {"step": "main"})])
    report = Fsck(fresh(handle)).run()
    assert report["clean"] and report["markers_checked"] == 1


def test_damage_is_reported_and_nothing_written_without_repair(handle):
    marker = advanced(handle, [(Event.REGISTER, {"step": "main"}), (Event.OPERATOR_PAUSE, {"reason": "x"})])
    corrupt(handle, marker)
    before = handle.fs.operation_count
    report = Fsck(fresh(handle)).run()
    assert handle.fs.operation_count == before
    assert [p["code"] for p in report["problems"]] == ["checksum_mismatch"]
    assert report["left_for_operator"] == 1


def test_repair_adopts_the_newest_older_frame_and_chains_to_it(handle):
    marker = advanced(handle, [(Event.REGISTER, {"step": "main"}), (Event.OPERATOR_PAUSE, {"reason": "x"})])
    corrupt(handle, marker)
    report = Fsck(fresh(handle), repair=True).run()
    assert report["problems"][0]["action"] == "repaired" and report["left_for_operator"] == 0
    [repaired] = list(handle.store.iter_markers(StateKind.PAUSED))
    frame = handle.store.read_frame(repaired)
    assert repaired.generation == marker.generation + 1
    assert frame.event == "fsck_repair" and frame.kind == StateKind.PAUSED and frame.step == "main"
    recovered = handle.store.reader.read(frame.previous_record_ref)
    assert recovered["generation"] == 1  # older than the damaged marker, never newer
    assert Fsck(fresh(handle)).run()["clean"]


def test_unrepairable_is_quarantined_only_when_asked(handle):
    marker = advanced(handle, [(Event.REGISTER, {"step": "main"})])
    corrupt(handle, marker)
    assert Fsck(fresh(handle), repair=True).run()["problems"][0]["action"].startswith("unrepairable")
    report = Fsck(fresh(handle), repair=True, quarantine=True).run()
    # Spec 000: exit 0 only when everything found was repaired; a quarantined job is out of the workspace,
    # not restored, so it is left for an operator (exit 1), and clean, left and the exit status agree.
    assert report["problems"][0]["action"] == "quarantined" and report["left_for_operator"] == 1
    assert not report["clean"]
    assert list(handle.store.iter_markers(StateKind.READY)) == []
    assert handle.fs.exists(f"{handle.layout.quarantine}/ready/p/{marker.name}.audit.json")
    assert Fsck(fresh(handle)).run()["clean"]  # set aside on purpose: the next check has nothing to report


def test_owned_marker_of_a_live_manager_is_left_alone(handle, ports):
    owner = Owner(manager_id="m-live", host="h", lease_seconds=900.0, claimed_at=ports.clock.now())
    marker = advanced(handle, [(Event.REGISTER, {"step": "main"}), (Event.CLAIM, {"owner": owner})])
    handle.fs.write_atomic(
        f"{handle.layout.managers}/m-live/heartbeat.json",
        codec.encode({"time": ports.clock.now(), "lease_seconds": 900.0}),
        durable=False,
    )
    corrupt(handle, marker)
    report = Fsck(fresh(handle), repair=True).run()
    assert report["problems"][0]["action"].startswith("left")
    assert report["left_for_operator"] == 1


def test_a_reservation_temp_left_by_a_crash_is_reported_and_removed_by_repair(handle, ports):
    marker = submit(handle, write_payload(handle.fs, "/src/payload"), "p").marker
    reservation = handle.layout.id_reservation(marker.job_id)
    bucket = reservation.rsplit("/", 1)[0]
    stray = "0" * 8 + "-0000-4000-8000-00000000ffff"
    temps = sorted([f"{bucket}/.{stray}.bulk", f"{bucket}/.{stray}.tmp.0123456789abcdef"])
    for temp in temps:
        handle.fs.write_atomic(temp, b"{}", durable=True)
    # Young, it may be a creation under way: not touched, not reported.
    assert Fsck(fresh(handle), repair=True).run()["clean"]
    assert all(handle.fs.exists(temp) for temp in temps)
    ports.clock.advance(2 * 3600)
    report = Fsck(fresh(handle)).run()
    assert [(p["code"], p["path"], p["action"]) for p in report["problems"]] == [
        ("stale_reservation_temp", temp, "reported") for temp in temps]
    assert report["left_for_operator"] == 2 and all(handle.fs.exists(temp) for temp in temps)
    repaired = Fsck(fresh(handle), repair=True).run()
    assert [p["action"] for p in repaired["problems"]] == ["repaired", "repaired"]
    assert repaired["left_for_operator"] == 0
    assert not any(handle.fs.exists(temp) for temp in temps)
    assert handle.fs.exists(reservation)  # the job's own reservation stays
    assert Fsck(fresh(handle)).run()["clean"]
