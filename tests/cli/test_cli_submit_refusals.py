"""``job submit`` refusals write nothing: long placements, ``--move`` across filesystems, missing runners.

Each test compares the whole workspace tree (and the payload) before and after the refusal:
no staged copy in ``.httk-workflow/tmp/``, no placement directory, no marker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from disk_support import names_below as tree
from httk.workflow.protocol import JobSpec, prepare_job_payload


def one_error_line(stderr: str) -> str:
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    return stderr


# -- names too long for the filesystem ---------------------------------------------------------
def test_a_placement_component_over_name_max_is_refused_naming_the_placement(cli, workspace, payload):
    placement = f"campaign/{'a' * 300}"
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", placement, code=2)
    error = one_error_line(result.stderr)
    assert "placement 'campaign/aaaa" in error and "255-byte name limit" in error and "300 bytes" in error
    assert ".httk-workflow/tmp" not in error
    assert tree(workspace) == before
    assert os.listdir(Path(workspace) / ".httk-workflow" / "tmp") == []
    assert (payload / "job.json").is_file()


def test_a_placement_over_path_max_is_refused_before_anything_is_written(cli, workspace, payload):
    placement = "/".join(["b" * 200] * 21)  # every component fits; the whole path does not
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", placement, code=2)
    error = one_error_line(result.stderr)
    assert error.startswith("error: placement 'bbbb") and "4095-byte path limit" in error
    assert "choose a shorter placement" in error
    assert tree(workspace) == before


def test_a_placement_near_the_limit_but_inside_it_is_accepted(cli, workspace, payload):
    placement = "/".join(["c" * 255] * 3)
    key = cli("job", "submit", workspace, str(payload), "--placement", placement).stdout.strip()
    assert (Path(workspace) / placement / key / "job.json").is_file()


# -- --move across filesystems -----------------------------------------------------------------
def _other_filesystem_than(path: Path) -> Path | None:
    """A writable directory on another device than ``path`` (tmpfs /dev/shm is the usual one)."""
    here = os.stat(path).st_dev
    for candidate in ("/dev/shm", "/run/shm", "/run/user", tempfile.gettempdir(), "/var/tmp"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK) and os.stat(candidate).st_dev != here:
            return Path(candidate)
    return None


@pytest.fixture
def foreign_payload(tmp_path, make_payload):
    other = _other_filesystem_than(tmp_path)
    if other is None:
        pytest.skip(f"no writable directory on another filesystem than {tmp_path} (tried /dev/shm, /tmp, /var/tmp)")
    scratch = Path(tempfile.mkdtemp(prefix="httk-move-", dir=other))
    try:
        yield make_payload(scratch / "payload")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_move_across_filesystems_is_refused_before_any_directory_is_created(cli, workspace, foreign_payload):
    before, payload_before = tree(workspace), tree(foreign_payload)
    result = cli("job", "submit", workspace, str(foreign_payload), "--placement", "far/away/p", "--move", code=2)
    error = one_error_line(result.stderr)
    assert "different filesystems" in error and "drop --move" in error and str(foreign_payload) in error
    assert tree(workspace) == before
    assert not (Path(workspace) / "far").exists()
    assert tree(foreign_payload) == payload_before  # the source is not consumed


def test_the_same_payload_is_copied_across_filesystems(cli, workspace, foreign_payload):
    key = cli("job", "submit", workspace, str(foreign_payload), "--placement", "far/p").stdout.strip()
    assert (Path(workspace) / "far" / "p" / key / "run.py").is_file()


# -- workspace runners the store lacks ---------------------------------------------------------
def workspace_payload(directory: Path, sha256: str, name: str = "relax.py") -> Path:
    prepare_job_payload(
        directory, JobSpec(name="r", workflow="w", runner_source="workspace", runner_path=name, runner_sha256=sha256)
    )
    return directory


def test_a_pinned_workspace_runner_the_store_lacks_is_refused_with_the_publish_command(cli, workspace, tmp_path):
    payload = workspace_payload(tmp_path / "payload", "ab" * 32)
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", "p", code=2)
    error = one_error_line(result.stderr)
    assert "'relax.py'" in error and "ab" * 32 in error
    # No file of that digest is at hand: a placeholder said to be it, not an invented './relax.py'.
    assert f"'httk workflow runner publish FILE --workspace {workspace} --name relax.py' (FILE: the runner" in error
    assert "./relax.py" not in error
    assert "--allow-missing-runner" in error
    assert tree(workspace) == before


def test_the_publish_command_names_the_payloads_file_of_the_pinned_digest(cli, workspace, tmp_path):
    """A job pinning runner 'run.sh' made from the user's trivial.sh: the command publishes trivial.sh as run.sh."""
    body = b"#!/bin/sh\necho trivial\n"
    payload = workspace_payload(tmp_path / "payload", hashlib.sha256(body).hexdigest(), name="run.sh")
    (payload / "trivial.sh").write_bytes(body)
    (payload / "other.sh").write_bytes(b"#!/bin/sh\n")
    before = tree(workspace)
    error = one_error_line(cli("job", "submit", workspace, str(payload), "--placement", "p", code=2).stderr)
    assert f"'httk workflow runner publish {payload}/trivial.sh --workspace {workspace} --name run.sh'" in error
    assert "./run.sh" not in error
    assert tree(workspace) == before


def test_allow_missing_runner_accepts_with_one_warning_line(cli, workspace, tmp_path):
    payload = workspace_payload(tmp_path / "payload", "ab" * 32)
    result = cli("job", "submit", workspace, str(payload), "--placement", "p", "--allow-missing-runner")
    assert result.stderr.startswith("warning: ") and result.stderr.count("\n") == 1
    assert "httk workflow runner publish FILE" in result.stderr and "runner_unavailable" in result.stderr
    key = result.stdout.strip()
    assert (Path(workspace) / "p" / key / "job.json").is_file()


def test_a_published_runner_is_accepted_silently(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    reference = cli.json("runner", "publish", str(runner), "--workspace", workspace, "--name", "relax.py")
    payload = workspace_payload(tmp_path / "payload", reference["sha256"])
    result = cli("job", "submit", workspace, str(payload), "--placement", "p")
    assert result.stderr == ""


def test_a_runner_name_holding_another_digest_is_refused_naming_both(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('version 2')\n")
    held = cli.json("runner", "publish", str(runner), "--workspace", workspace, "--name", "relax.py")["sha256"]
    pinned = hashlib.sha256(b"print('version 1')\n").hexdigest()
    payload = workspace_payload(tmp_path / "payload", pinned)
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", "p", code=2)
    error = one_error_line(result.stderr)
    assert pinned in error and held in error and "--replace" in error
    assert tree(workspace) == before


def test_a_stored_runner_object_with_other_bytes_is_refused_naming_both_digests(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    pinned = cli.json("runner", "publish", str(runner), "--workspace", workspace, "--name", "relax.py")["sha256"]
    stored = Path(workspace) / ".httk-workflow" / "runners" / "objects" / pinned / "relax.py"
    stored.chmod(0o644)
    stored.write_text("print('tampered')\n")
    actual = hashlib.sha256(b"print('tampered')\n").hexdigest()
    payload = workspace_payload(tmp_path / "payload", pinned)
    before = tree(workspace)
    for extra in ((), ("--allow-missing-runner",)):  # the runner is not missing: the flag does not help
        result = cli("job", "submit", workspace, str(payload), "--placement", "p", *extra, code=2)
        error = one_error_line(result.stderr)
        assert pinned in error and actual in error and f"remove {stored.parent}" in error
    assert tree(workspace) == before
