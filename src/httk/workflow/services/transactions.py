"""Applying a transactional outcome's data operations exactly once.

The whole manifest is validated before anything changes (operation ids
``op-NNNN``, unique; destinations relative without ``..``; each put's staged
source exactly ``files/<id>``, present, and free of symlinks, so nothing outside
the outcome is copied and no link can lead a later put out of the data tree).
Operations then run in manifest order, each ledgered in the attempt control
directory after it completes; a replaced tree is moved to the job's trash, not
deleted. A replay after a crash redoes only unledgered operations and
recognizes what a crashed operation already did, so the result is the same
the second time. Spec: 001 "Data and workdir changes".
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

from ..ports import Filesystem
from .layout import Layout

_OP_ID = re.compile(r"^op-[0-9]{4,}$")


class TransactionError(ValueError):
    """A manifest that cannot be applied; nothing was changed when validation refuses it."""


def _safe_destination(destination: Any) -> str:
    if not isinstance(destination, str) or not destination or destination.startswith("/"):
        raise TransactionError(f"invalid destination {destination!r}: expected a relative path")
    parts = [part for part in destination.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        raise TransactionError(f"invalid destination {destination!r}: '.' and '..' are not allowed")
    return "/".join(parts)


def _no_symlinks(fs: Filesystem, path: str, op_id: str) -> None:
    info = fs.lstat(path)
    if info is None:
        raise TransactionError(f"{op_id}: the staged source {path} does not exist")
    if info.is_symlink:
        raise TransactionError(f"{op_id}: the staged source {path} is a symbolic link")
    if info.is_dir:
        for entry in fs.scandir(path):
            _no_symlinks(fs, entry.path, op_id)


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
            _no_symlinks(fs, f"{staged_root}/files/{op_id}", op_id)
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
    data = f"{layout.data_dir(job_id)}/current"
    trash = f"{layout.data_dir(job_id)}/trash/{posixpath.basename(control)}"
    ledger = f"{control}/commit/ops"
    staged_root = f"{control}/outcome.ready/transaction"
    checked = validate(fs, staged_root, operations)
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
        if fs.exists(f"{ledger}/{op_id}"):
            continue
        destination = f"{data}/{operation['destination']}"
        trashed = f"{trash}/{op_id}"
        # A trashed copy means a crashed run of this operation already moved the old tree away.
        moved = fs.lstat(trashed) is not None
        if not moved and fs.lstat(destination) is not None:
            fs.rename(destination, trashed, durable=durable)
            moved = True
        if operation["op"] == "put":
            if fs.lstat(destination) is None:
                temp = f"{posixpath.dirname(destination)}/.{posixpath.basename(destination)}.{op_id}.tmp"
                fs.rmtree(temp)
                fs.copy_tree(f"{staged_root}/{operation['source']}", temp, durable=durable)
                fs.rename(temp, destination, durable=durable)
        elif not moved and not operation["missing_ok"]:
            raise TransactionError(f"{op_id}: remove of missing {operation['destination']!r} without missing_ok")
        fs.write_atomic(f"{ledger}/{op_id}", b"", durable=durable)
        applied += 1
    return applied
