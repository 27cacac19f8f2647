"""``REMOTE:WS`` plumbing: commands whose workspace lives on a configured remote.

A command that supports remote workspaces carries ``@remote_aware(...)`` under
``@pass_app``. The wrapper looks at the workspace argument's text before the
command body runs, so a remote reference never touches the local filesystem.
Every command but ``run`` is then forwarded as the same command to the remote's
own httk (the options the user gave, then ``--``, then the arguments with
``REMOTE:`` taken off): its stdout and stderr are streamed back as they come and
its exit status becomes ours. Local files the command names are declared with
:class:`LocalPaths`; they are uploaded into a private directory there first, the
command runs in it, and the directory is removed afterwards. ``run`` instead
submits a manager through the remote's batch system. This module spells the
command line again from click's parameters; the use cases themselves (the
session, the uploads, the manager's batch script) are
:mod:`~httk.workflow.operations.forwarding`. The remote resolves a bare workspace
name with its own registry. Spec: 000 "Running on a remote", "Initialize a workspace".
"""

from __future__ import annotations

import codecs
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import click
from click.core import ParameterSource

from ..operations.remote_reference import RemoteError, RemoteReference, split_reference
from .context import AppContext
from .render import emit_json

if TYPE_CHECKING:
    # Forwarding is imported by the calls that forward: a local command never pays for it.
    from ..operations.forwarding import LocalPath
    from ..operations.remote_staging import Upload

F = TypeVar("F", bound=Callable[..., Any])


def _binary_writer(name: str) -> Callable[[bytes], None]:
    """A writer of raw bytes to ``sys.stdout``/``sys.stderr`` that flushes each chunk."""
    text = getattr(sys, name)
    text.flush()  # what was echoed before comes first
    buffer = getattr(text, "buffer", None)
    if buffer is not None:

        def write(data: bytes) -> None:
            buffer.write(data)
            buffer.flush()

        return write
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write_text(data: bytes) -> None:
        text.write(decoder.decode(data))
        text.flush()

    return write_text


# -- the hook ------------------------------------------------------------------------------------
@attrs.frozen
class LocalPaths:
    """A parameter whose values name local files, uploaded when the command is forwarded.

    ``index`` picks one element of a tuple-valued positional (-1: the last); with a
    ``separator`` the path follows it (``--input KEY=PATH``). ``kind`` is ``file``,
    ``payload`` (a directory holding job.json) or ``tree`` (a file or a directory). A value
    that is no such local path is passed on unchanged, unless ``required``: then it is
    refused here.
    """

    param: str
    index: int | None = None
    separator: str | None = None
    kind: str = "file"
    required: bool = False


@attrs.frozen
class Forwarding:
    """How one command is forwarded: see :func:`remote_aware`."""

    command_path: tuple[str, ...]
    argument: str
    trailing: int = 0
    local_paths: tuple[LocalPaths, ...] = ()
    unbounded: bool = False
    bare: bool = False


def remote_aware(
    command_path: tuple[str, ...],
    argument: str = "workspace",
    *,
    trailing: int = 0,
    local_paths: Sequence[LocalPaths] = (),
    unbounded: bool = False,
    bare: bool = False,
) -> Callable[[F], F]:
    """Send a ``REMOTE:...`` value of ``argument`` to the remote instead of running the command here.

    ``command_path`` is the canonical spelling below ``httk workflow`` (an alias such as
    ``httk-taskmanager status`` is forwarded canonically). With ``trailing`` the argument
    is a tuple of positionals (``[WORKSPACE] JOB``): its first word is the workspace when
    ``trailing`` more follow it. ``local_paths`` declares the local files to upload;
    ``unbounded`` lifts the remote's command_timeout (a foreground ``job debug``);
    ``bare`` means the argument names only a remote (``workspace list kappa:``). ``run``
    submits a manager; every other command is forwarded as itself.
    """
    spec = Forwarding(tuple(command_path), argument, trailing, tuple(local_paths), unbounded, bare)

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(app: AppContext, *args: Any, **kwargs: Any) -> Any:
            value = kwargs.get(argument)
            if trailing:
                words = tuple(value or ())
                value = words[0] if len(words) == trailing + 1 else None
            reference = split_reference(value)
            if reference is None:
                return function(app, *args, **kwargs)
            reference = rooted(app, reference, creating=spec.command_path == ("workspace", "init"))
            if spec.command_path == ("run",):
                return submit_manager(app, reference)
            return forward(app, reference, spec)

        return wrapper  # type: ignore[return-value]

    return decorate


def rooted(app: AppContext, reference: RemoteReference, *, creating: bool = False) -> RemoteReference:
    """``reference`` with a relative path there put below its remote's ``workspace_root``
    (:meth:`~httk.workflow.operations.remotes.Remote.workspace_path`)."""
    path = app.remotes.get(reference.remote).workspace_path(reference.path, creating=creating)
    return reference if path == reference.path else attrs.evolve(reference, path=path)


def forward(app: AppContext, reference: RemoteReference, spec: Forwarding) -> None:
    """Run the current command on the remote, streaming its output back, and exit with its status."""
    ctx = click.get_current_context()
    param = next(p for p in ctx.command.params if p.name == spec.argument)
    if spec.bare and reference.path:
        raise RemoteError(f"{reference}: name only the remote here, as '{reference.remote}:'")
    if not reference.path and param.required:
        raise RemoteError(f"{reference}: give the path on {reference.remote} after the colon")
    from ..operations.forwarding import run_forwarded

    params = dict(ctx.params)
    uploads = stage_local_paths(app, params, spec.local_paths, reference.remote)

    def command(workspace: str) -> list[str]:
        params[spec.argument] = workspace_value(spec, params, workspace)
        return command_argv(ctx, spec, params)

    with app.open_session(reference.remote) as session:
        code = run_forwarded(
            session, reference, command, uploads, app.container.fs(),
            timeout=None if spec.unbounded else session.timeout,
            out=_binary_writer("stdout"), err=_binary_writer("stderr"),
            warn=lambda line: click.echo(f"warning: {line}", err=True),
        )
    ctx.exit(code)


