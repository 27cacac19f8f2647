"""Shared helpers of the service tests (imported by name; conftest modules must not be).

A whole manager in memory comes from :mod:`httk.workflow.testing` (``memory_workspace``,
``memory_manager``, ``scripted_runner``); these read back what it did.
"""

from __future__ import annotations

from typing import Any

from httk.workflow.domain.frames import StateFrame
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.fsck import Fsck
from httk.workflow.protocol import JobSpec
from httk.workflow.store.workspaces import WorkspaceHandle
from httk.workflow.testing import MEMORY_ROOT, InMemoryFilesystem

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
