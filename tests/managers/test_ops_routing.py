"""Routing and the safety property: what a manager may claim (spec 000 "Run", "Scheduling").

A job is claimed only by a manager that serves its pool, offers its
capabilities and scans its placement; the closing summary and the idle-timeout
advice name what is missing. A manager claims only jobs whose marker, payload
directory and ``job.json`` are regular, non-symlink entries owned by its own
account.
"""

from __future__ import annotations

import os
import shutil

import pytest

RUN = "echo ran >> ran\npublish '\"action\":\"succeed\"'"


def _summary(manager) -> str:
    lines = manager.stdout.splitlines()
    assert len(lines) == 2 and " idle: " in lines[1], manager.stdout
    return lines[1]


def _ran(ops, job) -> bool:
    return (ops.workdir(job) / "ran").exists()


def test_a_pool_job_waits_for_a_manager_of_that_pool(ops):
    job = ops.job(RUN, pool="vasp")
    manager = ops.run()
    assert ops.kind(job) == "ready" and not _ran(ops, job)
    assert "not claimable here: 1 need pool vasp" in _summary(manager)

    manager = ops.run("--pool", "vasp")
    assert ops.kind(job) == "succeeded"
    assert "1 succeeded" in _summary(manager) and "not claimable here: 0" in _summary(manager)


def test_a_capability_job_runs_only_where_the_capability_is_offered(ops):
    job = ops.job(RUN, capabilities=("gpu",))
    plain = ops.job(RUN)
    manager = ops.run("--workers", "2")
    assert ops.kind(plain) == "succeeded"
    assert ops.kind(job) == "ready" and not _ran(ops, job)
    assert "1 need capability gpu" in _summary(manager)

    ops.run("--capability", "gpu")
    assert ops.kind(job) == "succeeded"


def test_placement_prefixes_confine_every_scan(ops):
    a = ops.job(RUN, placement="project-a/00")
    a2 = ops.job(RUN, placement="project-a/01/deep")
    b = ops.job(RUN, placement="project-b/00")
    ab = ops.job(RUN, placement="project-ab")  # a prefix matches whole components only
    manager = ops.run("--placement-prefix", "project-a", "--workers", "2")
    assert ops.kind(a) == ops.kind(a2) == "succeeded"
    # Outside the prefix nothing was even registered.
    assert ops.kind(b) == ops.kind(ab) == "submitted"
    assert "2 succeeded" in _summary(manager)
    assert "warning" not in manager.stderr.lower()

    ops.run("--placement-prefix", "project-b", "--placement-prefix", "project-ab")
    assert ops.kind(b) == ops.kind(ab) == "succeeded"


def test_a_prefix_matching_nothing_is_warned_about_once(ops):
    job = ops.job(RUN, placement="p")
    manager = ops.run("--placement-prefix", "no-such/subtree")
    assert ops.kind(job) == "submitted"
    warnings = [line for line in manager.stderr.splitlines() if "no-such/subtree" in line]
    assert len(warnings) == 1, manager.stderr
    assert "matches no job" in warnings[0] and "WARNING" in warnings[0]


def test_the_idle_timeout_advice_names_the_mismatch_and_the_flag(ops):
    ops.job(RUN, pool="vasp")
    ops.job(RUN, capabilities=("gpu",))
    ops.job(RUN, executor="slurm")
    manager = ops.run("--idle", "--idle-timeout", "1", timeout=30)
    advice = manager.stderr
    assert "idle timeout reached" in advice
    assert "need pool 'vasp': start a manager with --pool vasp" in advice
    assert "need capability 'gpu': start a manager with --capability gpu" in advice
    assert "need executor 'slurm'" in advice and "serves the 'slurm' executor" in advice
    summary = _summary(manager)
    assert "1 need capability gpu" in summary and "1 need pool vasp" in summary
    assert "1 need executor slurm" in summary


# -- ownership safety ---------------------------------------------------------------------------
def test_a_symlinked_payload_is_never_claimed(ops, tmp_path):
    job = ops.job(RUN)
    payload = ops.payload(job)
    copy = tmp_path / "elsewhere"
    shutil.copytree(payload, copy)
    shutil.rmtree(payload)
    os.symlink(copy, payload)

    ops.run()
    assert ops.kind(job) == "submitted"
    # Registered by a manager before the swap, it is still never claimed.
    other = ops.job(RUN)
    ops.run("--pool", "elsewhere")
    assert ops.kind(other) == "ready"
    payload = ops.payload(other)
    shutil.copytree(payload, tmp_path / "copy2")
    shutil.rmtree(payload)
    os.symlink(tmp_path / "copy2", payload)
    ops.run()
    assert ops.kind(other) == "ready"
    assert not _ran(ops, job) and not _ran(ops, other)


def test_a_symlinked_job_json_is_never_claimed(ops, tmp_path):
    job = ops.job(RUN)
    ops.run("--pool", "elsewhere")
    job_file = ops.payload(job) / "job.json"
    shutil.copy(job_file, tmp_path / "job.json")
    job_file.unlink()
    os.symlink(tmp_path / "job.json", job_file)
    ops.run()
    assert ops.kind(job) == "ready" and not _ran(ops, job)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
@pytest.mark.parametrize("what", ["marker", "payload", "job.json"])
def test_an_entry_owned_by_another_account_is_never_claimed(ops, what):
    job = ops.job(RUN)
    ops.run("--pool", "elsewhere")
    assert ops.kind(job) == "ready"
    path = {
        "marker": ops.handle.store.marker_path(ops.marker(job)),
        "payload": ops.payload(job),
        "job.json": ops.payload(job) / "job.json",
    }[what]
    os.chown(path, 4242, 4242)
    ops.run()
    assert ops.kind(job) == "ready" and not _ran(ops, job)
    assert ops.marker(job).generation == 1


def test_a_symlinked_marker_is_never_claimed(ops, tmp_path):
    job = ops.job(RUN)
    ops.run("--pool", "elsewhere")
    marker = ops.handle.store.marker_path(ops.marker(job))
    os.rename(marker, tmp_path / "real-marker")
    os.symlink(tmp_path / "real-marker", marker)
    ops.run()
    assert ops.kind(job) == "ready" and not _ran(ops, job)
    assert os.path.islink(marker)


def test_a_safety_refusal_is_counted_and_job_why_names_the_check(ops, tmp_path):
    job = ops.job(RUN)
    payload = ops.payload(job)
    shutil.copytree(payload, tmp_path / "elsewhere")
    shutil.rmtree(payload)
    os.symlink(tmp_path / "elsewhere", payload)
    summary = _summary(ops.run())
    assert ops.kind(job) == "submitted" and "1 refused (see 'job why')" in summary, summary
    why = ops.httk("job", "why", str(ops.root), job).stdout
    assert f"the safety property refuses it: its payload directory {payload} is a symbolic link" in why, why
