"""A whole manager in memory: submitted jobs, scripted runners, no process and no real time.

:func:`memory_workspace` submits copies of one payload into a fresh in-memory
workspace; :func:`memory_manager` builds a :class:`~httk.workflow.engine.manager.Manager`
on it whose runners are :class:`~.process.FakeProcessControl` behaviours; and
:func:`scripted_runner` is such a behaviour: it publishes the outcome tree a script
returns for each launch, the way the SDK does in a durable workspace. A test
drives the manager with ``run()`` (until idle) or, after ``publish_manifest()``
and ``heartbeat(force=True)``, one ``tick()`` at a time, and reads the jobs back
from ``handle.store``. Several managers may share one workspace (and one process
control, for runners that outlive their manager); ``ports.fs.crash()`` followed by
``WorkspaceService(ports).open(MEMORY_ROOT)`` is a power loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from dependency_injector import providers

from .. import codec
from ..attempt_records import OutcomeDocument
from ..bootstrap import Container, new_manager
from ..engine.attempts import LaunchSettings
from ..engine.manager import Manager, ManagerConfig
from ..operations.submission import submit
from ..protocol import JobSpec
from ..store.markers import Marker
from ..store.workspaces import Ports, WorkspaceHandle, WorkspaceService
from .clock import FakeClock
from .ids import SequentialIds
from .memory_fs import InMemoryFilesystem
from .process import Behaviour, FakeProcessControl, Launch

#: Where :func:`memory_workspace` creates the workspace, and where it keeps the payload it submits.
MEMORY_ROOT = "/ws"
PAYLOAD_SOURCE = "/src/p"
#: What every attempt of a memory manager is launched with (no interpreter runs).
LAUNCH_SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh",
                                 base_env={"PATH": "/bin"})

#: A file tree: relative path -> bytes, a JSON value (written canonically), ``None`` (a directory)
#: or ``("link", target)`` (a symbolic link).
Tree = Mapping[str, Any]


class MemoryWorkspace(NamedTuple):
    """The ports, the workspace and the markers :func:`memory_workspace` submitted."""

    ports: Ports
    handle: WorkspaceHandle
    markers: list[Marker]


def memory_workspace(
    jobs: int = 1, *, placement: str = "p", durable: bool = True, uid: int = 1000, **spec: Any
) -> MemoryWorkspace:
    """A fresh in-memory workspace at :data:`MEMORY_ROOT` with ``jobs`` copies of one job submitted.

    The job is ``JobSpec(name="j", workflow="w", runner_path="run.sh", **spec)``;
    its payload is synced before the first submission, so a crash keeps it.
    """
    from . import memory_ports  # the package's, once it is initialised

    ports = memory_ports(uid=uid)
    handle = WorkspaceService(ports).init(MEMORY_ROOT, durable=durable)
    fs = ports.fs
    fs.makedirs(PAYLOAD_SOURCE)
    job = JobSpec(**{"name": "j", "workflow": "w", "runner_path": "run.sh", **spec})
    fs.write_atomic(f"{PAYLOAD_SOURCE}/job.json", job.to_bytes(), durable=True)
    fs.write_atomic(f"{PAYLOAD_SOURCE}/run.sh", b"#!/bin/sh\n", durable=True)
    fs.sync_tree("/")
    markers = [submit(handle, PAYLOAD_SOURCE, placement).marker for _ in range(jobs)]
    return MemoryWorkspace(ports, handle, markers)


def outcome_document(action: str = "succeed", **members: Any) -> dict[str, Any]:
    """An ``outcome.json`` document for ``action`` with extra ``members`` (``failure``, ``join`` …)."""
    form = OutcomeDocument.FORMAT
    return {"format": form.name, "format_version": form.version, "action": action, **members}


def write_tree(fs: InMemoryFilesystem, base: str, tree: Tree) -> None:
    """Write ``tree`` below ``base`` (not durably: the caller syncs what must survive a crash)."""
    for relative, content in tree.items():
        path = f"{base}/{relative}"
        if isinstance(content, tuple) and content[0] == "link":
            fs.makedirs(path.rsplit("/", 1)[0])
            fs.symlink(content[1], path)
        elif content is None:
            fs.makedirs(path)
        else:
            data = content if isinstance(content, bytes) else codec.encode(content)
            fs.write_atomic(path, data, durable=False)


def scripted_runner(
    fs: InMemoryFilesystem, script: Callable[[Launch], Tree] | None = None, *, status: int = 0
) -> Behaviour:
    """A runner that publishes ``script(launch)`` as ``outcome.ready/`` and exits ``status``.

    Without a script every attempt succeeds. Published as the SDK does in a durable
    workspace: the draft is written and synced, renamed into place, the control directory synced.
    """
    make_tree = script or (lambda launch: {"outcome.json": outcome_document()})

    def behaviour(launch: Launch) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        write_tree(fs, f"{control}/outcome.tmp.1", make_tree(launch))
        fs.sync_tree(f"{control}/outcome.tmp.1")
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=True)
        return status

    return behaviour


def memory_manager(
    handle: WorkspaceHandle,
    runner: Behaviour | None = None,
    *,
    process: FakeProcessControl | None = None,
    manager_id: str = "m-a",
    host: str = "fakehost",
    out: Callable[[str], None] | None = None,
    **config: Any,
) -> Manager:
    """A manager of ``handle`` with ``ManagerConfig(**config)`` whose runners are fake processes.

    ``runner`` is the behaviour of every launch (default: :func:`scripted_runner`, each
    attempt succeeds) on a new :class:`FakeProcessControl` on ``host``; pass ``process``
    instead to share one process control (and its still-running fakes) between managers.
    The manager's ``proc`` is that process control; its banner and summary go to ``out``
    (default: nowhere). It is the production container's manager (its verifier and
    ``gc_hook``) with the process control and launch settings overridden.
    """
    fs, clock = handle.fs, handle.ports.clock
    if process is None:
        if not isinstance(fs, InMemoryFilesystem) or not isinstance(clock, FakeClock):
            raise TypeError("memory_manager needs a workspace on the in-memory ports (see memory_workspace)")
        behaviour = runner if runner is not None else scripted_runner(fs)
        process = FakeProcessControl(clock, behaviour, host=host, uid=fs.uid)
    elif runner is not None:
        raise ValueError("memory_manager: pass a runner or a process, not both")
    container = Container()
    with container.override_providers(process=providers.Object(process), launch=providers.Object(LAUNCH_SETTINGS)):
        return new_manager(container, handle, ManagerConfig(**config), manager_id=manager_id,
                           out=out or (lambda line: None))


def memory_container() -> Container:
    """The production container configured for memory: ``filesystem=memory``, ``clock=fake``, sequential ids.

    The filesystem and the clock are what the container's selectors choose from that
    configuration; the ids are overridden. Processes stay real: override ``process`` too
    to run a manager on it.
    """
    container = Container()
    container.config.from_dict({"filesystem": "memory", "clock": "fake"})
    container.override_providers(ids=providers.Object(SequentialIds()))
    return container
