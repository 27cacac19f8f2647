"""Transactional data is applied exactly once, even when the manager dies in the middle of the apply."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from httk.workflow import JobSpec, prepare_job_payload
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.workspace import Workspace

RUNNER = textwrap.dedent(
    """
    from httk.workflow import Runner

    run = Runner("tx")

    @run.step
    def main(a):
        (a.workdir / "a.txt").write_text("first\\n")
        (a.workdir / "tree").mkdir(exist_ok=True)
        (a.workdir / "tree" / "b.txt").write_text("second\\n")
        a.put(a.workdir / "a.txt", "results/a.txt")
        a.put(a.workdir / "tree", "results/tree")
        a.remove("scratch", missing_ok=True)
        a.succeed()

    if __name__ == "__main__":
        raise SystemExit(run.main())
    """
)

# A manager whose filesystem port dies (like kill -9) when the second operation's private copy is being made.
DYING_MANAGER = textwrap.dedent(
    """
    import os, sys
    from dependency_injector import providers
    from httk.workflow.adapters.fs_posix import PosixFilesystem
    from httk.workflow.bootstrap import Container, build_manager
    from httk.workflow.engine.manager import ManagerConfig
    from httk.workflow.store.workspaces import WorkspaceService

    class DiesInSecondOperation(PosixFilesystem):
        def copy_tree(self, source, destination, *, durable, staged=False):
            if os.path.basename(destination).startswith("op-0002."):
                os._exit(9)
            return super().copy_tree(source, destination, durable=durable, staged=staged)

    container = Container()
    container.override_providers(fs=providers.Object(DiesInSecondOperation()))
    handle = container.workspaces().open(sys.argv[1])
    build_manager(container, handle, ManagerConfig(workers=1, lease_seconds=1.0)).run()
    """
)


def test_manager_killed_during_apply_second_manager_finishes_exactly_once(tmp_path: Path):
    runner = tmp_path / "tx.py"
    runner.write_text(RUNNER)
    workspace = Workspace.init(tmp_path / "ws")
    reference = workspace.publish_runner(runner, name="tx.py")
    payload = prepare_job_payload(
        tmp_path / "payload",
        JobSpec(name="tx", workflow="tx", runner_source="workspace", runner_path=reference["path"],
                runner_sha256=reference["sha256"], data_mode="transactional"),
    )
    marker = workspace.submit(payload, "tx")
    dying = subprocess.run([sys.executable, "-c", DYING_MANAGER, str(tmp_path / "ws")], capture_output=True)
    assert dying.returncode == 9, dying.stderr.decode()
    store = workspace.handle.store
    assert [m.job_id for m in store.iter_markers(StateKind.COMMITTING)] == [marker.job_id]
    data = tmp_path / "ws" / ".httk-workflow" / "data" / marker.job_id
    assert (data / "current" / "results" / "a.txt").read_text() == "first\n"
    assert not (data / "current" / "results" / "tree").exists()
    time.sleep(1.2)  # the dead manager's lease expires
    assert build_manager(default_container(), workspace.handle, ManagerConfig(workers=1)).run() == 0
    assert [m.job_id for m in store.iter_markers(StateKind.SUCCEEDED)] == [marker.job_id]
    assert (data / "current" / "results" / "tree" / "b.txt").read_text() == "second\n"
    # op-0001 was ledgered before the crash and not applied again (nothing was moved to the trash for it).
    assert not list(data.glob("trash/*/op-0001"))
    control = next((tmp_path / "ws" / ".httk-workflow" / "attempts" / marker.job_id).iterdir())
    assert sorted(path.name for path in (control / "commit" / "ops").iterdir()) == ["op-0001", "op-0002", "op-0003"]
