"""The click application context: the container and how a command finds its workspace.

The root group puts one :class:`AppContext` in ``ctx.obj`` unless a test already
supplied one (``CliRunner().invoke(httk, args, obj=AppContext(container))``); a
bare container there would break ``make_pass_decorator``, and ``ensure_object``
would silently replace a test's container. Either way it then points the
container's configuration at this invocation's homes (:meth:`AppContext.configure`).
Commands take their services from the container through this context (the
workspace service, both registries, a remote's session), never by building
them. ARCHITECTURE.md rule 4.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import click

from ..bootstrap import Container, default_container, remote_adapters
from ..operations.remote_reference import split_reference
from ..store.workspaces import (
    FORWARDED_ENV,
    UPLOADED_ENV,
    WorkspaceError,
    WorkspaceHandle,
    WorkspaceService,
    spelled,
)
from .defaults import default_workspace_path, registry_path, remotes_dir

if TYPE_CHECKING:
    from ..operations.forwarding import RemoteSession
    from ..operations.registry import Registry
    from ..operations.remotes import RemoteRegistry


def _environ() -> Mapping[str, str]:
    # The live mapping, not a copy: CliRunner(env=...) patches os.environ for one invocation.
    return os.environ


@attrs.define
class AppContext:
    """What every command receives: the container and the process environment."""

    container: Container = attrs.field(factory=default_container)
    environ: Mapping[str, str] = attrs.field(factory=_environ)

    def configure(self) -> None:
        """Set the container's registry paths from this invocation's environment (read once per command)."""
        self.container.config.from_dict({
            "registry_path": registry_path(self.environ),
            "remotes_dir": remotes_dir(self.environ),
            "default_workspace": self.default_workspace(),
        })

    @property
    def workspaces(self) -> WorkspaceService:
        return self.container.workspaces()

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the current directory (the ports take absolute paths)."""
        return os.path.abspath(os.path.expanduser(path))

    def default_workspace(self) -> str:
        return default_workspace_path(self.environ)

    @property
    def registry(self) -> Registry:
        """This machine's workspace names."""
        return self.container.registry()

    @property
    def remotes(self) -> RemoteRegistry:
        """The configured remotes."""
        return self.container.remote_registry()

    def open_session(self, name: str) -> RemoteSession:
        """The configured remote ``name`` with its adapters (connected on first use)."""
        from ..operations.forwarding import RemoteSession  # only remote commands open a session

        remote = self.remotes.get(name)
        transport, batch = remote_adapters(self.container, remote)
        return RemoteSession(remote, transport, batch)

    @property
    def forwarded_as(self) -> str | None:
        """The remote name this command was forwarded here as (its fix hints say ``REMOTE:``), else ``None``."""
        return self.environ.get(FORWARDED_ENV) or None

    def origin(self, path: str) -> str:
        """How a record names the local file ``path``: in a forwarded command, a file sent with it is named
        by its path on the machine that sent it (``HTTK_WORKFLOW_UPLOADED``); any other path as it is."""
        from ..operations.remote_staging import uploaded_origin

        return uploaded_origin(self.environ.get(UPLOADED_ENV, ""), path, os.path.realpath)

    def resolve(self, reference: str | None) -> str:
        """A workspace argument as an absolute path: a path, a registered name, or the default.

        The name ``default`` is the local default exactly as an omitted argument resolves it
        (the recorded default, else the per-user default), unless a workspace is registered
        under that name (:meth:`Registry.entries`): ``transfer default kappa:runs`` takes the
        job from where ``job new`` without WORKSPACE put it.
        """
        if reference is None:
            chosen = self.registry.default()
            return self.registry.lookup(chosen) or self.default_workspace() if chosen else self.default_workspace()
        # Decided from the text alone, before any local file is looked at (a local path with a colon: ./a:b).
        if split_reference(reference) is not None:
            raise WorkspaceError(
                f"{reference}: this command works on local workspaces only; run it on the remote itself, or "
                "'transfer' the jobs here (remotes: 'httk workflow remote list')"
            )
        looks_like_path = "/" in reference or reference in (".", "..") or os.path.exists(reference)
        if not looks_like_path:
            registered = self.registry.lookup(reference)
            if registered is not None:
                return registered
            remote = self.forwarded_as
            if remote:  # the user typed REMOTE:NAME, and REMOTE's registry is the one to list
                raise WorkspaceError(f"remote {remote}: {reference}: neither a directory nor a registered workspace "
                                     f"name there; see 'httk workflow workspace list {remote}:'")
            raise WorkspaceError(
                f"{reference}: neither a directory nor a registered workspace name; "
                f"see 'httk workflow workspace list'{self._remote_hint(reference)}"
            )
        return self.absolute(reference)

    def _remote_hint(self, name: str) -> str:
        """When ``name`` is a configured remote, how its workspaces are written (the colon is easily left out)."""
        try:
            configured = name in self.remotes.names()
        except OSError:  # no remotes directory, or one that may not be listed: nothing to suggest
            return ""
        return (f" ({name} is a configured remote: its default workspace is written '{name}:', one there '{name}:NAME')"
                if configured else "")

    def open_workspace(self, path: str | None, *, create: bool = False) -> WorkspaceHandle:
        """Attach a workspace; when omitted (or named ``default``), the recorded default or else the per-user default.

        The per-user default (omitted, or named by its path or ``default``) is created on first use
        by a caller that passes ``create``: the commands that write (submit, run, publish, a
        transfer's destination ...) and ``workflow list``/``show``, which create it on purpose
        because the workflow catalog lives in a workspace. Any other caller is refused with
        one line while it does not exist, and nothing is written (spec 000 "Checking and
        repairing", "Inspecting jobs").
        """
        resolved = self.resolve(path)
        if resolved == self.default_workspace():
            if create:
                return self.workspaces.init(resolved, remote=self.forwarded_as)
            if not os.path.lexists(resolved):
                raise WorkspaceError(
                    "the default workspace does not exist yet: nothing has been submitted; "
                    f"'httk workflow workspace init {spelled(self.forwarded_as, resolved)}' or a first "
                    "'job submit' creates it"
                )
        return self.workspaces.open(resolved, remote=self.forwarded_as)


pass_app = click.make_pass_decorator(AppContext)


def ensure_app(ctx: click.Context) -> AppContext:
    """Create the :class:`AppContext` in ``ctx.obj`` unless the caller supplied one."""
    if not isinstance(ctx.obj, AppContext):
        ctx.obj = AppContext()
    ctx.obj.configure()
    return ctx.obj
