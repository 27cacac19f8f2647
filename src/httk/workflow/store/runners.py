"""Runner references: the workspace runner store, and resolving the runner a job names.

``runners/objects/<sha256>/<basename>`` holds the bytes (a file or a tree) and
``runners/names/<name>.json`` maps a name to its digest. Resolution goes by
digest, so a job keeps its runner even after its name is replaced. Publishing
identical bytes is a no-op; different bytes under a used name need ``replace``.

:func:`resolve_runner` is the one resolution rule the manager (at attempt start)
and ``precheck`` share: unresolvable, or refused by the safety property, is
``runner_unavailable``; resolvable with another digest is ``runner_mismatch``
(:func:`digest_mismatch`). Spec: 000 "Share one runner between many jobs", "Run".
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from .. import codec
from ..domain.model import Failure, control_character
from ..ports import Entry, FileStat, Filesystem, walk_tree
from ..protocol import JobSpec
from .digests import fs_digest
from .layout import Layout

#: Mode bits that let an account other than the owner change a file (group- or world-writable).
FOREIGN_WRITE = 0o022


class RunnerStoreError(ValueError):
    """A publication that is refused; nothing was written."""


class RunnerUnavailable(Exception):
    """The job's runner cannot be resolved, or may not be executed; ``failure`` is ``runner_unavailable``."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.failure = Failure("runner_unavailable", message, details or {})


def check_runner_name(name: str) -> str:
    parts = [part for part in name.split("/") if part]
    if not parts or name.startswith("/") or any(part in (".", "..") for part in parts):
        raise RunnerStoreError(f"invalid runner name {name!r}: use a relative path such as 'defects/run.py'")
    bad = control_character(name)
    if bad is not None:
        raise RunnerStoreError(
            f"invalid runner name {name!r}: control character {bad!r} is not allowed; use a name such as 'run.py'"
        )
    return "/".join(parts)


def object_path(layout: Layout, sha256: str, name: str) -> str:
    return f"{layout.runners}/objects/{sha256}/{posixpath.basename(name)}"


def stage_tree(fs: Filesystem, source: str, target: str, *, durable: bool = True) -> None:
    """Copy ``source``'s regular files (links read through) into ``target``, skipping caches and dot files.

    A runner directory is published from this staged copy, so its digest never depends on
    ``__pycache__`` or editor files that happen to sit in the source.
    """
    for name, entry in walk_tree(fs, source, _not_cache):
        if (not entry.is_dir or entry.is_symlink) and fs.exists(entry.path):
            fs.write_atomic(f"{target}/{name}", fs.read_bytes(entry.path), durable=durable)


def _not_cache(_name: str, entry: Entry) -> bool:
    return not (entry.name == "__pycache__" or entry.name.startswith(".") or entry.name.endswith(".pyc"))


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


def resolve_runner(
    fs: Filesystem, layout: Layout, payload: str, spec: JobSpec, search_paths: Sequence[str], *, uid: int
) -> str:
    """The path of the runner ``spec`` names, checked for account ``uid``; else :class:`RunnerUnavailable`.

    A payload runner falls under the safety property: every directory on its way
    below the payload and the runner itself are non-symlink entries owned by
    ``uid``, and the runner (every entry of a runner tree) is writable by no other
    account. A workspace runner resolves by its pinned digest, else through its
    store name, whose other digest the caller reports as ``runner_mismatch``.
    """
    source, path = spec.runner_source, spec.runner_path
    if source == "payload":
        return _payload_runner(fs, payload, path, uid)
    if source == "workspace":
        return _workspace_runner(fs, layout, path, spec.runner_sha256 or "")
    if not search_paths:
        raise RunnerUnavailable(f"installed runner {path!r} needs a --runner-search-path; this manager has none")
    looked = []
    for root in search_paths:
        candidate = f"{root.rstrip('/')}/{path}"
        info = fs.lstat(candidate)
        if info is not None and (info.is_file or info.is_dir):
            return candidate
        looked.append(f"{candidate} (a symbolic link)" if info is not None and info.is_symlink else candidate)
    raise RunnerUnavailable(f"installed runner {path!r} not found (looked at {', '.join(looked)})",
                            {"runner": spec.runner})


