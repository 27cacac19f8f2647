"""Ctrl-C during ``transfer``: one line naming the command that finishes it, exit 130, and it does finish."""

from __future__ import annotations

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.transfer import SourceSide
from httk.workflow.workspace import Workspace


def _kinds(root: str) -> dict[str, str]:
    handle = Workspace(root).handle
    return {str(marker.key.tag): kind.value for kind in StateKind for marker in handle.store.iter_markers(kind)}


def test_an_interrupted_transfer_names_its_resume_and_the_resume_finishes_it(cli, workspace, payload, tmp_path,
                                                                           monkeypatch):
    other = str(tmp_path / "other")
    cli("workspace", "init", other)
    cli("job", "submit", workspace, str(payload), "--placement", "camp")

    def interrupted(self: SourceSide, transfer_id: str) -> None:
        raise KeyboardInterrupt  # as Ctrl-C lands in the middle of building the bundle

    with monkeypatch.context() as patch:
        patch.setattr(SourceSide, "bundle", interrupted)
        done = cli("transfer", workspace, other, "--kind", "submitted", code=130)
    assert done.stdout == ""
    assert done.stderr == (f"error: interrupted; jobs it detached stay 'transferring' (no manager claims them) until "
                           f"'httk workflow transfer {workspace} {other} --resume' (or the same command again) "
                           "finishes it\n")
    assert _kinds(workspace) == {"None": "transferring"} and _kinds(other) == {}
    resumed = cli("transfer", workspace, other, "--resume")
    assert resumed.stdout.startswith("transferred 1 job") and "finished an interrupted transfer" in resumed.stdout
    assert _kinds(workspace) == {} and _kinds(other) == {"None": "submitted"}
