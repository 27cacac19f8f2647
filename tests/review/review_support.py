"""Shared helpers of the review tests: an in-memory workspace and a manager with scripted runners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.protocol import JobSpec
from httk.workflow.services.attempts import LaunchSettings
from httk.workflow.services.manager import Manager, ManagerConfig
from httk.workflow.services.submission import submit
from httk.workflow.services.workspaces import WorkspaceService
from httk.workflow.testing import FakeProcessControl, memory_ports

ROOT = "/ws"
SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})

#: A file tree to publish: relative path -> bytes (a file), or ("link", target) (a symlink).
Tree = dict[str, Any]


def workspace(jobs: int = 1, *, placement: str = "p", durable: bool = True, **spec_changes: Any):
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT, durable=durable)
    fs = ports.fs
    fs.makedirs("/src/p")
    spec = JobSpec(name="j", workflow="w", runner_path="run.sh", **spec_changes)
    fs.write_atomic("/src/p/job.json", spec.to_bytes(), durable=True)
    fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=True)
    fs.sync_tree("/")
    markers = [submit(handle, "/src/p", placement).marker for _ in range(jobs)]
    return ports, handle, markers


def outcome(action: str = "succeed", **members: Any) -> dict[str, Any]:
    return {"format": "httk-workflow-outcome", "format_version": 1, "action": action, **members}


def write_tree(fs, base: str, tree: Tree) -> None:
    for relative, content in tree.items():
        path = f"{base}/{relative}"
        if isinstance(content, tuple) and content[0] == "link":
            parent = path.rsplit("/", 1)[0]
            fs.makedirs(parent)
            fs.symlink(content[1], path)
        elif content is None:
            fs.makedirs(path)
        else:
            fs.write_atomic(path, content if isinstance(content, bytes) else codec.encode(content), durable=False)


def publisher(fs, make_tree: Callable[[Any], Tree], status: int = 0) -> Callable[[Any], int]:
    """A runner behaviour that publishes ``make_tree(launch)`` as outcome.ready/."""

    def behaviour(launch: Any) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        write_tree(fs, f"{control}/outcome.tmp.1", make_tree(launch))
        # As the SDK does in a durable workspace: sync the draft, rename it, sync the control directory.
        fs.sync_tree(f"{control}/outcome.tmp.1")
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=True)
        return status

    return behaviour


def manager(handle, proc, name: str = "m-a", **config: Any) -> Manager:
    return Manager(handle, proc, SETTINGS, ManagerConfig(**config), manager_id=name, out=lambda line: None)


def fake_proc(ports, behaviour, **kw: Any) -> FakeProcessControl:
    return FakeProcessControl(ports.clock, behaviour, uid=ports.fs.uid, **kw)


def kinds(handle) -> dict[str, int]:
    out = {}
    for kind in StateKind:
        count = len(list(handle.store.iter_markers(kind)))
        if count:
            out[kind.value] = count
    return out


def frame_of(handle, kind: StateKind):
    [marker] = list(handle.store.iter_markers(kind))
    return handle.store.read_frame(marker)


def fsck_problems(handle) -> list[Any]:
    from httk.workflow.services.fsck import Fsck

    return Fsck(handle).run()["problems"]
