"""What of an attempt's directory survives power loss at the instant its runner starts.

The manager names the attempt's control directory (and a new ``attempts/<job-id>/``)
in one group commit after ``context.json`` instead of one fsync after each mkdir; the
runner publishes ``outcome.ready/`` below that directory, so both names, and the
context the runner reads, must be durable before the gate opens.
"""

from __future__ import annotations

from typing import Any

from httk.workflow.testing import memory_manager, memory_workspace
from httk.workflow.testing.process import Launch


def _run_with_power_loss_at_launch(durable: bool) -> dict[str, Any]:
    ports, handle, [_marker] = memory_workspace(durable=durable)
    seen: dict[str, Any] = {}
    manager: Any = None

    def behaviour(launch: Launch) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        ports.fs.crash()  # the node loses power as the runner starts
        seen["job attempts"] = ports.fs.lstat(control.rsplit("/", 1)[0]) is not None
        seen["control"] = ports.fs.lstat(control) is not None
        seen["context"] = ports.fs.exists(f"{control}/context.json") and ports.fs.read_bytes(
            f"{control}/context.json").startswith(b"{")
        manager.stop_now = True
        return 0

    manager = memory_manager(handle, behaviour)
    manager.run()
    return seen


def test_a_durable_attempt_directory_and_its_context_survive_power_loss_at_launch() -> None:
    assert _run_with_power_loss_at_launch(durable=True) == {"job attempts": True, "control": True, "context": True}


def test_a_no_durable_workspace_syncs_none_of_it() -> None:
    # The same run without durability: the names were never synced, so the crash takes them.
    assert _run_with_power_loss_at_launch(durable=False)["control"] is False


def test_a_manager_that_stops_releases_its_launcher() -> None:
    # The preloaded Python launcher lives as long as the manager that launches through it.
    ports, handle, [_marker] = memory_workspace(durable=False)
    manager: Any = memory_manager(handle, lambda launch: 0)
    assert manager.proc.closed == 0
    manager.run()
    assert manager.proc.closed == 1
