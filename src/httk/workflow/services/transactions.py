"""Applying a transactional outcome's data operations exactly once.

Operations run in manifest order, each ledgered in the attempt control
directory after it completes; a replaced tree is moved to the job's trash rather
than deleted, and a replay after a crash redoes only unledgered operations,
whose effect is the same the second time. Spec: 001 "Data and workdir changes".
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from ..ports import Filesystem
from .layout import Layout


class TransactionError(ValueError):
    """A manifest operation that cannot be applied."""


def _safe_destination(destination: Any) -> str:
    if not isinstance(destination, str) or not destination or destination.startswith("/"):
        raise TransactionError(f"invalid destination {destination!r}")
    parts = [part for part in destination.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise TransactionError(f"invalid destination {destination!r}")
    return "/".join(parts)


def apply_transaction(
    fs: Filesystem,
    layout: Layout,
    job_id: str,
    control: str,
    operations: Sequence[dict[str, Any]],
    *,
    durable: bool,
) -> int:
    """Apply every unledgered operation; returns how many were applied now."""
    data = f"{layout.data_dir(job_id)}/current"
    trash = f"{layout.data_dir(job_id)}/trash/{posixpath.basename(control)}"
    ledger = f"{control}/commit/ops"
    staged_root = f"{control}/outcome.ready/transaction"
    fs.makedirs(data)
    applied = 0
    for operation in operations:
        op_id = operation.get("id")
        if not isinstance(op_id, str) or "/" in op_id:
            raise TransactionError(f"invalid operation id {op_id!r}")
        if fs.exists(f"{ledger}/{op_id}"):
            continue
        destination = f"{data}/{_safe_destination(operation.get('destination'))}"
        if fs.lstat(destination) is not None:
            fs.rename(destination, f"{trash}/{op_id}", durable=durable)
        if operation.get("op") == "put":
            source = f"{staged_root}/{operation.get('source')}"
            temp = f"{posixpath.dirname(destination)}/.{posixpath.basename(destination)}.{op_id}.tmp"
            fs.rmtree(temp)
            fs.copy_tree(source, temp, durable=durable)
            fs.rename(temp, destination, durable=durable)
        elif operation.get("op") == "remove":
            if not operation.get("missing_ok") and not fs.exists(f"{trash}/{op_id}"):
                raise TransactionError(f"remove of missing {operation.get('destination')!r} without missing_ok")
        else:
            raise TransactionError(f"unknown operation {operation.get('op')!r}")
        fs.write_atomic(f"{ledger}/{op_id}", b"", durable=durable)
        applied += 1
    return applied
