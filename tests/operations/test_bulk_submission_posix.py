"""Bulk submission on the real filesystem: the group-commit primitives, ``prepare_job_payloads`` and the facade."""

from __future__ import annotations

import os

import pytest

from disk_support import disk_snapshot as tree
from httk.workflow import JobSpec, Workspace, prepare_job_payload, prepare_job_payloads
from httk.workflow.adapters import fs_posix
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.operations.submission import SubmissionError
from httk.workflow.testing import InMemoryFilesystem


@pytest.mark.parametrize("kind", ["posix", "memory"])
def test_sync_trees_and_fsync_dirs_sync_many_and_report_a_missing_name(kind, tmp_path):
    fs = PosixFilesystem() if kind == "posix" else InMemoryFilesystem()
    root = str(tmp_path) if kind == "posix" else "/fake"
    paths = [f"{root}/t{index}/f" for index in range(40)]
    for path in paths:
        fs.write_atomic(path, b"x", durable=False)
    fs.sync_trees([f"{root}/t{index}" for index in range(40)] + paths[:3])
    fs.fsync_dirs([f"{root}/t{index}" for index in range(40)] + [root, os.path.dirname(root)])
    fs.sync_trees([])
    fs.fsync_dirs([])
    with pytest.raises(FileNotFoundError):
        fs.sync_trees([*paths, f"{root}/missing"])
    with pytest.raises(FileNotFoundError):
        fs.fsync_dirs([f"{root}/t0", f"{root}/missing"])
    if kind == "memory":
        fs.crash()  # what was synced survives
        assert all(fs.read_bytes(path) == b"x" for path in paths)


def specs(count: int, runner: dict[str, str] | None = None) -> list[JobSpec]:
    """``count`` jobs of the payload runner ``run.sh``, or of the published ``runner`` (:func:`published`)."""
    pinned = {} if runner is None else {"runner_path": runner["path"], "runner_source": runner["source"],
                                        "runner_sha256": runner["sha256"]}
    return [JobSpec(**{"name": f"job{index}", "workflow": "w", "runner_path": "run.sh", "tag": "bulk", **pinned})
            for index in range(count)]


def published(workspace: Workspace, tmp_path) -> dict[str, str]:
    """A runner published to ``workspace``: a job of its definition alone (``submit_specs``) has no payload runner."""
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    return {key: str(value) for key, value in workspace.publish_runner(tmp_path / "run.sh", "run.sh").items()}


@pytest.mark.parametrize("durable", [True, False])
def test_prepare_job_payloads_writes_what_prepare_job_payload_writes(tmp_path, durable):
    single = [prepare_job_payload(tmp_path / "one" / f"p{index}", spec, durable=durable)
              for index, spec in enumerate(specs(5))]
    many = prepare_job_payloads([(tmp_path / "many" / f"p{index}", spec) for index, spec in enumerate(specs(5))],
                                durable=durable)
    assert many == [tmp_path / "many" / f"p{index}" for index in range(5)]
    assert tree(tmp_path / "many") == tree(tmp_path / "one") and len(single) == 5
    # Identical bytes again are a no-op, as for one payload.
    assert prepare_job_payloads([(path, spec) for path, spec in zip(many, specs(5), strict=True)]) == many


def test_prepare_job_payloads_refuses_a_different_job_json_before_writing_any(tmp_path):
    prepare_job_payload(tmp_path / "p3", specs(4)[0])
    before = tree(tmp_path)
    with pytest.raises(FileExistsError, match=r"p3/job.json: a different job.json already exists"):
        prepare_job_payloads([(tmp_path / f"p{index}", spec) for index, spec in enumerate(specs(4))])
    with pytest.raises(FileExistsError, match=r"p0/job.json: a different job.json"):
        prepare_job_payloads([(tmp_path / "p0", specs(2)[0]), (tmp_path / "p0", specs(2)[1])])
    assert tree(tmp_path) == before


def test_workspace_submit_many_submits_in_order_and_refuses_writing_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    workspace = Workspace.init(tmp_path / "ws")
    payloads = prepare_job_payloads([(f"src/p{index}", spec) for index, spec in enumerate(specs(6))])
    for payload in payloads:
        (payload / "run.sh").write_text("#!/bin/sh\n")
    told: dict[str, int] = {}
    markers = workspace.submit_many([f"src/p{index}" for index in range(6)], "camp/a",
                                    progress=lambda phase, jobs: told.update({phase: told.get(phase, 0) + jobs}))
    assert told == {"checking": 6, "reserving": 6, "copying": 6, "publishing": 6}
    for index, marker in enumerate(markers):
        job = tmp_path / "ws" / "camp/a" / str(marker.key)
        assert (job / "job.json").read_bytes() == (payloads[index] / "job.json").read_bytes()
        assert (tmp_path / "ws/.httk-workflow/state/submitted/camp/a" / marker.name).is_file()
    assert os.listdir(tmp_path / "ws/.httk-workflow/tmp") == []
    before = tree(tmp_path / "ws")
    (payloads[4] / "job.json").unlink()
    with pytest.raises(SubmissionError, match=r"src/p4/job.json: missing.*payload 5 of 6"):
        workspace.submit_many(payloads, "camp/b")
    assert tree(tmp_path / "ws") == before


