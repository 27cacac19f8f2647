"""A put replayed after a crash recognizes its own completed rename (issue 10, "Smaller").

A put is ledgered just before its staged copy takes the destination's name, so
a replay never mistakes that copy for an old tree: the trash holds exactly the
trees the transaction really replaced, whatever the crash point.
"""

from __future__ import annotations

from commit_support import add_job, crash_and_recover, markers_of, outcome, publisher, workspace

from httk.workflow.domain.lifecycle import StateKind


def _manifest(*operations):
    return {"format": "httk-workflow-transaction", "format_version": 1, "operations": list(operations)}


TREE = {
    "outcome.json": outcome(),
    "transaction/manifest.json": _manifest(
        {"id": "op-0001", "op": "put", "destination": "fresh/x", "source": "files/op-0001"},
        {"id": "op-0002", "op": "put", "destination": "old", "source": "files/op-0002"},
        {"id": "op-0003", "op": "put", "destination": "y", "source": "files/op-0003"},
    ),
    "transaction/files/op-0001": b"new-x",
    "transaction/files/op-0002": b"new-old",
    "transaction/files/op-0003/inner": b"new-y",
}


def _run(point):
    ports, handle = workspace(data_mode="transactional")
    job = add_job(handle)
    current = f"{handle.layout.data_dir(job.job_id)}/current"
    ports.fs.write_atomic(f"{current}/old", b"old-content", durable=True)
    fresh, crashed = crash_and_recover(ports, handle, publisher(ports.fs, lambda launch: TREE), point)
    return ports, fresh, job.job_id, crashed


def _trash(ports, handle, job_id):
    """Every trashed entry as ``<attempt-dir>/<op-id>`` -> its bytes (``"dir"`` for a tree)."""
    trash = f"{handle.layout.data_dir(job_id)}/trash"
    return {f"{attempt.name}/{entry.name}": "dir" if entry.is_dir else ports.fs.read_bytes(entry.path)
            for attempt in ports.fs.scandir(trash) for entry in ports.fs.scandir(attempt.path)}


def test_a_put_replayed_after_any_crash_trashes_only_what_it_replaced():
    failures, point = [], 0
    while point < 300:
        ports, handle, job_id, crashed = _run(point)
        [marker] = markers_of(handle, job_id)
        current = f"{handle.layout.data_dir(job_id)}/current"
        try:
            assert marker.kind == StateKind.SUCCEEDED, marker.kind
            assert ports.fs.read_bytes(f"{current}/fresh/x") == b"new-x"
            assert ports.fs.read_bytes(f"{current}/old") == b"new-old"
            assert ports.fs.read_bytes(f"{current}/y/inner") == b"new-y"
            trashed = _trash(ports, handle, job_id)
            # Only op-0002 replaced something; a put into a vacant name leaves no "replaced" copy.
            assert list(trashed.values()) == [b"old-content"], trashed
            assert all(name.endswith("/op-0002") for name in trashed), trashed
            leftovers = [entry.name for entry in ports.fs.scandir(current) if entry.name.startswith(".")]
            assert leftovers == [], leftovers
        except AssertionError as error:
            failures.append((point, str(error)[:200]))
        if not crashed:
            break
        point += 1
    assert point > 20
    assert failures == []
