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

import codecs
import gc
import io
import sys
from types import ModuleType

#: The error handler of the console scripts' output streams (:func:`_printable_output`).
ESCAPES = "httk-workflow-escapes"


def _escape(error: UnicodeError) -> tuple[str, int]:
    """What a stream cannot encode, as escapes: an undecodable byte of a file name as ``\\xNN``, else ``\\uNNNN``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    escaped = "".join(
        f"\\x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF
        else char.encode("ascii", "backslashreplace").decode("ascii")
        for char in text
    )
    return escaped, error.end


def _printable_output() -> None:
    """Print what the output's encoding cannot spell as escapes (a byte 0xff as ``\\xff``), never a traceback.

    A file name that is not UTF-8 reaches Python as lone surrogates, which a strict UTF-8
    stream refuses: a workspace path or a payload name would then end a command half-way.
    Process-wide, like the freeze: set for the console script's own streams only.
    """
    codecs.register_error(ESCAPES, _escape)
    for stream in (sys.stdout, sys.stderr):
        # stderr's default is backslashreplace (a surrogate as \udcff): escaped the same way as stdout.
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "backslashreplace"):
            stream.reconfigure(errors=ESCAPES)


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
    _printable_output()
    load_commands().httk()


def taskmanager() -> None:
    """``httk-taskmanager``: the alias tree."""
    _printable_output()
    load_commands().taskmanager()
