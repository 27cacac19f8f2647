"""Point-in-time views from the journal (operations/history.py), through the in-memory filesystem and a fake clock."""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import Event
from httk.workflow.operations import history
from httk.workflow.operations.gc import DAY, GarbageCollector
from httk.workflow.operations.submission import submit
from memory_support import write_payload


def new_job(handle, name, placement="p"):
    marker = submit(handle, write_payload(handle.fs, f"/src/{name}"), placement).marker
    return marker, handle.store.read_job(marker).frame


def test_status_at_and_diff_since_follow_the_journal(handle, ports):
    t0 = ports.clock.now()
    a, fa = new_job(handle, "a")
    b, fb = new_job(handle, "b")
    ports.clock.advance(10)
    a, fa = handle.store.transition(a, fa, Event.REGISTER)
    b, fb = handle.store.transition(b, fb, Event.REGISTER)
    ports.clock.advance(10)
    t20 = ports.clock.now()
    b, fb = handle.store.transition(b, fb, Event.OPERATOR_PAUSE)
    ports.clock.advance(10)
    a, fa = handle.store.transition(a, fa, Event.OPERATOR_CANCEL)
    past = history.read_history(handle)

    before = history.status_at(past, t0 - 1)
    assert before["total"] == 0
    submitted = history.status_at(past, t0 + 5)
    assert submitted["counts"]["submitted"] == 2 and submitted["total"] == 2
    then = history.status_at(past, t20 - 1)
    assert then["counts"]["ready"] == 2 and then["counts"]["paused"] == 0
    now = history.status_at(past, ports.clock.now())
    assert (now["counts"]["paused"], now["counts"]["cancelled"], now["counts"]["ready"]) == (1, 1, 0)

    changed = history.diff_since(past, t20 - 1)
    moves = {(row["from"], row["to"]): row for row in changed["transitions"]}
    assert set(moves) == {("ready", "paused"), ("ready", "cancelled")}
    assert moves[("ready", "cancelled")]["examples"] == [str(a.key)]
    assert changed["frames"] == 2 and changed["new_jobs"] == 0 and not changed["history"]["collected"]

    stays = history.time_in_state(past)
    assert stays["kinds"]["submitted"]["median"] == pytest.approx(10)
    assert stays["kinds"]["ready"]["count"] == 2 and stays["kinds"]["ready"]["max"] == pytest.approx(20)


def test_collected_history_sets_a_horizon_and_refuses_instants_before_it(handle, ports):
    # Small segments, so a job's early frames live in segments gc can take once newer ones hold its marker's frame.
    handle.set_policy("journal_segment_bytes", 4096)
    handle.set_policy("retention.journal_days", 1)
    early = ports.clock.now()
    marker, frame = new_job(handle, "a")
    marker, frame = handle.store.transition(marker, frame, Event.REGISTER)
    for _ in range(6):
        ports.clock.advance(60)
        marker, frame = handle.store.transition(marker, frame, Event.OPERATOR_PAUSE)
        marker, frame = handle.store.transition(marker, frame, Event.OPERATOR_CONTINUE)
    assert not history.read_history(handle).describe()["collected"]
    ports.clock.advance(10 * DAY)
    late = ports.clock.now()
    for _ in range(6):
        marker, frame = handle.store.transition(marker, frame, Event.OPERATOR_PAUSE)
        marker, frame = handle.store.transition(marker, frame, Event.OPERATOR_CONTINUE)
    removed = GarbageCollector(handle).run()["removed"]
    assert removed and {item["category"] for item in removed} == {"journal"}

    past = history.read_history(handle)
    described = past.describe()
    assert described["collected"] and described["truncated_jobs"] == 1
    assert early + 60 <= described["complete_since"] <= late
    with pytest.raises(history.HistoryCollected, match="collected by 'workspace gc'"):
        history.status_at(past, early + 1)
    with pytest.raises(history.HistoryCollected, match="--since"):
        history.diff_since(past, early + 1)
    assert history.status_at(past, ports.clock.now())["counts"]["ready"] == 1


def test_throughput_bins_cover_the_campaign(handle, ports):
    marker, frame = new_job(handle, "a")
    start = ports.clock.now()
    marker, frame = handle.store.transition(marker, frame, Event.REGISTER)
    ports.clock.advance(3600)
    handle.store.transition(marker, frame, Event.OPERATOR_PAUSE)
    series = history.throughput(history.read_history(handle).frames, until=ports.clock.now())
    assert series["interval_seconds"] == 300 and series["start"] <= start
    assert sum(row["transitions"] for row in series["bins"]) == 2
    assert series["bins"][0]["by_kind"] == {"ready": 1} and series["bins"][-1]["by_kind"] == {"paused": 1}


def test_a_reservation_temp_a_crash_left_is_not_counted_as_a_job(handle, ports):
    """Only job-id names in ``ids/`` are jobs: ``.<id>.bulk`` and ``.<id>.tmp.<hex>`` are temps of one being made."""
    t0 = ports.clock.now()
    marker, _frame = new_job(handle, "a")
    bucket = handle.layout.id_reservation(marker.job_id).rsplit("/", 1)[0]
    stray = "0" * 8 + "-0000-4000-8000-00000000ffff"
    handle.fs.write_atomic(f"{bucket}/.{stray}.bulk", b"{}", durable=False)
    handle.fs.write_atomic(f"{bucket}/.{stray}.tmp.0123456789abcdef", b"{}", durable=False)
    ports.clock.advance(10)
    past = history.read_history(handle)
    assert sorted(past.submitted_at) == [marker.job_id]
    assert history.status_at(past, ports.clock.now())["total"] == 1
    assert history.diff_since(past, t0 - 1)["new_jobs"] == 1
