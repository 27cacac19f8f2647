"""Submission refuses a payload runner exactly when the manager's rule refuses it from the payload alone.

The manager resolves a payload runner at attempt start (:func:`.runners.resolve_runner`,
then the entry point of a runner directory); submission must refuse what that fails with
``runner_unavailable`` on the payload's own shape, and nothing it accepts. The account
checks (owner, group- or world-writable) are the exception on purpose: the owner depends
on the manager's account, and a mode is fixed with ``chmod`` after submission.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.operations.submission import SubmissionError, check_payload_runner, plan_spec
from httk.workflow.protocol import JobSpec
from httk.workflow.store.runners import RunnerUnavailable, resolve_runner


def _file(path: Path, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)


LAYOUTS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "file": ("run.sh", lambda p: _file(p / "run.sh")),
    "nested-file": ("a/b/run.py", lambda p: _file(p / "a/b/run.py")),
    "dot-segments": ("./a//run.py", lambda p: _file(p / "a/run.py")),
    "job-json-itself": ("job.json", lambda p: None),
    "missing": ("run.sh", lambda p: None),
    "missing-directory": ("a/run.sh", lambda p: None),
    "file-on-the-way": ("a/run.sh", lambda p: _file(p / "a")),
    "link": ("run.sh", lambda p: (_file(p / "real.sh"), (p / "run.sh").symlink_to("real.sh"))),
    "dangling-link": ("run.sh", lambda p: (p / "run.sh").symlink_to("nowhere")),
    "link-on-the-way": ("a/run.sh", lambda p: (_file(p / "real/run.sh"), (p / "a").symlink_to("real"))),
    "fifo": ("run.sh", lambda p: os.mkfifo(p / "run.sh")),
    "tree": ("tool", lambda p: (_file(p / "tool/run.sh"), _file(p / "tool/lib/x.py"))),
    "tree-run": ("tool", lambda p: _file(p / "tool/run", 0o755)),
    "tree-link": ("tool", lambda p: (_file(p / "tool/run.sh"), (p / "tool/x.sh").symlink_to("run.sh"))),
    "tree-deep-link": ("tool", lambda p: (_file(p / "tool/run.sh"), _file(p / "tool/lib/x.py"),
                                          (p / "tool/lib/y.py").symlink_to("x.py"))),
    "tree-without-entry-point": ("tool", lambda p: _file(p / "tool/main.sh")),
    "empty-tree": ("tool", lambda p: (p / "tool").mkdir()),
}


def _manager_refuses(fs: PosixFilesystem, payload: str, spec: JobSpec) -> bool:
    """The manager's verdict at attempt start: ``resolve_runner``, then a directory's entry point."""
    try:
        found = resolve_runner(fs, None, payload, spec, (), uid=os.getuid())  # type: ignore[arg-type]
    except RunnerUnavailable:
        return True
    info = fs.lstat(found)
    return info.is_dir and not any(fs.exists(f"{found}/{name}") for name in ("run", "run.py", "run.sh"))


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_submission_refuses_exactly_what_the_manager_refuses(tmp_path, case):
    runner_path, shape = LAYOUTS[case]
    payload = tmp_path / "payload"
    payload.mkdir(mode=0o755)
    payload.chmod(0o755)
    (payload / "job.json").write_text("{}")
    (payload / "job.json").chmod(0o644)
    shape(payload)
    fs, spec = PosixFilesystem(), JobSpec(name="j", workflow="w", runner_path=runner_path)
    refused = _manager_refuses(fs, str(payload), spec)
    if refused:
        with pytest.raises(SubmissionError, match=rf"^{payload}/job\.json names payload runner"):
            check_payload_runner(fs, str(payload), spec)
    else:
        check_payload_runner(fs, str(payload), spec)
    expected = {"missing", "missing-directory", "file-on-the-way", "link", "dangling-link", "link-on-the-way",
                "fifo", "tree-link", "tree-deep-link", "tree-without-entry-point", "empty-tree"}
    assert refused == (case in expected), case  # the layouts mean what their names say


def test_a_mode_the_manager_refuses_is_left_to_chmod_after_submission(tmp_path):
    payload = tmp_path / "payload"
    _file(payload / "run.sh", 0o664)
    fs, spec = PosixFilesystem(), JobSpec(name="j", workflow="w", runner_path="run.sh")
    with pytest.raises(RunnerUnavailable, match="chmod go-w"):
        resolve_runner(fs, None, str(payload), spec, (), uid=os.getuid())  # type: ignore[arg-type]
    check_payload_runner(fs, str(payload), spec)


def test_a_workspace_or_installed_runner_is_not_looked_for_in_the_payload(tmp_path):
    fs = PosixFilesystem()
    for source in ("workspace", "installed"):
        check_payload_runner(fs, str(tmp_path), JobSpec(name="j", workflow="w", runner_path="run.sh",
                                                        runner_source=source, runner_sha256="ab" * 32))


@pytest.mark.parametrize(("runner_path", "accepted"),
                         [("run.sh", False), ("bin/run.sh", False), (".", False), ("job.json", True),
                          ("./job.json", True)])
def test_a_spec_alone_has_only_job_json_for_a_payload_runner(handle, runner_path, accepted):
    spec = JobSpec(name="j", workflow="w", runner_path=runner_path)
    if accepted:  # the one file its payload holds: the manager resolves it
        assert plan_spec(handle, spec, "p", label="job spec 1 (name 'j')").data == spec.to_bytes()
        return
    with pytest.raises(SubmissionError) as refusal:
        plan_spec(handle, spec, "p", label="job spec 1 (name 'j')")
    assert str(refusal.value).startswith(
        f"job spec 1 (name 'j') names payload runner {runner_path!r}, but a job submitted from its definition "
        "has a payload of job.json alone; prepare a payload directory holding the runner (prepare_job_payload) "
        "and submit it, or name a published one with runner source 'workspace'")
