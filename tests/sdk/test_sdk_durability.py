"""The runner side publishes like the manager: a durable write syncs every directory it had to create.

Each test watches ``os.fsync`` (by the path each descriptor was opened under) and
checks that the name of every directory a durable publication created is synced
into its parent — the crash-safety rule docs/architecture.md states for the
manager, which the runner side's own copy of the publication code used to skip.
It also covers two workdir-batch cases that copy got wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from httk.workflow.outcome import WorkdirBatch, apply_sealed_batch
from httk.workflow.protocol import JobSpec, RunLog, prepare_job_payload
from httk.workflow.runtime import JobState


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Absolute paths fsynced from now on (descriptors from ``os.open``, the way directories are opened)."""
    opened: dict[int, str] = {}
    paths: set[str] = set()
    real_open, real_fsync = os.open, os.fsync

    def spy_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        opened[fd] = os.path.abspath(os.fspath(path))
        return fd

    def spy_fsync(fd: int) -> None:
        real_fsync(fd)
        paths.add(opened.get(fd, f"fd {fd}"))

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "fsync", spy_fsync)
    return paths


def test_the_first_state_write_syncs_the_private_directory_it_creates(tmp_path: Path, synced: set[str]) -> None:
    payload = tmp_path / "payload"
    payload.mkdir()
    JobState(payload, durable=True).set("phase", 1)
    assert (payload / ".httk-job" / "state.json").is_file()
    assert {str(payload), str(payload / ".httk-job")} <= synced


def test_a_non_durable_state_write_syncs_nothing(tmp_path: Path, synced: set[str]) -> None:
    JobState(tmp_path, durable=False).set("phase", 1)
    assert synced == set()


def test_prepare_job_payload_syncs_the_directories_it_creates(tmp_path: Path, synced: set[str]) -> None:
    target = tmp_path / "a" / "b" / "payload"
    prepare_job_payload(target, JobSpec(name="n", workflow="w", runner_path="run.sh"), durable=True)
    assert (target / "job.json").is_file()
    assert {str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(target)} <= synced


def test_a_new_run_log_is_synced_with_the_directory_holding_it(tmp_path: Path, synced: set[str]) -> None:
    log = RunLog(tmp_path / ".httk-runner" / "runlog.jsonl", durable=True, now=lambda: 0.0)
    log.append("phase", "started")
    assert [event["label"] for event in log.read()] == ["phase"]
    assert {str(tmp_path), str(tmp_path / ".httk-runner")} <= synced


def test_the_first_sealed_batch_is_reachable_after_a_crash(tmp_path: Path, synced: set[str]) -> None:
    runner_dir = tmp_path / ".httk-runner"
    batch = WorkdirBatch(tmp_path, durable=True, new_id=lambda: "b1")
    batch.write("x.txt", "1\n")
    sealed = batch.seal()
    assert sealed == runner_dir / "workdir-ready" / "b1"
    # Every name on the way from the workdir to the sealed batch is synced into its parent.
    assert {str(tmp_path), str(runner_dir), str(runner_dir / "workdir-ready")} <= synced


def test_a_durable_batch_removing_a_path_under_a_missing_directory(tmp_path: Path) -> None:
    batch = WorkdirBatch(tmp_path, durable=True, new_id=lambda: "b1")
    batch.remove("never/made/x")  # absent is fine, whether or not its directory exists
    sealed = batch.seal()
    assert sealed is not None
    apply_sealed_batch(tmp_path, sealed, durable=True)
    assert (tmp_path / ".httk-runner" / "workdir-applied" / "b1").is_dir()
    assert not (tmp_path / "never").exists()


def test_renaming_a_directory_onto_itself_through_a_link_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "real" / "d").mkdir(parents=True)
    (tmp_path / "real" / "d" / "f").write_text("kept\n")
    (tmp_path / "link").symlink_to("real")
    batch = WorkdirBatch(tmp_path, durable=False, new_id=lambda: "b1")
    batch.rename("real/d", "link/d")  # both names reach the same directory entry
    sealed = batch.seal()
    assert sealed is not None
    apply_sealed_batch(tmp_path, sealed, durable=False)
    assert (tmp_path / "real" / "d" / "f").read_text() == "kept\n"
