"""Shared helpers of the service tests (imported by name; conftest modules must not be).

A whole manager in memory comes from :mod:`httk.workflow.testing` (``memory_workspace``,
``memory_manager``, ``scripted_runner``); these read back what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from httk.workflow.domain.frames import StateFrame
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.protocol import JobSpec
from httk.workflow.store.workspaces import WorkspaceHandle, WorkspaceService
from httk.workflow.testing import MEMORY_ROOT, InMemoryFilesystem, SimulatedCrash, memory_manager

ROOT = MEMORY_ROOT


def write_payload(fs: InMemoryFilesystem, path: str, spec: JobSpec | None = None) -> str:
    spec = spec or JobSpec(name="job", workflow="w", runner_path="run.sh", tag="t")
    fs.makedirs(path)
    fs.write_atomic(f"{path}/job.json", spec.to_bytes(), durable=True)
    fs.write_atomic(f"{path}/run.sh", b"#!/bin/sh\n", durable=True)
    return path


def kinds(handle: WorkspaceHandle) -> dict[str, int]:
    """How many jobs are in each kind that has any (``{"succeeded": 2}``)."""
    out = {}
    for kind in StateKind:
        count = len(list(handle.store.iter_markers(kind)))
        if count:
            out[kind.value] = count
    return out


def frame_of(handle: WorkspaceHandle, kind: StateKind) -> StateFrame | None:
    """The frame of the one job in ``kind``."""
    [marker] = list(handle.store.iter_markers(kind))
    return handle.store.read_frame(marker)


def fsck_problems(handle: WorkspaceHandle) -> list[Any]:
    return Fsck(handle).run()["problems"]


def crash_first_run(handle: WorkspaceHandle, runner: Callable[[Any], int], points: int) -> tuple[WorkspaceHandle, bool]:
    """Run manager ``m-a`` until its first launch has run, then crash it ``points`` filesystem operations later.

    The filesystem loses what was not synced, the workspace is opened afresh and the clock
    passes every lease; returns the fresh handle and whether the crash point was reached
    (False: the run ended first). A second manager is the caller's to start.
    """
    fs = handle.ports.fs
    armed = [False]

    def behaviour(launch: Any) -> int:
        status = runner(launch)
        if not armed[0]:  # only the first launch: a later one would move the crash point
            armed[0] = True
            fs.sync_tree(ROOT)
            fs.arm_crash(points)
        return status

    try:
        memory_manager(handle, behaviour, manager_id="m-a", lease_seconds=10.0).run()
        crashed = False
    except SimulatedCrash:
        crashed = True
    fs.crash()
    fresh = WorkspaceService(handle.ports).open(ROOT)
    handle.ports.clock.advance(1000.0)
    return fresh, crashed
