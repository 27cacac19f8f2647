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
directory (a put's entry is created exclusively just before its private copy,
``commit/copies/<op-id>.<applier>``, takes the destination's name, and names that
copy; a remove's after its move); a replaced tree is moved to the job's trash,
not deleted. A replay after a crash redoes only unledgered operations and
recognizes what a crashed operation already did, so the result is the same
the second time; and because a mistaken lease expiry can make two managers
apply one commit at the same moment, that holds for concurrent replays too
(:class:`_Operation`). Spec: 001 "Data and workdir changes"; 000 "Clocks".
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

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
    applier: str,
    between: Callable[[], None] | None = None,
) -> int:
    """Validate, then apply every unledgered operation; returns how many were applied now.

    ``applier`` names this run among the concurrent ones a mistaken lease expiry can
    start (a file-name-safe token, unique per manager and commit): it names this run's
    private copies. ``between`` is called before each operation (a heartbeat, and the
    check that this manager still holds the commit).
    """
    if not _APPLIER.match(applier):
        raise ValueError(f"invalid applier token {applier!r}")
    data_root = layout.data_dir(job_id)
    data = f"{data_root}/current"
    trash = f"{data_root}/trash/{posixpath.basename(control)}"
    ledger = f"{control}/commit/ops"
    copies = f"{control}/commit/copies"
    staged_root = f"{control}/outcome.ready/transaction"
    # Every name an operation reads, moves or writes is checked before the first change.
    refuse_links(fs, posixpath.dirname(control), staged_root, ledger, copies)
    checked = validate(fs, staged_root, operations)
    for operation in checked:
        op_id, destination = operation["id"], f"{data}/{operation['destination']}"
        refuse_links(fs, ledger, f"{ledger}/{op_id}", context=f"{op_id}: ")
        refuse_links(fs, data_root, destination, _temp_of(destination, op_id), f"{trash}/{op_id}",
                     context=f"{op_id}: ")
    put_before: set[str] = set()
    for operation in checked:
        # A remove that cannot succeed is refused before anything changes. The names are read in the
        # reverse order of a remove's own steps (move to the trash, then ledger), so a concurrent
        # applier's move between two reads is never mistaken for a missing tree.
        if (operation["op"] == "remove" and not operation["missing_ok"]
                and operation["destination"] not in put_before
                and fs.lstat(f"{data}/{operation['destination']}") is None
                and fs.lstat(f"{trash}/{operation['id']}") is None
                and not fs.exists(f"{ledger}/{operation['id']}")):
            raise TransactionError(
                f"{operation['id']}: remove of missing {operation['destination']!r} without missing_ok"
            )
        if operation["op"] == "put":
            put_before.add(operation["destination"])
    fs.makedirs(data, durable=durable)
    applied = 0
    for operation in checked:
        if between is not None:
            between()
        op = _Operation(fs, operation, f"{data}/{operation['destination']}", f"{ledger}/{operation['id']}",
                        f"{trash}/{operation['id']}", durable)
        if operation["op"] == "put":
            applied += op.put(f"{staged_root}/{operation['source']}", copies, applier)
        else:
            applied += op.remove(operation["missing_ok"])
    return applied


#: An applier token: one file-name component (a manager id and the commit's marker generation).
_APPLIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@attrs.frozen
class _Operation:
    """One data operation's names, and its steps written so that any number of appliers may run them at once.

    Two managers can apply one commit concurrently (a lease is evidence, not a
    fence). Every step is then either done once or recognized as done by the other:
    each applier copies into its own private name; the old tree goes to the trash by
    a rename that never replaces, so only the first applier moves it; a put's ledger
    entry is created exclusively and names the one copy that will take the
    destination's name, so exactly one rename of exactly one copy fills it. An
    ``ENOENT`` or ``EEXIST`` on a step another applier just did is read that way.
    """

    fs: Filesystem
    operation: dict[str, Any]
    destination: str
    entry: str  # the ledger entry
    trashed: str
    durable: bool

    def put(self, source: str, copies: str, applier: str) -> int:
        """Copy ``source`` privately, trash the replaced tree, claim the ledger entry, rename the copy in place."""
        fs, op_id = self.fs, self.operation["id"]
        if fs.lstat(self.entry) is not None:
            return self._finish_put(copies)
        name = f"{op_id}.{applier}"
        mine = f"{copies}/{name}"
        fs.rmtree(mine)  # a run of this same applier that a contained fault interrupted
        fs.copy_tree(source, mine, durable=self.durable)
        self._trash_replaced()
        try:
            # Created exclusively just before the rename: from here on whatever holds the destination's
            # name is this put's own copy, never an old tree to trash, whoever renames it.
            fs.write_new(self.entry, name.encode(), durable=self.durable)
        except FileExistsError:
            fs.rmtree(mine)  # another applier claimed the operation first; its copy is the one
            return self._finish_put(copies)
        try:
            fs.rename(mine, self.destination, durable=self.durable)
        except FileNotFoundError:
            pass  # another applier finishing this claimed put renamed the copy already
        return 1

    def _finish_put(self, copies: str) -> int:
        """Rename the copy the ledger entry names onto the destination, unless that happened already."""
        fs, op_id = self.fs, self.operation["id"]
        try:
            name = fs.read_document(self.entry).decode("ascii")
        except UnicodeDecodeError:
            name = "?"
        if name and not (name.startswith(f"{op_id}.") and _APPLIER.match(name)):
            raise TransactionError(f"{op_id}: the ledger entry {self.entry} names no copy of this operation")
        # An empty entry was written by a manager that staged beside the destination.
        copy = f"{copies}/{name}" if name else _temp_of(self.destination, op_id)
        if fs.lstat(copy) is None:
            return 0  # renamed into place already
        try:
            fs.rename(copy, self.destination, durable=self.durable)
        except FileNotFoundError:
            return 0  # a concurrent applier renamed it between the two calls
        return 1

    def remove(self, missing_ok: bool) -> int:
        """Move the destination to the trash, then ledger the removal."""
        fs, op_id = self.fs, self.operation["id"]
        if fs.lstat(self.entry) is not None:
            return 0
        self._trash_replaced()
        if (fs.lstat(self.trashed) is None and not missing_ok and fs.lstat(self.entry) is None):
            raise TransactionError(
                f"{op_id}: remove of missing {self.operation['destination']!r} without missing_ok"
            )
        fs.write_atomic(self.entry, b"", durable=self.durable)
        return 1

    def _trash_replaced(self) -> None:
        """Move what holds the destination's name to the trash, unless another applier did or the operation is done.

        The destination is read before the ledger entry: a tree seen there before the
        operation is ledgered is the one it replaces, and a later one can take the
        name only after the entry exists. The rename never replaces, so a tree that
        took the name after another applier trashed the old one stays where it is.
        """
        fs = self.fs
        if fs.lstat(self.destination) is None or fs.lstat(self.entry) is not None:
            return
        try:
            fs.rename(self.destination, self.trashed, durable=self.durable)
        except FileExistsError:
            pass  # another applier trashed the replaced tree first
        except FileNotFoundError:
            pass  # another applier moved it meanwhile (the port makes a missing trash directory itself)


def _temp_of(destination: str, op_id: str) -> str:
    """Where a manager before private copies staged a put, beside its destination (named by an empty entry)."""
    return f"{posixpath.dirname(destination)}/.{posixpath.basename(destination)}.{op_id}.tmp"
