"""What a test reads off a real directory to compare the disk before and after (a refusal writes nothing).

Imported by name (``from disk_support import ...``), like memory_support and cli_support.
"""

from __future__ import annotations

import os
from pathlib import Path


def names_below(path: str | Path) -> list[str]:
    """Every name below ``path``, relative to it, sorted."""
    out = []
    for current, dirs, files in os.walk(path):
        for name in dirs + files:
            out.append(os.path.relpath(os.path.join(current, name), path))
    return sorted(out)


def disk_snapshot(path: str | Path) -> dict[str, bytes | None]:
    """Every name below ``path`` with its bytes (``None`` for a directory)."""
    out: dict[str, bytes | None] = {}
    for current, dirs, files in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(current, name), path)] = None
        for name in files:
            full = os.path.join(current, name)
            out[os.path.relpath(full, path)] = Path(full).read_bytes()
    return out
