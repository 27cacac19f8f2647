"""Public test doubles for the ports, and a container that wires them.

:class:`FakeClock`, :class:`InMemoryFilesystem` and :class:`SequentialIds`
implement the ports in memory and pass the same contract suite as the real
adapters. The in-memory filesystem is honest about POSIX: renames are atomic and
fenced, a name or a byte survives :meth:`InMemoryFilesystem.crash` only if it
was fsynced, and a lagging reader does not see a name before its lag elapsed and
still sees an unlinked name or a file's older size within its stale window.

With :class:`FakeProcessControl` a whole manager runs in memory:
:func:`memory_workspace` submits jobs into a fresh in-memory workspace,
:func:`memory_manager` builds a manager on it whose runners are behaviours, and
:func:`scripted_runner` is a behaviour that publishes the outcome tree a script
returns for each launch (:func:`outcome_document` builds ``outcome.json``).
:func:`memory_container` is the production container configured for memory.
:class:`ReplayTransport` answers commands from recorded output (and
:class:`RecordingTransport` records it) for the batch-system contract suite.
"""

from __future__ import annotations

from ..languages.installation import find_module
from ..store.workspaces import Ports
from .clock import FakeClock
from .ids import SequentialIds
from .manager import (
    LAUNCH_SETTINGS,
    MEMORY_ROOT,
    MemoryWorkspace,
    memory_container,
    memory_manager,
    memory_workspace,
    outcome_document,
    scripted_runner,
    write_tree,
)
from .memory_fs import InMemoryFilesystem, SimulatedCrash, SimulatedHang
from .process import FakeProcess, FakeProcessControl, Launch
from .replay import Exchange, RecordingTransport, ReplayMismatch, ReplayTransport

__all__ = [
    "Exchange",
    "RecordingTransport",
    "ReplayMismatch",
    "ReplayTransport",
    "LAUNCH_SETTINGS",
    "MEMORY_ROOT",
    "FakeClock",
    "FakeProcess",
    "FakeProcessControl",
    "InMemoryFilesystem",
    "Launch",
    "MemoryWorkspace",
    "Ports",
    "SequentialIds",
    "SimulatedCrash",
    "SimulatedHang",
    "memory_container",
    "memory_manager",
    "memory_ports",
    "memory_workspace",
    "outcome_document",
    "scripted_runner",
    "write_tree",
]


def memory_ports(*, clock: FakeClock | None = None, uid: int = 1000) -> Ports:
    """Ports over a fresh in-memory filesystem, a fake clock and sequential ids."""
    chosen = clock or FakeClock()
    return Ports(fs=InMemoryFilesystem(clock=chosen, uid=uid), clock=chosen, ids=SequentialIds(),
                 find_module=find_module)