def stage_local_paths(
    app: AppContext, params: dict[str, Any], declarations: Sequence[LocalPaths], remote: str
) -> list[Upload]:
    """The uploads the declared parameters name; ``params`` gets their spelling below the upload directory."""
    from ..operations.forwarding import stage

    uploads: list[Upload] = []
    for declaration in declarations:
        value = params.get(declaration.param)
        if value is None:
            continue
        items = list(value) if isinstance(value, tuple) else [value]
        if declaration.index is None:
            positions: Sequence[int] = range(len(items))
        else:
            positions = [declaration.index % len(items)] if items else []
        for position in positions:
            items[position] = stage(str(items[position]), kind=declaration.kind, separator=declaration.separator,
                                    required=declaration.required, remote=remote, uploads=uploads, locate=_locate)
        params[declaration.param] = tuple(items) if isinstance(value, tuple) else items[0]
    return uploads


def _locate(path: str, kind: str) -> LocalPath | None:
    """The local ``kind`` ``path`` names here (relative to the current directory), else ``None``."""
    from ..operations.forwarding import LocalPath

    source = os.path.abspath(os.path.expanduser(path))
    if kind == "payload":
        found = os.path.isdir(source) and os.path.isfile(os.path.join(source, "job.json"))
    elif kind == "tree":
        found = os.path.isfile(source) or os.path.isdir(source)
    else:
        found = os.path.isfile(source)
    return LocalPath(source, os.path.realpath(source)) if found else None


def workspace_value(spec: Forwarding, params: Mapping[str, Any], path: str) -> Any:
    """The forwarded value of the workspace argument: ``path`` there ('' = the remote's default)."""
    if spec.bare:
        return None
    if spec.trailing:
        rest = tuple(params[spec.argument])[1:]
        return (path, *rest) if path else rest
    return path or None


def command_argv(ctx: click.Context, spec: Forwarding, params: Mapping[str, Any]) -> list[str]:
    """``workflow COMMAND OPTIONS -- ARGUMENTS``: the same command, spelled for the remote's httk."""
    return ["workflow", *spec.command_path, *option_argv(ctx, params=params), "--", *argument_argv(ctx, params)]


def submit_manager(app: AppContext, reference: RemoteReference) -> None:
    """``run REMOTE:WS``: compose the batch script from the remote workspace's settings and submit it."""
    ctx = click.get_current_context()
    # None unless given: compose_script then takes manager.workers from the remote workspace's settings.
    workers = ctx.params["workers"]
    # --managers and --json shape this submission; the managers themselves never see them.
    managers, as_json = ctx.params["managers"], ctx.params["as_json"]
    manager_args = option_argv(ctx, exclude=("workers", "managers", "as_json"))
    from ..operations.forwarding import manager_script, save_scripts, unresolved_settings
    from ..operations.manager_submission import already_serving, serving_note, submit_managers

    def warn(line: str) -> None:
        click.echo(f"warning: {line}", err=True)

    with app.open_session(reference.remote) as session:
        composed = manager_script(session, reference, manager_args, workers)
        # The spec's run refuses nothing for this (the gate is at attempt start), but a manager would fail
        # these jobs at once: say so, with the fix, before the batch job is queued.
        for entry in unresolved_settings(session, composed.workspace, warn):
            warn(f"remote {reference.remote}: {entry['message']}")
        # Many managers may serve one workspace, so this is no refusal; but a second run is not silent.
        serving = already_serving(session, composed.workspace, composed.workdir)
        if serving:
            click.echo(f"note: {serving_note(session.batch, serving, str(reference), reference.remote)}", err=True)
        submission = submit_managers(session.batch, composed.script, workdir=composed.workdir,
                                     requested=managers or 1, settings=composed.settings, workspace=str(reference))
        save_scripts(session, composed.workdir, composed.script, submission.job_ids, warn=warn)
    path = composed.workspace
    if as_json:
        emit_json({"remote": reference.remote, "workspace": path, "batch": session.batch.name,
                   **submission.as_json(), "already_serving": [manager.as_json() for manager in serving]})
        return
    for job_id in submission.job_ids:
        click.echo(f"submitted {session.batch.name} job {job_id} on {reference.remote}: a manager for {path}")
    if managers is not None:
        click.echo(submission.summary)


def option_argv(
    ctx: click.Context, exclude: Sequence[str] = (), params: Mapping[str, Any] | None = None
) -> list[str]:
    """The options the user gave (not defaults), spelled again as arguments (values from ``params``)."""
    values = ctx.params if params is None else params
    argv: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in exclude or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) in (ParameterSource.DEFAULT, None):
            continue
        value = values.get(param.name)
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


def argument_argv(ctx: click.Context, params: Mapping[str, Any]) -> list[str]:
    """The positional arguments in order, from ``params`` (``None`` drops one)."""
    argv: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Argument) or param.name is None:
            continue
        value = params.get(param.name)
        if value is None:
            continue
        if isinstance(value, tuple):  # nargs=-1
            argv.extend(str(item) for item in value)
        else:
            argv.append(str(value))
    return argv
