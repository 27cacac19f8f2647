"""The one-byte launch gate, end to end: a manager that dies before releasing runs nothing."""

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

# A manager whose process-control port dies (like kill -9) right after the gated launch,
# before the running marker is committed and the gate released.
DYING_MANAGER = textwrap.dedent(
    """
    import os, sys
    from httk.workflow.adapters.process import LocalProcessControl
    from httk.workflow.bootstrap import Container, build_manager
    from httk.workflow.engine.manager import ManagerConfig
    from httk.workflow.workspace import Workspace
    from dependency_injector import providers

    class DiesAfterLaunch(LocalProcessControl):
        def launch(self, *args, **kwargs):
            launched = super().launch(*args, **kwargs)
            os._exit(9)

    container = Container()
    container.process.override(providers.Object(DiesAfterLaunch()))
    workspace = Workspace(sys.argv[1])
    build_manager(container, workspace.handle, ManagerConfig(workers=1, lease_seconds=1.0)).run()
    """
)


def prepare(tmp_path: Path) -> tuple[Workspace, Path]:
    counter = tmp_path / "ran.txt"
    runner = tmp_path / "count.sh"
    runner.write_text(
        "#!/bin/bash\n"
        f"echo ran >> {counter}\n"
        'd="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.1"; mkdir -p "$d"\n'
        'printf \'{"action":"succeed","format":"httk-workflow-outcome","format_version":1}\\n\' > "$d/outcome.json"\n'
        'mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"\n'
    )
    workspace = Workspace.init(tmp_path / "ws")
    reference = workspace.publish_runner(runner, name="count.sh")
    payload = prepare_job_payload(
        tmp_path / "payload",
        JobSpec(name="gate", workflow="w", runner_source="workspace", runner_path=reference["path"],
                runner_sha256=reference["sha256"]),
    )
    workspace.submit(payload, "gate")
    return workspace, counter


def test_manager_killed_before_release_runs_nothing_and_is_recovered_once(tmp_path):
    workspace, counter = prepare(tmp_path)
    dying = subprocess.run([sys.executable, "-c", DYING_MANAGER, str(tmp_path / "ws")], capture_output=True)
    assert dying.returncode == 9, dying.stderr.decode()
    time.sleep(0.5)
    assert not counter.exists(), "the gated runner executed although its manager died before releasing it"
    claimed = list(workspace.handle.store.iter_markers(StateKind.CLAIMED))
    assert len(claimed) == 1
    # The dead manager's lease expires; a second manager releases the claim and runs the job exactly once.
    time.sleep(1.2)
    status = build_manager(default_container(), workspace.handle, ManagerConfig(workers=1)).run()
    assert status == 0
    assert counter.read_text() == "ran\n"
    assert len(list(workspace.handle.store.iter_markers(StateKind.SUCCEEDED))) == 1
