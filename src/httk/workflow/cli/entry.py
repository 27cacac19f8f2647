"""The console scripts' entry points: ``httk`` and ``httk-taskmanager`` (pyproject ``[project.scripts]``).

Each imports the command tree (:mod:`.main`) with the cyclic garbage collector
paused, then runs it. Those imports (click, the composition root, the store;
most of a command's start-up) allocate tens of thousands of objects that live as
long as the process (modules, classes, functions) and next to no cyclic garbage,
yet the collector would traverse them again and again: about 7 ms of a read
command (docs/benchmarks.md "CLI start-up"). Afterwards everything is frozen
(``gc.freeze``: kept, never traversed again; otherwise the first collections
would traverse all of it at once, which costs what the pause saved) and the
collector is on again, so every command runs with it.

Freezing is process-wide, so it belongs here and not in :mod:`.main`: a console
script's process holds nothing else yet, while a program that imports
:mod:`.main` as a library (tests, integrators, notebooks) may hold garbage that
a freeze would keep for good. A collector that was off is left off, unfrozen
(no other thread runs yet in a console script's process to turn it on or off
meanwhile).
"""

from __future__ import annotations

import gc
from types import ModuleType


def load_commands() -> ModuleType:
    """:mod:`.main`, imported with the collector paused and what exists then frozen (if the collector was on)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from . import main
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
    return main


def httk() -> None:
    """``httk``: the canonical command tree."""
    load_commands().httk()


def taskmanager() -> None:
    """``httk-taskmanager``: the alias tree."""
    load_commands().taskmanager()
