"""Shared file helpers of the VASP package: atomic text/JSON publication and path coercion."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.runner_env import durable_from_env

PathLike = str | os.PathLike[str]


def write_text(path: PathLike, text: str) -> None:
    """Publish ``text`` (UTF-8) at ``path`` all-or-nothing, so a killed runner never leaves half an INCAR."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: PathLike, data: bytes) -> None:
    """Publish ``data`` at ``path`` all-or-nothing (the POSIX filesystem adapter, durable as the runner's workspace)."""
    PosixFilesystem().write_atomic(os.path.abspath(path), data, durable=durable_from_env())


def write_json(path: PathLike, document: Any) -> None:
    """Publish ``document`` as indented, key-sorted JSON with a trailing newline."""
    write_text(path, json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_text(path: PathLike) -> str:
    """Read a VASP text file; undecodable bytes are replaced because VASP files are ASCII by convention."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def in_workdir(workdir: PathLike, path: PathLike) -> Path:
    """``path`` resolved against ``workdir`` when relative."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else Path(workdir) / candidate
