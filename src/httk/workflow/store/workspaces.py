"""Workspace creation and attachment: the control tree, format.json, policy, settings.

``format.json`` is written once at init and rewritten only by a policy change
(atomically; concurrent policy writers are not serialized, last writer wins, as
the spec says). A path that is not a workspace is refused with the fix named.
Spec: 000 "Initialize a workspace", "Workspace policy", "Application settings".
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import attrs

from .. import codec
from ..domain.lifecycle import StateKind
from ..domain.model import ValidationError, check_tag
from ..ports import BatchSystemError, Clock, Filesystem, Ids, UnreadableDocument, unreadable
from . import policy as policy_rules
from .layout import Layout
from .markers import shown, undecodable
from .store import Store, StoreConfig

REQUEST_DIRS = ("tmp", "ready", "claimed", "applied", "retired", "quarantine")
#: Set by the forwarding side in a command it runs on a remote: that remote's name, as its user calls
#: it. Fix hints then name workspaces ``REMOTE:PATH``, so the command they give runs where it must.
FORWARDED_ENV = "HTTK_WORKFLOW_FORWARDED_AS"
#: Set with it when the forwarding side sent local files first: where each came from
#: (:func:`~httk.workflow.operations.remote_staging.uploaded_document`).
UPLOADED_ENV = "HTTK_WORKFLOW_UPLOADED"


def spelled(remote: str | None, path: str) -> str:
    """How a fix hint names the workspace ``path``: ``REMOTE:PATH`` in a command forwarded as ``remote``."""
    return f"{remote}:{path}" if remote else path


class WorkspaceError(Exception):
    """A workspace that cannot be created or attached; the message names the path and the fix."""


def _json_boolean(value: Any) -> None:
    # Read as given, a string "false" would be truthy and make a throwaway workspace durable (or
    # the reverse): refuse anything but a JSON boolean rather than guess.
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {codec.type_name(value)} {codec.dumps(value)[:40]}; "
                         "write it as a JSON boolean")


@attrs.frozen
class WorkspaceDocument:
    """``.httk-workflow/format.json`` (``httk-workflow-workspace`` v1); its policy is checked by :mod:`.policy`."""

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-workspace", 1)

    workspace_id: str
    name: str | None = None
    durable: Annotated[Any, _json_boolean] = True
    created_at: float | None = None
    policy: dict[str, Any] | None = None


@attrs.frozen
class Ports:
    fs: Filesystem
    clock: Clock
    ids: Ids
    #: Judges a setting an installed batch system owns (``slurm.*``) when it is written, raising
    #: ``BatchSystemError``; the composition root supplies it, since services never see an adapter.
    check_setting: Callable[[str, Any], None] | None = None
    #: Whether this interpreter can import a top-level module (a spec, else ``None``; nothing is
    #: imported): the language checks ask it. ``None``: nothing to ask, and they say they cannot tell.
    find_module: Callable[[str], Any] | None = None


class WorkspaceHandle:
    """One attached workspace: its layout, format document and store."""

    def __init__(self, ports: Ports, layout: Layout, document: dict[str, Any], *, remote: str | None = None) -> None:
        self.ports = ports
        self.fs = ports.fs
        self.layout = layout
        self.document = document
        #: The remote this workspace is reached as when the command was forwarded here, else ``None``.
        self.remote = remote
        self._store: Store | None = None

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def reference(self) -> str:
        """The workspace as a fix hint names it: its path, ``REMOTE:PATH`` in a forwarded command."""
        return spelled(self.remote, self.layout.root)

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
        """The settings; a settings.json that is no small regular file is a ``DocumentError``, never a hang."""
        path = self.layout.settings_file
        try:
            data = self.fs.read_document(path)
        except FileNotFoundError:
            return {}
        except OSError as error:
            problem = error.problem if isinstance(error, UnreadableDocument) else f"cannot be read: {error.strerror}"
            raise codec.DocumentError(path, "$", problem) from None
        return codec.decode_object(data, path)

    def set_setting(self, name: str, value: Any) -> None:
        """Validate and store one setting; a refused one leaves settings.json as it was."""
        policy_rules.check_setting_name(name)
        policy_rules.check_setting_value(name, value)
        policy_rules.check_engine_setting(name, value)
        if self.ports.check_setting is not None:
            try:
                self.ports.check_setting(name, value)
            except BatchSystemError as error:
                raise policy_rules.PolicyError(str(error)) from None
        settings = self.settings()
        policy_rules.check_setting_env_name(name, settings)
        settings[name] = value
        self.fs.write_atomic(self.layout.settings_file, codec.encode(settings), durable=self.durable)

    def unset_setting(self, name: str) -> bool:
        settings = self.settings()
        if name not in settings:
            return False
        del settings[name]
        self.fs.write_atomic(self.layout.settings_file, codec.encode(settings), durable=self.durable)
        return True


def suggest_tag(text: str) -> str:
    """A valid tag close to ``text`` (lower-cased, other characters as '-'), for a refusal's hint."""
    tag = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9._-]", "-", text.lower())).strip("-._")[:48]
    return tag or "runs"


