"""This machine's workspace registry: names → paths, and the recorded default.

The registry is the command-line contract (a library caller constructs
``Workspace(path)`` directly). It is one small JSON document in the user's data
directory, rewritten atomically. The name ``default`` is always available: it
is the local default workspace as an omitted WORKSPACE resolves it (the
recorded default when one is recorded, else the per-user default), unless a
workspace is registered under that very name. Spec: 000 "Initialize a
workspace", "Running on a remote" (``transfer default kappa:runs``).
"""

from __future__ import annotations

from typing import Any

from .. import codec
from ..domain.model import ValidationError, check_tag
from ..ports import Filesystem

REGISTRY_FORMAT = "httk-workflow-registry"
#: The name that is always available: the local default workspace (see :meth:`Registry.entries`).
DEFAULT_NAME = "default"


class RegistryError(ValueError):
    """A registry operation that is refused; the message names the workspace and the fix."""


class Registry:
    """Registered workspace names of this user on this machine."""

    def __init__(self, fs: Filesystem, path: str, default_path: str) -> None:
        self.fs = fs
        self.path = path
        self.default_path = default_path

    def _read(self) -> dict[str, Any]:
        try:
            document = codec.decode_object(self.fs.read_bytes(self.path), self.path)
        except FileNotFoundError:
            return {"format": REGISTRY_FORMAT, "format_version": 1, "workspaces": {}, "default": None}
        if not isinstance(document.get("workspaces"), dict):
            raise RegistryError(f"{self.path} @ $.workspaces: expected an object; fix or remove the file")
        for name, path in document["workspaces"].items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise RegistryError(f"{self.path} @ $.workspaces.{name}: expected an absolute path; fix or remove it")
        if document.get("default") is not None and not isinstance(document.get("default"), str):
            raise RegistryError(f"{self.path} @ $.default: expected a workspace name or null")
        return document

    def _write(self, document: dict[str, Any]) -> None:
        self.fs.write_atomic(self.path, codec.encode(document), durable=True)

    def entries(self) -> dict[str, str]:
        """Every registered name with its path; ``default`` is always present.

        Unless a workspace is registered under the name ``default`` itself, that name is
        the local default workspace: the recorded default's path when one is recorded
        (and still registered), else the per-user default.
        """
        document = self._read()
        names = dict(document["workspaces"])
        if DEFAULT_NAME not in names:
            recorded = document.get("default")
            names[DEFAULT_NAME] = (names.get(recorded) if recorded else None) or self.default_path
        return dict(sorted(names.items()))

    def registered(self, name: str) -> bool:
        """Whether ``name`` is in the registry's own map (``default`` only when registered under that name)."""
        return name in self._read()["workspaces"]

    def lookup(self, name: str) -> str | None:
        return self.entries().get(name)

    def register(self, name: str, path: str) -> None:
        try:
            check_tag(name, "workspace name")
        except ValidationError as error:
            raise RegistryError(str(error)) from None
        document = self._read()
        existing = document["workspaces"].get(name)
        if existing is not None and existing != path:
            raise RegistryError(
                f"workspace name {name!r} is already registered for {existing}; "
                f"'httk workflow workspace forget {name}' first or choose another --name"
            )
        document["workspaces"][name] = path
        self._write(document)

    def forget(self, name: str) -> str:
        document = self._read()
        path = document["workspaces"].pop(name, None)
        if path is None:
            raise RegistryError(f"no workspace named {name!r} is registered; see 'httk workflow workspace list'")
        if document.get("default") == name:
            document["default"] = None
        self._write(document)
        return str(path)

    def name_of(self, path: str) -> str | None:
        """The name registered for ``path``; ``default`` only when no registered name has it."""
        entries = self.entries()
        for name, registered in entries.items():
            if registered == path and (name != DEFAULT_NAME or self.registered(name)):
                return name
        return DEFAULT_NAME if entries[DEFAULT_NAME] == path else None

    def default(self) -> str | None:
        """The recorded default name, if one was set with ``workspace default NAME``."""
        return self._read().get("default")

    def set_default(self, name: str | None) -> None:
        """Record ``name`` as the default; ``default`` (unless registered by that name) means the per-user one."""
        if name == DEFAULT_NAME and not self.registered(name):
            name = None
        if name is not None and self.lookup(name) is None:
            raise RegistryError(f"no workspace named {name!r} is registered; see 'httk workflow workspace list'")
        document = self._read()
        document["default"] = name
        self._write(document)