@pytest.mark.parametrize("durable", [True, False])
def test_workspace_submit_specs_writes_the_prepared_job_json_and_refuses_writing_nothing(tmp_path, durable):
    workspace = Workspace.init(tmp_path / "ws", durable=durable)
    runner = published(workspace, tmp_path)
    markers = workspace.submit_specs(specs(6, runner), ["camp/a", "camp/b"] * 3)
    prepared = prepare_job_payloads([(tmp_path / f"src/p{index}", spec)
                                     for index, spec in enumerate(specs(6, runner))])
    for index, marker in enumerate(markers):
        job = tmp_path / "ws" / marker.placement / str(marker.key)
        assert os.listdir(job) == ["job.json"]
        assert (job / "job.json").read_bytes() == (prepared[index] / "job.json").read_bytes()
        assert (tmp_path / f"ws/.httk-workflow/state/submitted/{marker.placement}" / marker.name).is_file()
    assert os.listdir(tmp_path / "ws/.httk-workflow/tmp") == []
    before = tree(tmp_path / "ws")
    bad = [*specs(2, runner), JobSpec(name="x", workflow="w", runner_path="/abs/run.sh")]
    with pytest.raises(SubmissionError, match=r"^job spec 3 \(name 'x'\): job\.json @ \$\.runner\.path.*spec 3 of 3"):
        workspace.submit_specs(bad, "camp/c")
    assert tree(tmp_path / "ws") == before
    # A payload runner: the payload of a definition alone is its job.json, so the runner is never there.
    with pytest.raises(SubmissionError, match=r"^job spec 2 \(name 'job0'\) names payload runner 'run\.sh', but a "
                       r"job submitted from its definition has a payload of job\.json alone; .*spec 2 of 2"):
        workspace.submit_specs([*specs(1, runner), *specs(1)], "camp/c")
    assert tree(tmp_path / "ws") == before


def modes_times_bytes(root) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every name below ``root``: permission bits, mtime and bytes (a link: its target)."""
    out: dict[str, tuple[int, int, bytes | str | None]] = {}
    for current, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(current, name)
            info = os.lstat(path)
            content = (os.readlink(path) if os.path.islink(path) else
                       None if os.path.isdir(path) else open(path, "rb").read())
            out[os.path.relpath(path, root)] = (info.st_mode, info.st_mtime_ns, content)
    return out


@pytest.mark.parametrize("durable", [True, False])
def test_a_batch_copies_a_payload_as_one_submission_does_modes_and_times_included(tmp_path, durable):
    workspace = Workspace.init(tmp_path / "ws", durable=durable)
    [payload] = prepare_job_payloads([(tmp_path / "src" / "p", specs(1)[0])])
    (payload / "run.sh").write_text("#!/bin/sh\n")
    (payload / "run.sh").chmod(0o755)
    (payload / "tools").mkdir()
    (payload / "tools" / "data").write_bytes(b"d" * 5000)
    (payload / "tools" / "data").chmod(0o640)
    (payload / "tools").chmod(0o750)
    (payload / "link").symlink_to("run.sh")
    for index, path in enumerate([payload / "tools" / "data", payload / "tools", payload / "run.sh"]):
        os.utime(path, ns=(1_000_000_000, 1_500_000_000_000_000_000 + index))
    one = workspace.submit(payload, "camp/one")
    [many] = workspace.submit_many([payload], "camp/many")
    source = modes_times_bytes(payload)
    assert modes_times_bytes(tmp_path / "ws" / "camp/one" / str(one.key)) == source
    assert modes_times_bytes(tmp_path / "ws" / "camp/many" / str(many.key)) == source


def _creations_and_renames(monkeypatch, run) -> tuple[int, int]:
    """(names created: files and directories, renames) while ``run()`` runs, on the real filesystem."""
    counts = {"created": 0, "renamed": 0}
    real_open, real_mkdir, real_renameat2 = os.open, os.mkdir, fs_posix.renameat2()
    assert real_renameat2 is not None  # the libc of every platform the project runs on has it

    def opened(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        counts["created"] += bool(flags & os.O_CREAT)
        return fd

    def made(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)  # an existing directory's EEXIST creates nothing
        counts["created"] += 1

    def renamed(*args):
        counts["renamed"] += 1
        return real_renameat2(*args)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", opened)
        patch.setattr(os, "mkdir", made)
        patch.setattr(fs_posix, "renameat2", lambda: renamed)
        run()
    return counts["created"], counts["renamed"]


@pytest.mark.parametrize("how", ["submit_specs", "submit_many"])
def test_a_batch_job_costs_four_creations_and_two_renames(tmp_path, monkeypatch, how):
    """Per job: the reservation (a temp renamed onto its name), the staged payload directory and its
    job.json (made in place: the staging name is private), the rename into place, the marker."""
    workspace = Workspace.init(tmp_path / "ws", durable=False)
    runner = published(workspace, tmp_path)  # pinned: the payloads stay job.json alone
    payloads = [str(path) for path in prepare_job_payloads(
        [(tmp_path / f"src/p{index}", spec) for index, spec in enumerate(specs(40, runner))])]
    for bucket in range(256):  # the id buckets a random id lands in, so that only the jobs' names count
        os.makedirs(tmp_path / f"ws/.httk-workflow/ids/{bucket:02x}", exist_ok=True)
    workspace.submit_specs(specs(1, runner), "camp/a")  # the directories every later batch finds made
    costs = []
    for placement, count in (("camp/b", 10), ("camp/c", 40)):
        if how == "submit_specs":
            costs.append(_creations_and_renames(monkeypatch, lambda p=placement, c=count:
                                                workspace.submit_specs(specs(c, runner), p)))
        else:
            costs.append(_creations_and_renames(monkeypatch, lambda p=placement, c=count:
                                                workspace.submit_many(payloads[:c], p)))
    assert (costs[1][0] - costs[0][0], costs[1][1] - costs[0][1]) == (4 * 30, 2 * 30)