def workspace_name(root: str, name: str | None) -> str:
    """The name a new workspace at ``root`` gets, checked before anything is written.

    Without ``name`` it is the directory's basename, which need not be a valid tag
    (``Runs``); the refusal then names ``--name NAME`` as the fix.
    """
    chosen = name or posixpath.basename(root)
    try:
        return check_tag(chosen, "workspace name")
    except ValidationError as error:
        if name is not None:
            raise WorkspaceError(str(error)) from None
        raise WorkspaceError(
            f"{error}; the name defaults to the directory's basename: give --name NAME "
            f"(e.g. --name {suggest_tag(chosen)})"
        ) from None


class WorkspaceService:
    """Creates and attaches workspaces through the ports."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports

    def init(
        self, path: str, *, name: str | None = None, durable: bool = True, remote: str | None = None
    ) -> WorkspaceHandle:
        """Create the control tree, or adopt an existing workspace at ``path`` unchanged (``remote``: :meth:`open`)."""
        fs = self.ports.fs
        layout = Layout.at(path)
        if fs.exists(layout.format_file):
            return self.open(path, remote=remote)
        if undecodable(layout.root):
            # The registry, a transfer's ledgers and every report record the root: none can hold such a byte.
            raise WorkspaceError(f"{shown(layout.root)}: the path is not UTF-8, which no workspace document can "
                                 "record; choose a path whose names are UTF-8")
        info = fs.lstat(layout.root)
        if info is not None and not info.is_dir:
            raise WorkspaceError(f"{layout.root}: exists and is not a directory; choose another path")
        chosen = workspace_name(layout.root, name)
        document = codec.unstructure(WorkspaceDocument(
            workspace_id=self.ports.ids.new_id(),
            name=chosen,
            durable=durable,
            created_at=self.ports.clock.now(),
            policy=policy_rules.validate_policy({}),
        ))
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
            return self.open(path, remote=remote)
        return WorkspaceHandle(self.ports, layout, document, remote=remote)

    def open(self, path: str, *, remote: str | None = None) -> WorkspaceHandle:
        """Attach the workspace at ``path``; ``remote``: the command was forwarded here as that remote.

        A forwarded command's refusals and fix hints then name the workspace
        ``REMOTE:PATH`` (:attr:`WorkspaceHandle.reference`), as the user must type it.
        """
        fs = self.ports.fs
        layout = Layout.at(path)
        try:
            data = fs.read_document(layout.format_file)
        except FileNotFoundError:
            where = spelled(remote, layout.root)
            raise WorkspaceError(
                f"{where}: not an httk-workflow workspace (no .httk-workflow/format.json); "
                f"create it with 'httk workflow workspace init {where}'"
            ) from None
        except OSError as error:
            # A directory, FIFO, symlink or oversized file is refused unread: opening one never blocks.
            raise WorkspaceError(f"{unreadable(layout.format_file, error)}; restore it as a regular file") from None
        document = codec.decode_object(data, layout.format_file)
        try:
            record = codec.structure(document, WorkspaceDocument, layout.format_file)
        except codec.DocumentError as error:
            raise WorkspaceError(str(error)) from None
        try:
            document["policy"] = policy_rules.validate_policy(record.policy or {})
        except policy_rules.PolicyError as error:
            raise WorkspaceError(f"{layout.format_file}: {error}") from None
        return WorkspaceHandle(self.ports, layout, document, remote=remote)