def _payload_runner(fs: Filesystem, payload: str, path: str, uid: int) -> str:
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts:  # '.' is the payload itself, whose job.json is no runner
        raise RunnerUnavailable(f"payload runner {path!r} names the payload directory itself; name a file or "
                                "directory inside the payload", {"runner_path": path})
    current = payload
    info: FileStat | None = None
    for index, part in enumerate(parts):
        current = f"{current}/{part}"
        info = fs.lstat(current)
        last = index == len(parts) - 1
        if info is None:
            raise RunnerUnavailable(f"payload runner {path!r} not found (looked at {payload}/{path})",
                                    {"runner_path": path})
        if info.is_symlink:
            what = "is a symbolic link" if last else f"is reached through the symbolic link {current}"
            raise RunnerUnavailable(
                f"payload runner {path!r} {what}; a payload runner must be a regular file or directory "
                "inside the payload (copy it in place of the link)", {"runner_path": path, "link": current})
        if not last and not info.is_dir:
            raise RunnerUnavailable(f"payload runner {path!r} not found ({current} is not a directory)",
                                    {"runner_path": path})
        if not last:
            _check_owner(info, current, path, uid)
    assert info is not None  # parts is not empty: the loop looked at least once
    if not (info.is_file or info.is_dir):  # a FIFO, socket or device
        raise RunnerUnavailable(f"payload runner {path!r} at {current} is not a regular file or directory",
                                {"runner_path": path})
    _check_runner_entry(fs, current, info, path, uid)
    return current


def _check_owner(info: FileStat, where: str, path: str, uid: int) -> None:
    if info.uid != uid:
        raise RunnerUnavailable(
            f"payload runner {path!r}: {where} is owned by uid {info.uid}, not by this account (uid {uid}); "
            "a manager runs only payloads of its own account (resubmit the job as this account)",
            {"runner_path": path, "path": where, "owner_uid": info.uid})


def _check_runner_entry(fs: Filesystem, where: str, info: FileStat, path: str, uid: int) -> None:
    """The runner, and every entry of a runner tree: ours, no link, writable by no other account."""
    _check_owner(info, where, path, uid)
    if info.mode & FOREIGN_WRITE:
        raise RunnerUnavailable(
            f"payload runner {path!r}: {where} is writable by group or others (mode {info.mode:#o}); "
            f"run 'chmod go-w {where}', then 'httk workflow job request WORKSPACE JOB continue'",
            {"runner_path": path, "path": where, "mode": info.mode})
    if not info.is_dir:
        return
    for entry in fs.scandir(where):
        inner = fs.lstat(entry.path)
        if inner is None:
            continue
        if inner.is_symlink:
            raise RunnerUnavailable(
                f"payload runner {path!r}: {entry.path} is a symbolic link; a runner tree may hold only "
                "regular files and directories", {"runner_path": path, "link": entry.path})
        _check_runner_entry(fs, entry.path, inner, path, uid)


def _workspace_runner(fs: Filesystem, layout: Layout, path: str, pinned: str) -> str:
    pinned_object = object_path(layout, pinned, path)
    info = fs.lstat(pinned_object)
    if info is not None and (info.is_file or info.is_dir):
        return pinned_object
    # The pinned bytes are gone: the name may still resolve, to other bytes (runner_mismatch).
    index = f"{layout.runners}/names/{path}.json"
    index_info = fs.lstat(index)
    if index_info is not None and index_info.is_file:
        try:
            record = codec.decode_object(fs.read_bytes(index), index)
        except (OSError, codec.DocumentError):
            record = {}
        stored = record.get("sha256")
        if isinstance(stored, str) and stored != pinned and "/" not in stored and stored not in (".", ".."):
            candidate = object_path(layout, stored, path)
            found = fs.lstat(candidate)
            if found is not None and (found.is_file or found.is_dir):
                return candidate
    raise RunnerUnavailable(
        f"workspace runner {path!r} with sha256 {pinned} is not in the workspace store (looked at "
        f"{pinned_object}); publish it with 'httk workflow runner publish FILE --workspace {layout.root} "
        f"--name {path}'", {"runner_path": path, "sha256": pinned})


def digest_mismatch(fs: Filesystem, path: str, spec: JobSpec) -> Failure | None:
    """``runner_mismatch`` when the runner at ``path`` lacks the digest ``spec`` pins, else ``None``."""
    if spec.runner_sha256 is None:
        return None
    actual = fs_digest(fs, path)
    if actual == spec.runner_sha256:
        return None
    return Failure(
        "runner_mismatch",
        f"{spec.runner_source} runner {spec.runner_path!r} has sha256 {actual}, the job pins {spec.runner_sha256}",
        {"expected": spec.runner_sha256, "actual": actual},
    )
