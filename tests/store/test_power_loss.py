"""Power loss after durable protocol steps: what a durable workspace promised must survive ``crash()``."""

from __future__ import annotations

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner
from memory_support import frame_of, kinds


def test_a_published_outcome_survives_power_loss_after_the_publish_transition():
    ports, handle, _ = memory_workspace()
    first = memory_manager(handle, manager_id="m-a", lease_seconds=10.0)
    first.committer.commit = lambda *args, **kwargs: None  # the process dies right after the PUBLISH transition
    first.run()
    assert kinds(handle) == {"committing": 1}
    ports.fs.crash()
    ports.clock.advance(1000.0)
    fresh = WorkspaceService(ports).open("/ws")
    memory_manager(fresh, lambda launch: 0, manager_id="m-b", lease_seconds=10.0).run()
    assert kinds(fresh) == {"succeeded": 1}, frame_of(fresh, StateKind.FAILED).failure


def test_committed_transactional_data_survives_power_loss():
    ports, handle, [marker] = memory_workspace(data_mode="transactional")
    tree = {"outcome.json": outcome_document(),
            "transaction/manifest.json": {"format": "httk-workflow-transaction", "format_version": 1, "operations": [
                {"id": "op-0001", "op": "put", "destination": "r", "source": "files/op-0001"}]},
            "transaction/files/op-0001": b"result"}
    memory_manager(handle, scripted_runner(ports.fs, lambda launch: tree)).run()
    assert kinds(handle) == {"succeeded": 1}
    ports.fs.crash()
    fresh = WorkspaceService(ports).open("/ws")
    assert kinds(fresh) == {"succeeded": 1}
    assert ports.fs.read_bytes(f"/ws/.httk-workflow/data/{marker.job_id}/current/r") == b"result"


def test_a_succeeded_job_stays_succeeded_after_power_loss():
    ports, handle, _ = memory_workspace(jobs=3)
    memory_manager(handle).run()
    ports.fs.crash()
    assert kinds(WorkspaceService(ports).open("/ws")) == {"succeeded": 3}
