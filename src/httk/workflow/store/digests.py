"""Runner and payload digests computed through the filesystem port.

Same definition as :func:`httk.workflow.protocol.tree_digest` (which runner-side
code uses on the real OS): a file's digest is the sha256 of its bytes; a
directory's is the sha256 of its sorted listing, excluding ``.httk-job/``.
"""

from __future__ import annotations

import hashlib

from ..ports import Filesystem
from ..protocol import PRIVATE_DIR


def fs_digest(fs: Filesystem, path: str) -> str:
    info = fs.lstat(path)
    if info is None:
        raise FileNotFoundError(path)
    if not info.is_dir:
        return hashlib.sha256(fs.read_bytes(path)).hexdigest()
    lines: list[str] = []
    _listing(fs, path, "", lines, top=True)
    lines.sort(key=lambda line: line[2:].split(" ", 1)[0])
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _listing(fs: Filesystem, directory: str, relative: str, lines: list[str], *, top: bool) -> None:
    for entry in fs.scandir(directory):
        if top and entry.name == PRIVATE_DIR:
            continue
        rel = f"{relative}/{entry.name}" if relative else entry.name
        if entry.is_symlink:
            lines.append(f"L {rel} {_readlink(fs, entry.path)}\n")
        elif entry.is_dir:
            lines.append(f"D {rel}\n")
            _listing(fs, entry.path, rel, lines, top=False)
        else:
            info = fs.lstat(entry.path)
            executable = "x" if info is not None and info.mode & 0o111 else "-"
            digest = hashlib.sha256(fs.read_bytes(entry.path)).hexdigest()
            lines.append(f"F {rel} {executable} {digest}\n")


def _readlink(fs: Filesystem, path: str) -> str:
    return fs.readlink(path)
