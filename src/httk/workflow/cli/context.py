"""The click application context: the container and how a command finds its workspace.

The root group puts one :class:`AppContext` in ``ctx.obj`` unless a test already
supplied one (``CliRunner().invoke(httk, args, obj=AppContext(container))``); a
bare container there would break ``make_pass_decorator``, and ``ensure_object``
would silently replace a test's container. ARCHITECTURE.md rule 4.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs
import click

from ..bootstrap import Container, default_container
from ..services.workspaces import WorkspaceHandle, WorkspaceService
from .defaults import default_workspace_path


def _environ() -> Mapping[str, str]:
    # The live mapping, not a copy: CliRunner(env=...) patches os.environ for one invocation.
    return os.environ


@attrs.define
class AppContext:
    """What every command receives: the container and the process environment."""

    container: Container = attrs.field(factory=default_container)
    environ: Mapping[str, str] = attrs.field(factory=_environ)

    @property
    def workspaces(self) -> WorkspaceService:
        return self.container.workspaces()

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the current directory (the ports take absolute paths)."""
        return os.path.abspath(os.path.expanduser(path))

    def default_workspace(self) -> str:
        return default_workspace_path(self.environ)

    def open_workspace(self, path: str | None) -> WorkspaceHandle:
        """Attach ``path``; when omitted, the per-user default workspace, created on first use."""
        if path is None:
            return self.workspaces.init(self.default_workspace())
        return self.workspaces.open(self.absolute(path))


pass_app = click.make_pass_decorator(AppContext)


def ensure_app(ctx: click.Context) -> AppContext:
    """Create the :class:`AppContext` in ``ctx.obj`` unless the caller supplied one."""
    if not isinstance(ctx.obj, AppContext):
        ctx.obj = AppContext()
    return ctx.obj
