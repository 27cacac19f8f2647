"""Workspace creation and attachment: the control tree, format.json, policy, settings.

``format.json`` is written once at init and rewritten only by a policy change
(atomically; concurrent policy writers are not serialized, last writer wins, as
the spec says). A path that is not a workspace is refused with the fix named.
Spec: 000 "Initialize a workspace", "Workspace policy", "Application settings".
"""

from __future__ import annotations

import posixpath
from typing import Any

import attrs

from .. import codec
from ..domain.lifecycle import StateKind
from ..ports import Clock, Filesystem, Ids
from . import policy as policy_rules
from .layout import Layout
from .store import Store, StoreConfig

WORKSPACE_FORMAT = "httk-workflow-workspace"
REQUEST_DIRS = ("tmp", "ready", "claimed", "applied", "retired", "quarantine")


class WorkspaceError(Exception):
    """A workspace that cannot be created or attached; the message names the path and the fix."""


@attrs.frozen
class Ports:
    fs: Filesystem
    clock: Clock
    ids: Ids


class WorkspaceHandle:
    """One attached workspace: its layout, format document and store."""

    def __init__(self, ports: Ports, layout: Layout, document: dict[str, Any]) -> None:
        self.ports = ports
        self.fs = ports.fs
        self.layout = layout
        self.document = document
        self._store: Store | None = None

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def workspace_id(self) -> str:
        return str(self.document["workspace_id"])

    @property
    def name(self) -> str:
        return str(self.document.get("name") or posixpath.basename(self.layout.root))

    @property
    def durable(self) -> bool:
        return bool(self.document.get("durable", True))

    @property
    def policy(self) -> dict[str, Any]:
        return dict(self.document["policy"])

    @property
    def store(self) -> Store:
        if self._store is None:
            policy = self.policy
            config = StoreConfig(
                workspace_id=self.workspace_id,
                durable=self.durable,
                segment_bytes=int(policy["journal_segment_bytes"]),
                deadline_seconds=float(policy["visibility_deadline_seconds"]),
            )
            self._store = Store(self.fs, self.layout, config, self.ports.clock, self.ports.ids.new_hex(12))
        return self._store

    # -- policy ------------------------------------------------------------------------------
    def set_policy(self, key: str, value: Any) -> dict[str, Any]:
        """Validate and store one policy value; returns the whole new policy."""
        new_policy = policy_rules.set_policy_value(self.policy, key, value)
        document = {**self.document, "policy": new_policy}
        self.fs.write_atomic(self.layout.format_file, codec.encode(document), durable=self.durable)
        self.document = document
        return new_policy

    # -- settings ----------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        try:
            data = self.fs.read_bytes(self.layout.settings_file)
        except FileNotFoundError:
            return {}
        return codec.decode_object(data, self.layout.settings_file)

    def set_setting(self, name: str, value: Any) -> None:
        policy_rules.check_setting_name(name)
        settings = self.settings()
        settings[name] = value
        self.fs.write_atomic(self.layout.settings_file, codec.encode(settings), durable=self.durable)

    def unset_setting(self, name: str) -> bool:
        settings = self.settings()
        if name not in settings:
            return False
        del settings[name]
        self.fs.write_atomic(self.layout.settings_file, codec.encode(settings), durable=self.durable)
        return True


class WorkspaceService:
    """Creates and attaches workspaces through the ports."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports

    def init(self, path: str, *, name: str | None = None, durable: bool = True) -> WorkspaceHandle:
        """Create the control tree, or adopt an existing workspace at ``path`` unchanged."""
        fs = self.ports.fs
        layout = Layout.at(path)
        if fs.exists(layout.format_file):
            return self.open(path)
        info = fs.lstat(layout.root)
        if info is not None and not info.is_dir:
            raise WorkspaceError(f"{layout.root}: exists and is not a directory; choose another path")
        document = {
            "format": WORKSPACE_FORMAT,
            "format_version": 1,
            "workspace_id": self.ports.ids.new_id(),
            "name": name or posixpath.basename(layout.root),
            "durable": durable,
            "created_at": self.ports.clock.now(),
            "policy": policy_rules.validate_policy({}),
        }
        for kind in StateKind:
            fs.makedirs(layout.kind_dir(kind))
        for directory in (layout.journal, layout.runners, layout.attempts, layout.managers, layout.tmp):
            fs.makedirs(directory)
        for sub in REQUEST_DIRS:
            fs.makedirs(f"{layout.requests}/{sub}")
        if durable:
            fs.sync_tree(layout.control)
            fs.fsync_dir(layout.root)
        # format.json last: its presence is what makes the directory a workspace.
        try:
            fs.write_new(layout.format_file, codec.encode(document), durable=durable)
        except FileExistsError:
            return self.open(path)
        return WorkspaceHandle(self.ports, layout, document)

    def open(self, path: str) -> WorkspaceHandle:
        fs = self.ports.fs
        layout = Layout.at(path)
        try:
            data = fs.read_bytes(layout.format_file)
        except FileNotFoundError:
            raise WorkspaceError(
                f"{layout.root}: not an httk-workflow workspace (no .httk-workflow/format.json); "
                f"create it with 'httk workflow workspace init {layout.root}'"
            ) from None
        document = codec.decode_object(data, layout.format_file)
        if document.get("format") != WORKSPACE_FORMAT or document.get("format_version") != 1:
            raise WorkspaceError(f"{layout.format_file} @ $.format: not an {WORKSPACE_FORMAT} version 1 document")
        try:
            document["policy"] = policy_rules.validate_policy(document.get("policy", {}))
        except policy_rules.PolicyError as error:
            raise WorkspaceError(f"{layout.format_file}: {error}") from None
        if not isinstance(document.get("workspace_id"), str):
            raise WorkspaceError(f"{layout.format_file} @ $.workspace_id: expected string")
        return WorkspaceHandle(self.ports, layout, document)
