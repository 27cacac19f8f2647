"""Applying a transactional outcome's data operations exactly once.

The whole manifest is validated before anything changes (operation ids
``op-NNNN``, unique; destinations relative without ``..`` or control characters;
each put's staged source exactly ``files/<id>``, present, and only regular files and directories
(no symlink, FIFO or socket), so nothing outside
the outcome is copied and no link can lead a later put out of the data tree).
No name below the job's data directory or the attempt control directory that
an operation touches may be a symbolic link (the runner can write both trees):
such an outcome is refused with :class:`~.links.UntrustedLink` before anything
changes, so no rename, copy or ledger entry lands outside them.
Operations then run in manifest order, each ledgered in the attempt control
directory (a put just before its staged copy takes the destination's name, a
remove after its move); a replaced tree is moved to the job's trash, not
deleted. A replay after a crash redoes only unledgered operations and
recognizes what a crashed operation already did, so the result is the same
the second time. Spec: 001 "Data and workdir changes".
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

from ..domain.model import control_character
from ..ports import Filesystem
from .layout import Layout
from .links import refuse_links

_OP_ID = re.compile(r"^op-[0-9]{4,}$")


class TransactionError(ValueError):
    """A manifest that cannot be applied; nothing was changed when validation refuses it."""


def _safe_destination(destination: Any) -> str:
    if not isinstance(destination, str) or not destination or destination.startswith("/"):
        raise TransactionError(f"invalid destination {destination!r}: expected a relative path")
    parts = [part for part in destination.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        raise TransactionError(f"invalid destination {destination!r}: '.' and '..' are not allowed")
    bad = control_character(destination)
    if bad is not None:
        # NUL would raise from the OS mid-commit; the SDK refuses the same rule at put()/remove().
        raise TransactionError(f"invalid destination {destination!r}: control character {bad!r} is not allowed")
    return "/".join(parts)


def _files_and_directories(fs: Filesystem, path: str, op_id: str) -> None:
    """A staged tree holds regular files and directories only: a FIFO or socket would block or fail mid-apply."""
    info = fs.lstat(path)
    if info is None:
        raise TransactionError(f"{op_id}: the staged source {path} does not exist")
    if info.is_symlink:
        raise TransactionError(f"{op_id}: the staged source {path} is a symbolic link")
    if not info.is_dir and not info.is_file:
        raise TransactionError(f"{op_id}: the staged source {path} is a FIFO, socket or device, not a regular file")
    if info.is_dir:
        for entry in fs.scandir(path):
            _files_and_directories(fs, entry.path, op_id)


def validate(fs: Filesystem, staged_root: str, operations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checked operations (``id``, ``op``, ``destination``, ``source``, ``missing_ok``)."""
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for operation in operations:
        op_id = operation.get("id")
        if not isinstance(op_id, str) or not _OP_ID.match(op_id):
            raise TransactionError(f"invalid operation id {op_id!r}: expected op-NNNN")
        if op_id in seen:
            raise TransactionError(f"duplicate operation id {op_id!r}")
        seen.add(op_id)
        kind = operation.get("op")
        destination = _safe_destination(operation.get("destination"))
        if kind == "put":
            if operation.get("source") != f"files/{op_id}":
                raise TransactionError(f"{op_id}: the staged source must be files/{op_id}")
            refuse_links(fs, staged_root, f"{staged_root}/files/{op_id}", context=f"{op_id}: ")
            _files_and_directories(fs, f"{staged_root}/files/{op_id}", op_id)
            checked.append({"id": op_id, "op": kind, "destination": destination, "source": f"files/{op_id}"})
        elif kind == "remove":
            checked.append({"id": op_id, "op": kind, "destination": destination,
                            "missing_ok": bool(operation.get("missing_ok"))})
        else:
            raise TransactionError(f"{op_id}: unknown operation {kind!r}; expected put or remove")
    return checked


def apply_transaction(
    fs: Filesystem,
    layout: Layout,
    job_id: str,
    control: str,
    operations: Sequence[dict[str, Any]],
    *,
    durable: bool,
) -> int:
    """Validate, then apply every unledgered operation; returns how many were applied now."""
    data_root = layout.data_dir(job_id)
    data = f"{data_root}/current"
    trash = f"{data_root}/trash/{posixpath.basename(control)}"
    ledger = f"{control}/commit/ops"
    staged_root = f"{control}/outcome.ready/transaction"
    # Every name an operation reads, moves or writes is checked before the first change.
    refuse_links(fs, posixpath.dirname(control), staged_root, ledger)
    checked = validate(fs, staged_root, operations)
    for operation in checked:
        op_id, destination = operation["id"], f"{data}/{operation['destination']}"
        refuse_links(fs, ledger, f"{ledger}/{op_id}", context=f"{op_id}: ")
        refuse_links(fs, data_root, destination, _temp_of(destination, op_id), f"{trash}/{op_id}",
                     context=f"{op_id}: ")
    put_before: set[str] = set()
    for operation in checked:
        # A remove that cannot succeed is refused before anything changes.
        if (operation["op"] == "remove" and not operation["missing_ok"]
                and operation["destination"] not in put_before
                and not fs.exists(f"{ledger}/{operation['id']}")
                and fs.lstat(f"{trash}/{operation['id']}") is None
                and fs.lstat(f"{data}/{operation['destination']}") is None):
            raise TransactionError(
                f"{operation['id']}: remove of missing {operation['destination']!r} without missing_ok"
            )
        if operation["op"] == "put":
            put_before.add(operation["destination"])
    fs.makedirs(data, durable=durable)
    applied = 0
    for operation in checked:
        op_id = operation["id"]
        destination = f"{data}/{operation['destination']}"
        temp = _temp_of(destination, op_id)
        if fs.exists(f"{ledger}/{op_id}"):
            if operation["op"] == "put" and fs.lstat(temp) is not None:
                # Ledgered but not renamed: a crash fell between the two, and the copy is complete.
                fs.rename(temp, destination, durable=durable)
                applied += 1
            continue
        trashed = f"{trash}/{op_id}"
        # A trashed copy means a crashed run of this operation already moved the old tree away.
        moved = fs.lstat(trashed) is not None
        if operation["op"] == "put":
            fs.rmtree(temp)
            fs.copy_tree(f"{staged_root}/{operation['source']}", temp, durable=durable)
            if not moved and fs.lstat(destination) is not None:
                fs.rename(destination, trashed, durable=durable)
            # Ledgered before the rename: whatever holds the destination's name after a crash from here
            # on is this put's own copy, never an old tree to move to the trash.
            fs.write_atomic(f"{ledger}/{op_id}", b"", durable=durable)
            fs.rename(temp, destination, durable=durable)
        else:
            if not moved and fs.lstat(destination) is not None:
                fs.rename(destination, trashed, durable=durable)
            elif not moved and not operation["missing_ok"]:
                raise TransactionError(
                    f"{op_id}: remove of missing {operation['destination']!r} without missing_ok"
                )
            fs.write_atomic(f"{ledger}/{op_id}", b"", durable=durable)
        applied += 1
    return applied


def _temp_of(destination: str, op_id: str) -> str:
    """The staging name of a put's copy, beside its destination (so the final rename stays in one directory)."""
    return f"{posixpath.dirname(destination)}/.{posixpath.basename(destination)}.{op_id}.tmp"
