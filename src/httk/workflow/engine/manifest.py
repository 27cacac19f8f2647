"""What a manager publishes about itself: ``managers/<id>/manager.json`` and ``heartbeat.json``.

:class:`ManagerManifest` is what the manager serves and decides with (``job why``
and ``manager status`` read it to judge a job against a live manager's offer);
:class:`Heartbeat` is its lease evidence, rewritten about once a second. Both are
read through :func:`read_manifest` and :func:`read_beat` only, so every reader
(recovery, fsck, diagnosis) agrees on what an unreadable or stopped one means.
Spec: 000 "Run a task manager", "Inspect and control".
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .. import codec
from ..ports import Filesystem
from ..store.layout import Layout


@attrs.frozen
class ManagerManifest:
    """``manager.json`` (``httk-workflow-manager`` v1), published once when a manager starts."""

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-manager", 1)

    manager_id: str
    host: str
    pid: int
    uid: int
    workspace: str
    pools: tuple[str, ...]
    capabilities: tuple[str, ...]
    executors: tuple[str, ...]
    runner_search_paths: tuple[str, ...]
    placement_prefixes: tuple[str, ...]
    lease_seconds: float
    workers: int
    #: What this manager's takeover and join verdicts depend on: ``job why`` decides with the same.
    takeover: dict[str, Any]
    join_grace_seconds: float
    journal_writers: tuple[str, ...]
    started_at: float


@attrs.frozen
class Heartbeat:
    """``heartbeat.json``: the owner's lease evidence; ``stopped`` once it exited cleanly."""

    time: float
    #: Written by every manager; its directory names the manager too.
    manager_id: str | None = None
    lease_seconds: float | None = None
    stopped: bool = False


def read_manifest(fs: Filesystem, layout: Layout, manager_id: str) -> ManagerManifest | None:
    """The manifest of ``manager_id``; ``None`` when it is missing or unreadable."""
    path = f"{layout.managers}/{manager_id}/manager.json"
    try:
        # read_document: a directory, FIFO or symlink in a manager's directory is that one
        # manager's damage (an unreadable manifest), never a reader that blocks or fails.
        return codec.read(fs.read_document(path), ManagerManifest, path)
    except (OSError, codec.DocumentError):
        return None


def read_beat(fs: Filesystem, layout: Layout, manager_id: str) -> Heartbeat | None:
    """The last heartbeat of ``manager_id``; ``None`` when it never beat or the file is unreadable."""
    path = f"{layout.managers}/{manager_id}/heartbeat.json"
    try:
        return codec.read(fs.read_document(path), Heartbeat, path)
    except (OSError, codec.DocumentError):
        return None


def read_heartbeat(fs: Filesystem, layout: Layout, manager_id: str) -> tuple[float | None, float | None]:
    """(time of the last heartbeat, the lease it declared); ``None`` time when stopped, never or unreadable."""
    beat = read_beat(fs, layout, manager_id)
    if beat is None:
        return None, None
    return (None if beat.stopped else beat.time), beat.lease_seconds or None
