"""``REMOTE:PATH`` plumbing: commands whose workspace lives on a configured remote.

A command that supports remote workspaces carries ``@remote_aware(...)`` under
``@pass_app``. The wrapper looks at the workspace argument's text before the
command body runs, so a remote reference never touches the local filesystem:
``workspace init|status|settings`` are forwarded as the same command to the
remote's httk (options, then ``--``, then the arguments with ``REMOTE:`` taken
off) and its output and exit status become ours; ``run`` reads the remote
workspace's path and settings there, composes a batch script and submits it
through the remote's batch system. The remote resolves a bare workspace name
with its own registry. Spec: 000 "Running on a remote", "Initialize a workspace".
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import click
from click.core import ParameterSource

from ..bootstrap import remote_adapters
from ..ports import BatchSystem, CommandResult, RemoteTransport
from ..services.remotes import Remote, RemoteError, RemoteReference, RemoteRegistry, split_reference
from .context import AppContext

F = TypeVar("F", bound=Callable[..., Any])


def remotes_dir(environ: Mapping[str, str]) -> str:
    """``$XDG_CONFIG_HOME/httk-workflow/remotes`` (``~/.config`` when unset or relative)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not base or not posixpath.isabs(base):
        base = posixpath.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return posixpath.join(base, "httk-workflow", "remotes")


def remote_registry(app: AppContext) -> RemoteRegistry:
    return RemoteRegistry(app.container.fs(), remotes_dir(app.environ), app.container.adapter_templates())


@attrs.define
class RemoteSession:
    """One remote's transport and batch system for the length of one command."""

    remote: Remote
    transport: RemoteTransport
    batch: BatchSystem

    @property
    def httk_command(self) -> list[str]:
        return shlex.split(str(self.remote.settings.get("httk_command", "httk")))

    @property
    def timeout(self) -> float:
        return float(self.remote.settings.get("command_timeout", 300))

    def httk(self, args: Sequence[str]) -> CommandResult:
        """Run ``httk ARGS`` there; a missing httk is a one-line error that says what to set."""
        result = self.transport.run([*self.httk_command, *args], timeout=self.timeout)
        if result.returncode in (126, 127):
            raise RemoteError(
                f"{self.remote.name}: cannot run {shlex.join(self.httk_command)!r} there (exit {result.returncode}); "
                f"set httk_command (see 'httk workflow remote check {self.remote.name}')"
            )
        return result

    def httk_json(self, args: Sequence[str]) -> Any:
        """``httk ARGS`` there, which must succeed and print one JSON value."""
        result = self.httk(args)
        if result.returncode != 0:
            raise RemoteError(f"{self.remote.name}: {remote_error_line(result)}")
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            raise RemoteError(f"{self.remote.name}: httk {' '.join(args[:3])} printed no JSON") from None

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(app: AppContext, name: str) -> RemoteSession:
    """The configured remote ``name`` with its adapters (connected on first use)."""
    remote = remote_registry(app).get(name)
    transport, batch = remote_adapters(app.container, remote)
    return RemoteSession(remote, transport, batch)


def remote_error_line(result: CommandResult) -> str:
    """The remote command's ``error:`` line (or its first line of output), without the prefix."""
    lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return lines[0] if lines else f"exit status {result.returncode}"


# -- the hook ------------------------------------------------------------------------------------
def remote_aware(command_path: tuple[str, ...], argument: str = "workspace") -> Callable[[F], F]:
    """Send a ``REMOTE:...`` value of ``argument`` to the remote instead of running the command here.

    ``command_path`` is the canonical spelling below ``httk workflow`` (an alias such as
    ``httk-taskmanager status`` is forwarded canonically). ``run`` submits a manager; every
    other command is forwarded as the same command to the remote's httk.
    """

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(app: AppContext, *args: Any, **kwargs: Any) -> Any:
            reference = split_reference(kwargs.get(argument))
            if reference is None:
                return function(app, *args, **kwargs)
            if command_path == ("run",):
                return submit_manager(app, reference)
            return forward(app, reference, command_path, argument)

        return wrapper  # type: ignore[return-value]

    return decorate


def forward(app: AppContext, reference: RemoteReference, command_path: tuple[str, ...], argument: str) -> None:
    """Run the current command on the remote and relay its output and exit status."""
    ctx = click.get_current_context()
    param = next(p for p in ctx.command.params if p.name == argument)
    if not reference.path and param.required:
        raise RemoteError(f"{reference}: give the path on {reference.remote} after the colon")
    options = option_argv(ctx)
    arguments = argument_argv(ctx, {argument: reference.path or None})
    with open_session(app, reference.remote) as session:
        result = session.httk(["workflow", *command_path, *options, "--", *arguments])
    click.echo(result.stdout, nl=False)
    click.echo(result.stderr, nl=False, err=True)
    ctx.exit(result.returncode)


def submit_manager(app: AppContext, reference: RemoteReference) -> None:
    """``run REMOTE:WS``: compose the batch script from the remote workspace's settings and submit it."""
    ctx = click.get_current_context()
    explicit = ctx.get_parameter_source("workers") not in (ParameterSource.DEFAULT, None)
    workers = ctx.params["workers"] if explicit else None
    manager_args = option_argv(ctx, exclude=("workers",))
    target = ["--", reference.path] if reference.path else []
    with open_session(app, reference.remote) as session:
        # The absolute path: the batch job must not depend on the remote registry's state later.
        path = str(session.httk_json(["workflow", "workspace", "status", "--json", *target])["path"])
        settings = session.httk_json(["workflow", "workspace", "settings", "show", "--json", "--", path])
        script = session.batch.compose_script(path, settings, manager_args, session.httk_command, workers=workers)
        job_id = session.batch.submit(script, workdir=f"{path}/.httk-workflow/batch")
    click.echo(f"submitted {session.batch.name} job {job_id} on {reference.remote}: a manager for {path}")


def option_argv(ctx: click.Context, exclude: Sequence[str] = ()) -> list[str]:
    """The options the user gave (not defaults), spelled again as arguments."""
    argv: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in exclude or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) in (ParameterSource.DEFAULT, None):
            continue
        value = ctx.params.get(param.name)
        if param.is_flag:
            if param.secondary_opts:
                argv.append(param.opts[0] if value else param.secondary_opts[0])
            elif value:
                argv.append(param.opts[0])
        elif param.multiple:
            for item in value or ():
                argv += [param.opts[0], str(item)]
        elif value is not None:
            argv += [param.opts[0], str(value)]
    return argv


def argument_argv(ctx: click.Context, replace: Mapping[str, str | None]) -> list[str]:
    """The positional arguments in order, with ``replace`` applied (``None`` drops one)."""
    argv: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Argument) or param.name is None:
            continue
        value = replace[param.name] if param.name in replace else ctx.params.get(param.name)
        if value is None:
            continue
        if isinstance(value, tuple):  # nargs=-1
            argv.extend(str(item) for item in value)
        else:
            argv.append(str(value))
    return argv
