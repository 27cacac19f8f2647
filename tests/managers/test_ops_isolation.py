"""Per-job fault isolation with real managers (issue 10, "the rule").

One poisoned document — a directory or FIFO where ``job.json`` belongs, a FIFO
published as ``outcome.json``, a ``wait`` outcome no join can evaluate, a marker
whose record reference claims absurd numbers — is a named refusal of *that* job:
logged once, counted in the closing summary, shown by ``job why``. The manager
runs the good job next to it to success, exits normally, and a SIGTERM still
drains it promptly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import attrs

from httk.workflow.domain.lifecycle import Event

SUCCEED = """publish '"action":"succeed"'"""
#: Sleeps until terminated, so the manager is busy when the signal comes.
LONG = """touch started; sleep 60; publish '"action":"succeed"'"""


def _summary(manager) -> str:
    return manager.stdout.splitlines()[-1]


def _poison_job_json(ops, job: str, how: str) -> Path:
    path = ops.payload(job) / "job.json"
    path.unlink()
    if how == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    return path


def _assert_refused_once(ops, manager, job: str, words: str) -> None:
    key = str(ops.marker(job).key)
    refusals = [line for line in manager.stderr.splitlines() if f"job {key}: refused" in line]
    assert len(refusals) == 1, manager.stderr  # logged once, not once per pass
    assert words in refusals[0]
    assert "1 refused" in _summary(manager)
    why = ops.httk("job", "why", str(ops.root), job).stdout
    assert words in why and f"manager {manager.manager_id} refused it" in why


def test_a_directory_as_job_json_refuses_that_job_and_the_good_one_runs(ops):
    good = ops.job(SUCCEED)
    bad = ops.job(SUCCEED)
    _poison_job_json(ops, bad, "directory")
    manager = ops.run()
    assert ops.kind(good) == "succeeded"
    assert ops.kind(bad) == "submitted"  # nothing was done to it
    assert "1 with an unreadable definition" in _summary(manager)
    _assert_refused_once(ops, manager, bad, "job.json is a directory, not a regular file")
    # Every later manager serves the workspace too (the document is still on disk).
    again = ops.job(SUCCEED)
    ops.run()
    assert ops.kind(again) == "succeeded"


def test_a_fifo_as_job_json_never_blocks_the_manager_and_sigterm_drains_it(ops):
    bad = ops.job(SUCCEED)
    _poison_job_json(ops, bad, "fifo")
    good = ops.job(LONG)
    manager = ops.start("--idle", "--drain-timeout", "20")
    ops.wait_kind(good, "running")
    ops.wait_until(lambda: (ops.workdir(good) / "started").exists(), 30, "the runner to start")
    started = time.monotonic()
    manager.signal(signal.SIGTERM)
    assert manager.wait(20) == 0, manager.stderr
    assert time.monotonic() - started < 10
    _assert_refused_once(ops, manager, bad, "job.json is a FIFO, not a regular file")


#: Publishes a FIFO where outcome.json belongs: a blocking reader would wait forever.
FIFO_OUTCOME = """d="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.$$"; mkdir -p "$d"; mkfifo "$d/outcome.json"
mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready\""""


def test_a_fifo_published_as_outcome_json_fails_that_attempt_with_protocol_error(ops):
    bad = ops.job(FIFO_OUTCOME, priority=1)
    good = ops.job(SUCCEED)
    manager = ops.run(timeout=60)
    assert ops.kind(good) == "succeeded"
    assert ops.kind(bad) == "failed"
    failure = ops.frame(bad).failure
    assert failure.code == "protocol_error"
    assert "outcome.json is a FIFO, not a regular file" in failure.message
    assert "1 failed" in _summary(manager)
    assert "protocol_error" in ops.httk("job", "why", str(ops.root), bad).stdout


#: A wait the SDK would refuse: all_succeeded takes no count (and nothing was spawned).
WAIT_WITH_COUNT = """publish '"action":"wait","join":{"step":"after","when":"all_succeeded","count":2,"children":[]}'"""


def test_a_wait_outcome_with_a_count_is_refused_before_it_is_committed(ops):
    bad = ops.job(WAIT_WITH_COUNT, priority=1)
    good = ops.job(SUCCEED)
    ops.run()
    assert ops.kind(good) == "succeeded"
    assert ops.kind(bad) == "failed"  # never waiting: no manager start can trip over it later
    failure = ops.frame(bad).failure
    assert failure.code == "protocol_error"
    assert "join condition 'all_succeeded' takes no count" in failure.message
    later = ops.job(SUCCEED)
    ops.run()
    assert ops.kind(later) == "succeeded"


def test_a_stored_join_no_manager_can_evaluate_is_refused_and_the_rest_served(ops):
    # A waiting job committed by an older version with a join the rule now refuses.
    parent = ops.spawning_parent()
    ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "waiting", ops.frame(parent)
    marker = ops.marker(parent)
    frame = ops.frame(parent)
    ops.handle.store.transition(marker, frame, Event.JOIN_NOTE, join=attrs.evolve(frame.join, count=2))
    good = ops.job(SUCCEED)
    manager = ops.run("--placement-prefix", "p")
    assert ops.kind(good) == "succeeded"
    assert ops.kind(parent) == "waiting"
    _assert_refused_once(ops, manager, parent, "join condition 'all_succeeded' takes no count")


def _damage_reference(ops, job: str, ref: str, generation: str = "g5") -> Path:
    """Rename the job's marker onto ``ref`` at a later generation (what a torn or hostile name looks like)."""
    marker = ops.marker(job)
    old = Path(ops.handle.store.marker_path(marker))
    new = old.with_name(f"{marker.key}.p{marker.priority}.{generation}.{ref}")
    old.rename(new)
    return new


def test_oversized_numbers_in_a_record_reference_are_damage_codes_everywhere(ops):
    damaged = [ops.job(SUCCEED, pool="elsewhere") for _ in range(3)]
    ops.run()  # registers them (ready, generation 1); this manager's pool never claims them
    writer, segment, offset, _length, prefix = ops.marker(damaged[0]).ref.split("~")
    refs = [
        f"{writer}~{segment}~{offset}~{2**40}~{prefix}",  # a 1 TiB frame: MemoryError before
        f"{writer}~{segment}~{2**64}~120~{prefix}",  # past off_t: OverflowError before
        f"{writer}~{2**70}~{offset}~120~{prefix}",  # an absurd segment number
    ]
    for job, ref in zip(damaged, refs, strict=True):
        _damage_reference(ops, job, ref)
    good = ops.job(SUCCEED)

    report = json.loads(ops.httk("workspace", "fsck", str(ops.root), "--json", code=1).stdout)
    assert sorted(problem["code"] for problem in report["problems"]) == ["unparseable_name"] * 3
    for job in damaged:
        shown = ops.httk("job", "show", str(ops.root), job, code=1)  # 1: damage reported
        assert "unparseable_name" in shown.stdout and "Traceback" not in shown.stderr
    for raw in ((), ("--raw",)):
        lines = ops.httk("collect", str(ops.root), "--kind", "ready", *raw).stdout.splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) == 3 and all("unparseable_name" in record["damage"] for record in records)
    manager = ops.run("--pool", "default", "--pool", "elsewhere")
    assert ops.kind(good) == "succeeded"
    assert "3 refused" in _summary(manager)

    repaired = json.loads(ops.httk("workspace", "fsck", str(ops.root), "--repair", "--json").stdout)
    assert [problem["action"] for problem in repaired["problems"]] == ["repaired"] * 3
    ops.run("--pool", "elsewhere")
    assert all(ops.kind(job) == "succeeded" for job in damaged)
