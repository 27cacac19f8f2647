"""Runner-side atomic file publication on the real filesystem.

The SDK runs inside runner processes, outside the manager's composition root,
so it publishes with these few functions instead of a filesystem port. Every
publication is temp + fsync + rename + fsync-dir (fsyncs skipped when not
durable), so a reader sees all of a document or none of it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(os.fspath(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Publish ``data`` at ``path`` all-or-nothing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.tmp.{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(target.parent)


def sync_tree(path: str | os.PathLike[str]) -> None:
    """fsync every file and directory below ``path`` (before a durable rename of the tree)."""
    root = os.fspath(path)
    for current, _dirs, files in os.walk(root):
        for name in files:
            file_path = os.path.join(current, name)
            if os.path.islink(file_path):
                continue
            fd = os.open(file_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(current)


def durable_from_env(default: bool = True) -> bool:
    value = os.environ.get("HTTK_WORKFLOW_DURABLE")
    if value is None:
        return default
    return value not in ("0", "false", "no", "")
