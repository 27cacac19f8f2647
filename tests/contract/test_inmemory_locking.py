"""Every public operation of the in-memory filesystem runs under its lock, inherited ones included."""

from __future__ import annotations

import threading

from httk.workflow.testing import InMemoryFilesystem
from httk.workflow.testing.memory_tree_ops import TreeOperations


def test_the_tree_operations_are_serialized_like_the_primitives() -> None:
    for name in ("rmtree", "copy_tree", "sync_tree", "sync_trees", "fsync_dirs", "rename", "write_atomic"):
        assert hasattr(getattr(InMemoryFilesystem, name), "__wrapped__"), name
    assert InMemoryFilesystem.rmtree.__wrapped__ is TreeOperations.rmtree


def test_threads_copying_and_removing_trees_at_once_leave_a_consistent_tree() -> None:
    fs = InMemoryFilesystem()
    for index in range(20):
        fs.write_atomic(f"/src/d{index}/f", b"x" * index, durable=False)
    errors: list[BaseException] = []

    def copy(number: int) -> None:
        try:
            fs.copy_tree("/src", f"/copy{number}", durable=True)
            fs.rmtree(f"/copy{number}")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=copy, args=(number,)) for number in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert errors == [] and sorted(entry.name for entry in fs.scandir("/")) == ["src"]
