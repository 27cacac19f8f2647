"""In-memory workspaces and scripted runners for the commit tests of tests/reliability (spawns, puts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.attempts import LaunchSettings
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import FakeProcessControl, SimulatedCrash, memory_ports

ROOT = "/ws"
SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})
CHILD_JOB = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()
CHILD_ID = "cccccccc-0000-4000-8000-000000000001"
CHILD = f"c--{CHILD_ID}"
OTHER_ID = "cccccccc-0000-4000-8000-000000000002"
OTHER = f"b--{OTHER_ID}"


def workspace(**spec_changes: Any):
    """Ports and a durable workspace whose source payload ``/src/p`` (job.json + run.sh) is ready to submit."""
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT, durable=True)
    fs = ports.fs
    fs.makedirs("/src/p")
    fs.write_atomic("/src/p/job.json", JobSpec(name="j", workflow="w", runner_path="run.sh",
                                               **spec_changes).to_bytes(), durable=True)
    fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=True)
    fs.sync_tree("/")
    return ports, handle


def add_job(handle, placement: str = "p", job_id: str | None = None):
    marker = submit(handle, "/src/p", placement, job_id=job_id).marker
    handle.fs.sync_tree(ROOT)
    return marker


def outcome(action: str = "succeed", **members: Any) -> dict[str, Any]:
    return {"format": "httk-workflow-outcome", "format_version": 1, "action": action, **members}


def spawn_tree(children: list[tuple[str, str, str]], final: dict[str, Any] | None = None) -> dict[str, Any]:
    """An outcome spawning ``(label, job_key, placement)`` children with complete payloads."""
    entries, files = [], {}
    for label, key, placement in children:
        job_id = key.rpartition("--")[2]
        entries.append({"label": label, "job_id": job_id, "job_key": key, "placement": placement,
                        "payload": f"jobs/{key}"})
        files[f"children/jobs/{key}/job.json"] = CHILD_JOB
        files[f"children/jobs/{key}/run.sh"] = b"#!/bin/sh\n"
    return {"outcome.json": final or outcome(),
            "children/spawn.json": {"format": "httk-workflow-spawn", "format_version": 1, "children": entries},
            **files}


def publisher(fs, make_tree: Callable[[Any], dict[str, Any] | None]) -> Callable[[Any], int]:
    """A runner publishing ``make_tree(launch)`` as outcome.ready/ (a plain succeed when it returns None)."""

    def behaviour(launch: Any) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        draft = f"{control}/outcome.tmp.1"
        for relative, content in (make_tree(launch) or {"outcome.json": outcome()}).items():
            data = content if isinstance(content, bytes) else codec.encode(content)
            fs.write_atomic(f"{draft}/{relative}", data, durable=False)
        fs.sync_tree(draft)
        fs.rename(draft, f"{control}/outcome.ready", durable=True)
        return 0

    return behaviour


def spawning(parents: set[str], children: list[tuple[str, str, str]]) -> Callable[[Any], dict[str, Any] | None]:
    """A ``publisher`` tree: each job in ``parents`` spawns ``children``; every other job succeeds."""

    def tree(launch: Any) -> dict[str, Any] | None:
        return spawn_tree(children) if launch.env["HTTK_WORKFLOW_JOB_ID"] in parents else None

    return tree


def manager(handle, ports, behaviour, name: str = "m-a", prefixes: tuple[str, ...] = ()) -> Manager:
    """A manager on fake processes; ``prefixes`` limits the placements it serves (all by default)."""
    proc = FakeProcessControl(ports.clock, behaviour, uid=ports.fs.uid)
    config = ManagerConfig(lease_seconds=10.0, placement_prefixes=prefixes)
    return Manager(handle, proc, SETTINGS, config, manager_id=name, out=lambda line: None)


def run_spawner(handle, ports, parent, children: list[tuple[str, str, str]] | None = None, *, name: str = "m-a",
                prefixes: tuple[str, ...] = ()) -> None:
    """Run a manager until idle whose runner has ``parent`` spawn ``children`` (by default the child ``c``,
    job ``CHILD`` at ``kids``) and lets every other job succeed."""
    tree = spawning({parent.job_id}, children if children is not None else [("c", CHILD, "kids")])
    manager(handle, ports, publisher(ports.fs, tree), name, prefixes).run()


def race_id_reservation(handle, job_id: str, compete: Callable[[], Any]) -> None:
    """Run ``compete`` once, just before the reservation of ``job_id`` is written (alone or as a group's rename)."""
    fs = handle.fs
    write_new, rename = fs.write_new, fs.rename
    raced = [False]

    def race(path: str) -> None:
        if not raced[0] and path == handle.layout.id_reservation(job_id):
            raced[0] = True  # set first: the competing submission reserves the id too
            compete()

    def racing_write(path, data, *, durable):
        race(path)
        return write_new(path, data, durable=durable)

    def racing_rename(source, destination, *, durable):  # a group reservation renames its synced temp
        race(destination)
        return rename(source, destination, durable=durable)

    fs.write_new, fs.rename = racing_write, racing_rename


def crash_and_recover(ports, handle, publish, point: int, arm_on: Callable[[Any], bool] | None = None):
    """Run ``publish`` with a crash armed ``point`` operations after the first publication ``arm_on`` accepts
    (any, by default), crash the filesystem, and let a second manager recover; ``(fresh handle, crashed)``."""
    armed = [False]

    def behaviour(launch: Any) -> int:
        status = publish(launch)
        if not armed[0] and (arm_on is None or arm_on(launch)):
            armed[0] = True
            ports.fs.sync_tree(ROOT)
            ports.fs.arm_crash(point)
        return status

    try:
        manager(handle, ports, behaviour).run()
        crashed = False
    except SimulatedCrash:
        crashed = True
    ports.fs.crash()
    fresh = WorkspaceService(ports).open(ROOT)
    ports.clock.advance(1000.0)
    manager(fresh, ports, publish, "m-b").run()
    return fresh, crashed


def markers_of(handle, job_id: str) -> list[Any]:
    """Every marker of one job, in every kind (a job exists exactly once when this has one element)."""
    return [marker for kind in StateKind for marker in handle.store.iter_markers(kind) if marker.job_id == job_id]


def protocol_failure(handle, job_id: str) -> str:
    """The failure message of a job that must have failed with ``protocol_error``."""
    [marker] = markers_of(handle, job_id)
    frame = handle.store.read_frame(marker)
    assert marker.kind == StateKind.FAILED, marker
    assert frame.failure.code == "protocol_error", frame.failure
    return frame.failure.message


def fsck_problems(handle) -> list[Any]:
    from httk.workflow.operations.fsck import Fsck

    return Fsck(handle).run()["problems"]
