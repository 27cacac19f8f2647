"""``job submit`` refuses a payload runner the payload lacks, before anything is written.

A payload is copied into the workspace as it is and never changes after: a payload runner
that is not there (or one the manager refuses from the payload alone: a link, a FIFO, a
runner tree holding a link or without an entry point) fails every attempt with
``runner_unavailable``, and nothing done after submission can fix it. So it is refused,
in one ``error:`` line, ``--allow-missing-runner`` or not, and the workspace tree (and the
payload) is what it was before; a batch with one such payload is refused whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from disk_support import disk_snapshot
from httk.workflow import Workspace
from httk.workflow.operations.submission import SubmissionError
from httk.workflow.protocol import JobSpec, prepare_job_payload

FIX = "or name a published one with runner source 'workspace'"


def runner_payload(directory: Path, runner_path: str = "run.py", *, tag: str | None = None) -> Path:
    """A prepared payload naming payload runner ``runner_path``, without the runner."""
    prepare_job_payload(directory, JobSpec(name="demo", workflow="demo", runner_path=runner_path, tag=tag))
    return directory


def test_a_missing_payload_runner_is_refused_in_one_line_and_nothing_is_written(cli, workspace, tmp_path):
    payload = runner_payload(tmp_path / "payload")
    before, payload_before = disk_snapshot(workspace), disk_snapshot(payload)
    for extra in ((), ("--allow-missing-runner",), ("--move",)):  # the flag cannot help: the payload never changes
        error = cli.refused("job", "submit", workspace, str(payload), "--placement", "hand/x", *extra)
        assert error == (
            f"error: {payload}/job.json names payload runner 'run.py', which {payload} lacks; put the runner "
            f"there, {FIX} (submission copies the payload as it is, so --allow-missing-runner cannot accept it: "
            "the job would fail with runner_unavailable)"), extra
        assert disk_snapshot(workspace) == before, extra
        assert disk_snapshot(payload) == payload_before, extra
    assert os.listdir(Path(workspace) / ".httk-workflow" / "tmp") == []
    assert cli.json("job", "list", workspace) == []


def test_the_same_payload_with_its_runner_is_submitted(cli, workspace, tmp_path):
    payload = runner_payload(tmp_path / "payload")
    cli.refused("job", "submit", workspace, str(payload), "--placement", "hand/x")
    (payload / "run.py").write_text("print('hello')\n")  # not executable: a .py runs under the manager's Python
    result = cli("job", "submit", workspace, str(payload), "--placement", "hand/x")
    assert result.stderr == ""
    assert (Path(workspace) / "hand/x" / result.stdout.strip() / "run.py").is_file()


def _link_to_a_file_inside(payload: Path) -> None:
    (payload / "real.py").write_text("print('hello')\n")
    (payload / "run.py").symlink_to("real.py")


def _reached_through_a_link(payload: Path) -> None:
    (payload / "real").mkdir()
    (payload / "real" / "run.py").write_text("print('hello')\n")
    (payload / "bin").symlink_to("real")


def _tree_holding_a_link(payload: Path) -> None:
    (payload / "bin").mkdir()
    (payload / "bin" / "run.py").write_text("print('hello')\n")
    (payload / "bin" / "helper.py").symlink_to("run.py")


@pytest.mark.parametrize(
    ("runner_path", "shape", "wording"),
    [
        ("bin/run.py", lambda payload: None, "which {payload} lacks; put the runner there"),
        ("bin/run.py", lambda payload: (payload / "bin").write_text("x\n"),
         "which {payload} lacks ({payload}/bin is not a directory); put the runner there"),
        ("run.py", _link_to_a_file_inside, "which is a symbolic link; copy the runner in place of the link"),
        ("bin/run.py", _reached_through_a_link, "which is reached through the symbolic link {payload}/bin"),
        ("run.py", lambda payload: os.mkfifo(payload / "run.py"),
         "which is not a regular file or directory ({payload}/run.py)"),
        ("bin", _tree_holding_a_link, "whose tree holds the symbolic link {payload}/bin/helper.py"),
        ("bin", lambda payload: (payload / "bin").mkdir(), "a directory with no run, run.py or run.sh; add one"),
        (".", lambda payload: None, "the payload directory itself"),
    ],
    ids=["missing-directory", "file-on-the-way", "link", "link-on-the-way", "fifo", "tree-link", "no-entry-point",
         "the-payload"],
)
def test_a_runner_the_manager_refuses_from_the_payload_alone_is_refused(cli, workspace, tmp_path, runner_path,
                                                                         shape, wording):
    payload = runner_payload(tmp_path / "payload", runner_path)
    shape(payload)
    before = disk_snapshot(workspace)
    error = cli.refused("job", "submit", workspace, str(payload), "--placement", "hand/x")
    assert error.startswith(f"error: {payload}/job.json names payload runner {runner_path!r}"), error
    assert wording.format(payload=payload) in error and FIX in error, error
    assert disk_snapshot(workspace) == before


@pytest.mark.parametrize(
    ("runner_path", "files"),
    [("./run.sh", {"run.sh": 0o644}), ("bin//run.py", {"bin/run.py": 0o600}), ("tool", {"tool/run": 0o755}),
     ("tool", {"tool/run.sh": 0o644, "tool/lib/helper.sh": 0o644}),
     # Fixed with chmod after submission (the manager's own message says so): not refused here.
     ("run.sh", {"run.sh": 0o664})],
    ids=["dot-slash", "double-slash", "tree-run", "tree-run-sh", "group-writable"],
)
def test_a_runner_the_payload_holds_is_submitted(cli, workspace, tmp_path, runner_path, files):
    payload = runner_payload(tmp_path / "payload", runner_path)
    for name, mode in files.items():
        (payload / name).parent.mkdir(parents=True, exist_ok=True)
        (payload / name).write_text("#!/bin/sh\n")
        (payload / name).chmod(mode)
    key = cli("job", "submit", workspace, str(payload), "--placement", "hand/x").stdout.strip()
    assert (Path(workspace) / "hand/x" / key / "job.json").is_file()


@pytest.fixture
def batch(tmp_path, make_payload):
    """Four payloads of runner run.py; the third lacks it (after one that has it: checked per payload)."""
    payloads = [make_payload(tmp_path / "src" / f"p{index}", tag="bulk", name=f"job{index}") for index in range(4)]
    (payloads[2] / "run.py").unlink()
    return payloads


def test_a_batch_with_one_payload_lacking_its_runner_is_refused_whole(cli, workspace, batch, tmp_path):
    before = disk_snapshot(workspace)
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{payload}\n" for payload in batch))
    for how in ([*map(str, batch)], ["--from-file", str(listing)], [*map(str, batch), "--move"]):
        error = cli.refused("job", "submit", workspace, *how, "--placement", "camp/a")
        assert f"{batch[2]}/job.json names payload runner 'run.py', which {batch[2]} lacks" in error, how
        assert "payload 3 of 4; none of the 4 was submitted" in error, how
        assert disk_snapshot(workspace) == before, how
    assert all((payload / "job.json").is_file() for payload in batch)  # --move moved none of them
    (batch[2] / "run.py").write_text("print('hello')\n")
    assert len(cli("job", "submit", workspace, *map(str, batch), "--placement", "camp/a").stdout.split()) == 4


def test_workspace_submit_refuses_it_too(workspace, tmp_path):
    handle = Workspace(workspace)
    payload = runner_payload(tmp_path / "payload")
    before = disk_snapshot(workspace)
    with pytest.raises(SubmissionError, match=r"names payload runner 'run\.py', which .* lacks"):
        handle.submit(payload, "hand/x")
    with pytest.raises(SubmissionError, match=r"payload 1 of 1; none of the 1 was submitted"):
        handle.submit_many([payload], "hand/x")
    assert disk_snapshot(workspace) == before
