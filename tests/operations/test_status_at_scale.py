"""``workspace status`` counts from marker names alone and reads at most ``check_limit`` active jobs.

The counting walk (``store.discovery.walk_names``) must agree with ``Store.iter_markers``
on every name, damaged ones included, and in the same order, because status reports
what the walk reports; only the reading of frames and job.json is bounded.
"""

from __future__ import annotations

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations import inspection
from httk.workflow.store.discovery import marker_name_problem, walk_names
from httk.workflow.store.markers import Marker, MarkerNameError
from httk.workflow.testing import memory_workspace

UUID = "0123abcd-0000-4000-8000-00000000beef"
NAMES = [
    f"{UUID}.p0.g0.init",
    f"t--{UUID}.p-5.g1z.w~1~2~3~ab",
    f"a.b-c_d--{UUID}.p9223372036854775807.gzzzzzzzzzzz.init",  # the priority parses, too long for the fast path
    f"a---{UUID}.p0.g0.init",  # the tag is "a-"
    f"a--b--{UUID}.p0.g0.init",  # a tag holding "--"
    f"{UUID}.p+0.g0.init",
    f"{UUID}.p00.g0.init",
    f"{UUID}.p0.g00.init",
    f"{UUID}.p0.g0.",
    f"{UUID}.p0.g0.r e f",  # an odd reference the fast path leaves to the parser (which accepts it)
    f"{UUID.upper()}.p0.g0.init",
    f"{UUID}.p9223372036854775808.g0.init",  # one past the 64-bit range
    f"{UUID}.p0.g1y2p0ij32e8e8.init",  # 2**63: one past the 63-bit generation
    f"{'x' * 49}--{UUID}.p0.g0.init",
    f"{UUID}.p0.g0.init\n",
    "notes.txt",
]


def parses(name: str) -> bool:
    try:
        Marker.parse(StateKind.READY, "p", name)
    except MarkerNameError:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_name_check_agrees_with_the_parser(name):
    problem = marker_name_problem(StateKind.READY, "p", name)
    assert (problem is None) == parses(name)
    if problem is not None:
        with pytest.raises(MarkerNameError, match="unparseable marker name"):
            Marker.parse(StateKind.READY, "p", name)


def test_walk_names_reports_what_iter_markers_reports_in_the_same_order():
    ports, handle, markers = memory_workspace(jobs=3, placement="q/r")
    fs, base = ports.fs, handle.layout.kind_dir(StateKind.SUBMITTED)
    for name in NAMES:
        fs.create_empty(f"{base}/q/{name}", durable=False)
    fs.create_empty(f"{base}/stray", durable=False)

    def walked(walk):
        seen = []
        items = list(walk(lambda code, path, message: seen.append((code, path, message))))
        return items, seen

    expected, expected_damage = walked(lambda note: [
        (marker.placement, marker.name) for marker in handle.store.iter_markers(StateKind.SUBMITTED, on_damage=note)])
    found, found_damage = walked(lambda note: walk_names(fs, handle.layout, StateKind.SUBMITTED, on_damage=note))
    assert found == expected and found_damage == expected_damage
    assert len(found) == 3 + sum(parses(name) for name in NAMES) and len(found_damage) >= 2


def corrupt_job_json(handle, marker) -> None:
    handle.fs.write_atomic(f"{handle.store.payload_dir(marker)}/job.json", b"[]", durable=True)


def test_status_reads_at_most_check_limit_active_jobs_and_counts_them_all():
    _ports, handle, markers = memory_workspace(jobs=5)
    for marker in markers:
        corrupt_job_json(handle, marker)
    report = inspection.status(handle, check_limit=2)
    assert report["counts"]["submitted"] == 5 and report["total"] == 5
    assert [entry["code"] for entry in report["damage"]] == ["invalid_job", "invalid_job"]
    assert report["damage_unchecked"] == 3


def test_status_within_the_limit_reports_every_damaged_job_and_no_unchecked_member():
    _ports, handle, markers = memory_workspace(jobs=3)
    corrupt_job_json(handle, markers[1])
    report = inspection.status(handle)
    assert [entry["job"] for entry in report["damage"]] == [str(markers[1].key)]
    assert "damage_unchecked" not in report


def test_a_transfer_ledger_that_does_not_read_is_reported_not_refused():
    from httk.workflow.store.transfer_ledger import SOURCE, Ledger

    ports, handle, _markers = memory_workspace(durable=False)
    ledger = Ledger(ports.fs, handle.layout, "t-0123456789ab", SOURCE, durable=False, clock=ports.clock)
    ledger.create({"destination": {"label": "ci:runs"}})
    ledger.record("planned", {"jobs": []})
    ports.fs.write_atomic(ledger.slot_file(1), b"{not json", durable=False)
    report = inspection.status(handle)
    [held] = report["unfinished_transfers"]
    assert held["transfer_id"] == "t-0123456789ab" and "steps/1.json" in held["problem"] and "resume" not in held
