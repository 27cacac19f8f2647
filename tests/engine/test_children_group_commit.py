"""A spawn's children are created as one group commit: a fixed number of grouped syncs, none per child.

Counted at the filesystem port (deterministic, no clock): the durable creation of
children used to make about eleven sequential fsyncs per child (a durable write,
create or rename for each of its steps). What a crash at any of the grouped steps
leaves is covered by ``test_commit_crash.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import JobKey
from httk.workflow.engine.children import plan_children
from httk.workflow.engine.outcome_reader import read_outcome
from httk.workflow.protocol import JobSpec
from httk.workflow.testing import memory_workspace, outcome_document

CHILD_JOB = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()
#: The port's calls that sync one name when asked to be durable.
ONE_AT_A_TIME = ("write_atomic", "write_new", "create_empty", "rename", "exchange", "copy_tree", "makedirs")
GROUPED = ("sync_trees", "fsync_dirs")


def _spawn(count: int) -> tuple[Counter[str], Counter[str]]:
    """Create ``count`` children of one outcome; the port calls that synced, and the paths each group synced."""
    ports, handle, [parent] = memory_workspace()
    fs = ports.fs
    control = handle.layout.attempt_dir(parent.job_id, 1, "a1")
    spawned = []
    for index in range(count):
        key = JobKey(f"{index:02x}cccccc-0000-4000-8000-{index:012x}", "c")
        spawned.append({"label": f"c{index}", "job_id": key.job_id, "job_key": str(key),
                        "placement": "kids", "payload": f"jobs/{key}"})
        fs.write_atomic(f"{control}/outcome.ready/children/jobs/{key}/job.json", CHILD_JOB, durable=True)
    fs.write_atomic(f"{control}/outcome.ready/children/spawn.json", codec.encode(
        {"format": "httk-workflow-spawn", "format_version": 1, "children": spawned}), durable=True)
    fs.write_atomic(f"{control}/outcome.ready/outcome.json", codec.encode(outcome_document()), durable=True)
    fs.sync_tree("/")
    calls: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    inside = [0]  # the calls a grouped sync makes itself (the in-memory one syncs path by path) are its own

    def counting(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return method(*args, **kwargs)
            if name in GROUPED:
                calls[name] += 1
                paths[name] += len(args[0])
            elif name == "fsync_dir" or kwargs.get("durable"):
                calls[name] += 1
            inside[0] += 1
            try:
                return method(*args, **kwargs)
            finally:
                inside[0] -= 1

        return call

    for name in (*ONE_AT_A_TIME, *GROUPED, "fsync_dir", "sync_tree"):
        setattr(fs, name, counting(name, getattr(fs, name)))
    outcome = read_outcome(fs, control, 0)
    created = plan_children(handle.store, control, outcome, parent, attempt_id="a1").create()
    assert len(created) == count
    assert len(list(handle.store.iter_markers(StateKind.SUBMITTED))) == count + 1
    return calls, paths


def test_a_spawn_syncs_in_groups_whose_number_does_not_grow_with_its_children():
    few_calls, few_paths = _spawn(3)
    many_calls, many_paths = _spawn(40)
    assert set(many_calls) <= {*GROUPED, "fsync_dir"}, f"a sync made one child at a time: {many_calls}"
    assert many_calls == few_calls
    # One content sync per child for its id reservation and one for its parent record: no more.
    assert many_paths["sync_trees"] == 2 * 40 and few_paths["sync_trees"] == 2 * 3
