"""The workspace runner store: content-addressed, named, pinned by digest.

``runners/objects/<sha256>/<basename>`` holds the bytes (a file or a tree) and
``runners/names/<name>.json`` maps a name to its digest. Resolution goes by
digest, so a job keeps its runner even after its name is replaced. Publishing
identical bytes is a no-op; different bytes under a used name need ``replace``.
Spec: 000 "Share one runner between many jobs".
"""

from __future__ import annotations

import posixpath
from typing import Any

from .. import codec
from ..ports import Filesystem
from .digests import fs_digest
from .layout import Layout


class RunnerStoreError(ValueError):
    """A publication that is refused; nothing was written."""


def check_runner_name(name: str) -> str:
    parts = [part for part in name.split("/") if part]
    if not parts or name.startswith("/") or any(part in (".", "..") for part in parts):
        raise RunnerStoreError(f"invalid runner name {name!r}: use a relative path such as 'defects/run.py'")
    return "/".join(parts)


def object_path(layout: Layout, sha256: str, name: str) -> str:
    return f"{layout.runners}/objects/{sha256}/{posixpath.basename(name)}"


def publish_runner(
    fs: Filesystem, layout: Layout, source: str, name: str, *, replace: bool = False, durable: bool = True
) -> dict[str, Any]:
    """Store ``source`` under ``name`` and return the reference to embed in job.json."""
    name = check_runner_name(name)
    info = fs.lstat(source)
    if info is None or info.is_symlink or not (info.is_file or info.is_dir):
        raise RunnerStoreError(f"{source}: not a regular file or directory to publish as a runner")
    sha256 = fs_digest(fs, source)
    index = f"{layout.runners}/names/{name}.json"
    try:
        existing = codec.decode_object(fs.read_bytes(index), index)
    except FileNotFoundError:
        existing = None
    if existing is not None and existing.get("sha256") != sha256 and not replace:
        raise RunnerStoreError(
            f"runner name {name!r} already holds different content (sha256 {existing.get('sha256')}); "
            "pass --replace (live jobs keep the digest they pinned)"
        )
    target = object_path(layout, sha256, name)
    if not fs.exists(target):
        fs.makedirs(posixpath.dirname(target), durable=durable)
        try:
            fs.copy_tree(source, target, durable=durable)
        except FileExistsError:
            pass
    reference = {"path": name, "sha256": sha256, "source": "workspace"}
    if existing is None or existing.get("sha256") != sha256:
        record = {**reference, "kind": "tree" if info.is_dir else "file"}
        fs.write_atomic(index, codec.encode(record), durable=durable)
    return reference
