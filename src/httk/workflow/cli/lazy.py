"""A click group whose commands are imported when first asked for (click's documented lazy-loading pattern).

Building the whole command tree imports every command module and everything they
use; a command such as ``workspace status`` needs one of them. A :class:`LazyGroup`
knows a command as ``module:attribute`` until it is invoked, listed with its help,
or completed, and then imports that module once.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from .render import Group


def load(target: str) -> click.Command:
    """The command that ``module:attribute`` names, the module relative to this package (``job_cmds:job``)."""
    module, _, attribute = target.partition(":")
    command = getattr(importlib.import_module(f".{module}", __package__), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is {type(command).__name__}, not a click command")
    return command


class LazyGroup(Group):
    """A :class:`~.render.Group` whose ``lazy`` commands (name -> ``module:attribute``) are imported on first use.

    :meth:`list_commands` needs no import, so only ``--help`` and completion import
    every module. A command added eagerly with ``add_command`` wins over a lazy entry
    of the same name.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in self.lazy:
            command = load(self.lazy[cmd_name])
            # Kept under the name asked for ("run" is also "manager run"); later lookups are plain.
            self.add_command(command, cmd_name)
        return command
