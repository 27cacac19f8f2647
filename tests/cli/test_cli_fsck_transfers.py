"""``workspace fsck`` names an interrupted transfer on its text and JSON outputs, and exits 0 for it."""

from __future__ import annotations

from pathlib import Path

from cli_support import Cli
from httk.workflow.operations.transfer import SourceSide
from httk.workflow.workspace import Workspace


def test_fsck_warns_of_an_interrupted_transfer_with_its_resume_command(cli: Cli, tmp_path: Path, payload: Path):
    a, b = str(tmp_path / "ws-a"), str(tmp_path / "ws-b")
    cli("workspace", "init", a)
    cli("workspace", "init", b)
    cli("job", "submit", a, str(payload), "--placement", "camp/1")
    # A transfer killed right after it detached its job (what HTTK_WORKFLOW_TEST_STOP_AFTER=source:detached does).
    source = SourceSide(Workspace(a).handle, a)
    selection = source.select(kinds=["submitted"])
    source.plan("t-0000000000aa", selection["jobs"], {"label": b, "workspace_id": Workspace(b).handle.workspace_id})
    source.detach("t-0000000000aa")
    resume = f"httk workflow transfer {a} {b} --resume"
    text = cli("workspace", "fsck", a)  # exit 0: a warning, not a problem
    assert (f"warning unfinished_transfer: 1 job held by unfinished transfer t-0000000000aa to {b} (at step "
            f"detached): no manager claims them until it ends; finish it with '{resume}'") in text.stdout, text.stdout
    assert text.stdout.rstrip().endswith("markers checked; clean; 1 unfinished transfer(s) (a warning)")
    report = cli.json("workspace", "fsck", a)
    [held] = report["unfinished_transfers"]
    assert report["clean"] is True and (held["transfer_id"], held["role"], held["resume"]) == \
        ("t-0000000000aa", "source", resume)
