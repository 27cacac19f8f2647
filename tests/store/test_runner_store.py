"""The content-addressed runner store, on the real filesystem and in memory."""

from __future__ import annotations

import os

import pytest

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.protocol import tree_digest
from httk.workflow.store.digests import fs_digest
from httk.workflow.store.runners import RunnerStoreError
from httk.workflow.workspace import Workspace


@pytest.fixture
def workspace(tmp_path):
    return Workspace.init(tmp_path / "ws")


def test_publish_file_is_content_addressed(workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('hi')\n")
    reference = workspace.publish_runner(runner, name="relax.py")
    assert reference == {"path": "relax.py", "sha256": tree_digest(runner), "source": "workspace"}
    assert workspace.publish_runner(runner, name="relax.py") == reference
    runner.write_text("print('changed')\n")
    with pytest.raises(RunnerStoreError, match="--replace"):
        workspace.publish_runner(runner, name="relax.py")
    replaced = workspace.publish_runner(runner, name="relax.py", replace=True)
    assert replaced["sha256"] != reference["sha256"]
    objects = os.path.join(workspace.path, ".httk-workflow/runners/objects")
    # The old digest stays resolvable for the live jobs that pinned it.
    assert sorted(os.listdir(objects)) == sorted([reference["sha256"], replaced["sha256"]])


def test_publish_directory_uses_the_tree_digest(workspace, tmp_path):
    tree = tmp_path / "relax-runner"
    (tree / "lib").mkdir(parents=True)
    (tree / "run").write_text("#!/bin/sh\n")
    (tree / "run").chmod(0o755)
    (tree / "lib" / "helpers.sh").write_text("x=1\n")
    (tree / "link").symlink_to("run")
    reference = workspace.publish_runner(tree, name="relax-runner")
    assert reference["sha256"] == tree_digest(tree) == fs_digest(PosixFilesystem(), str(tree))
    (tree / "run").chmod(0o644)
    assert tree_digest(tree) != reference["sha256"]


@pytest.mark.parametrize("name", ["../x", "/abs", "a/../b"])
def test_bad_names_are_refused(workspace, tmp_path, name):
    runner = tmp_path / "r.sh"
    runner.write_text("x")
    with pytest.raises(RunnerStoreError, match="invalid runner name"):
        workspace.publish_runner(runner, name=name)


def test_missing_source_is_refused(workspace, tmp_path):
    with pytest.raises(RunnerStoreError, match="not a regular file"):
        workspace.publish_runner(tmp_path / "absent.py", name="absent.py")


@pytest.mark.parametrize("path", [".", "./", "/", "./."])
def test_a_payload_runner_naming_the_payload_itself_is_unavailable_not_a_crash(tmp_path, path):
    from httk.workflow.protocol import JobSpec
    from httk.workflow.store.layout import Layout
    from httk.workflow.store.runners import RunnerUnavailable, resolve_runner

    (tmp_path / "payload").mkdir()
    spec = JobSpec(name="j", workflow="w", runner_path=path)
    with pytest.raises(RunnerUnavailable, match="names the payload directory itself; name a file or directory"):
        resolve_runner(PosixFilesystem(), Layout.at(str(tmp_path)), str(tmp_path / "payload"), spec, (),
                       uid=os.getuid())
