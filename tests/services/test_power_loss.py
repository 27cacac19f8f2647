"""Power loss after durable protocol steps: what a durable workspace promised must survive ``crash()``."""

from __future__ import annotations

from review_support import fake_proc, frame_of, kinds, manager, outcome, publisher, workspace

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.services.workspaces import WorkspaceService


def test_a_published_outcome_survives_power_loss_after_the_publish_transition():
    ports, handle, _ = workspace()
    proc = fake_proc(ports, publisher(ports.fs, lambda launch: {"outcome.json": outcome()}))
    first = manager(handle, proc, "m-a", lease_seconds=10.0)
    first.commit = lambda *args, **kwargs: None  # the process dies right after the PUBLISH transition
    first.run()
    assert kinds(handle) == {"committing": 1}
    ports.fs.crash()
    ports.clock.advance(1000.0)
    fresh = WorkspaceService(ports).open("/ws")
    manager(fresh, fake_proc(ports, lambda launch: 0), "m-b", lease_seconds=10.0).run()
    assert kinds(fresh) == {"succeeded": 1}, frame_of(fresh, StateKind.FAILED).failure


def test_committed_transactional_data_survives_power_loss():
    ports, handle, [marker] = workspace(data_mode="transactional")
    tree = {"outcome.json": outcome(),
            "transaction/manifest.json": {"operations": [
                {"id": "op-0001", "op": "put", "destination": "r", "source": "files/op-0001"}]},
            "transaction/files/op-0001": b"result"}
    manager(handle, fake_proc(ports, publisher(ports.fs, lambda launch: tree))).run()
    assert kinds(handle) == {"succeeded": 1}
    ports.fs.crash()
    fresh = WorkspaceService(ports).open("/ws")
    assert kinds(fresh) == {"succeeded": 1}
    assert ports.fs.read_bytes(f"/ws/.httk-workflow/data/{marker.job_id}/current/r") == b"result"


def test_a_succeeded_job_stays_succeeded_after_power_loss():
    ports, handle, _ = workspace(jobs=3)
    manager(handle, fake_proc(ports, publisher(ports.fs, lambda launch: {"outcome.json": outcome()}))).run()
    ports.fs.crash()
    assert kinds(WorkspaceService(ports).open("/ws")) == {"succeeded": 3}
