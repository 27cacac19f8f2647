"""The composition root: the only module that names adapter classes.

A ``Container`` wires ports to adapters; tests build one with in-memory
doubles instead (``Container(fs=providers.Object(InMemoryFilesystem()))`` or
``testing.container()``). Services receive ports by constructor injection.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from .adapters.clock import SystemClock
from .adapters.fs_posix import PosixFilesystem
from .adapters.ids import UuidIds
from .adapters.process import LocalProcessControl
from .services.workspaces import Ports, WorkspaceService


class Container(containers.DeclarativeContainer):
    """Ports and services of one process."""

    fs = providers.Singleton(PosixFilesystem)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidIds)
    process = providers.Singleton(LocalProcessControl)
    ports = providers.Singleton(Ports, fs=fs, clock=clock, ids=ids)
    workspaces = providers.Singleton(WorkspaceService, ports=ports)


_default: Container | None = None


def default_container() -> Container:
    """The process-wide production container."""
    global _default
    if _default is None:
        _default = Container()
    return _default
