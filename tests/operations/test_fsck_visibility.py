"""fsck waits out the visibility deadline once per run, not once per suspicion (audit of spec 000, fsck).

Every read that may only lag (a journal segment or frame not visible yet, a duplicate
name, a missing marker) is observed first and then waited for together: N damaged
markers on an NFS mount with a 120 s deadline cost 120 s, not N x 120 s. The rule
itself is kept: whatever shows up within the deadline is no damage. Time is the
in-memory fake clock, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

from test_fsck_duplicates import fresh, job

from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.store.journal import RecordRef
from httk.workflow.store.markers import Marker


def segment_of(handle, marker):
    ref = RecordRef.parse(marker.ref)
    return f"{handle.layout.journal}/{ref.writer}/{ref.segment}.journal"


def damaged(handle, count):
    """``count`` jobs at generation 2 whose one journal segment is gone, and that segment's bytes."""
    jobs = [job(handle, Event.REGISTER, Event.OPERATOR_PAUSE, payload=f"/src/p{index}") for index in range(count)]
    [segment] = {segment_of(handle, marker) for marker in jobs}
    data = handle.fs.read_bytes(segment)
    handle.fs.remove(segment)
    return jobs, segment, data


def timed(handle, fsck):
    clock = handle.ports.clock
    start = clock.monotonic()
    report = fsck.run()
    return report, clock.monotonic() - start


def test_n_unreadable_frames_and_other_suspicions_cost_one_deadline(handle):
    jobs, _, _ = damaged(handle, 4)
    other = fresh(handle)  # a second writer, whose segment stays
    duplicated = job(other, Event.REGISTER, payload="/src/dup")
    twin = Marker(StateKind.PAUSED, "p", duplicated.key, duplicated.priority, duplicated.generation, duplicated.ref)
    other.fs.create_empty(other.store.marker_path(twin), durable=False)
    vanished = job(other, Event.REGISTER, payload="/src/gone")
    other.fs.remove(other.store.marker_path(vanished))
    deadline = handle.store.config.deadline_seconds
    report, elapsed = timed(handle, Fsck(fresh(handle)))
    codes = sorted(problem["code"] for problem in report["problems"])
    assert codes == sorted(["missing_segment"] * 4 + ["identity_mismatch", "duplicate_marker", "missing_marker"])
    assert deadline <= elapsed < 2 * deadline, (elapsed, deadline)  # one deadline, not seven


def test_frames_that_show_up_within_the_deadline_are_no_damage(handle, monkeypatch):
    jobs, segment, data = damaged(handle, 3)
    fs, clock = handle.fs, handle.ports.clock
    deadline = handle.store.config.deadline_seconds
    shows_at = clock.monotonic() + 0.8 * deadline  # late in the wait: every read still waits for it
    sleep = fs.sleep

    def lagging_sleep(seconds):
        sleep(seconds)
        if clock.monotonic() >= shows_at and not fs.exists(segment):
            fs.write_atomic(segment, data, durable=False)

    monkeypatch.setattr(fs, "sleep", lagging_sleep)
    report, elapsed = timed(handle, Fsck(fresh(handle), repair=True))
    assert report["clean"], report["problems"]
    assert elapsed < deadline
    assert sorted(m.generation for kind in StateKind for m in handle.store.iter_markers(kind)) == [2, 2, 2]
