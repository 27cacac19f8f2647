"""``REMOTE:WS`` plumbing: commands whose workspace lives on a configured remote.

A command that supports remote workspaces carries ``@remote_aware(...)`` under
``@pass_app``. The wrapper looks at the workspace argument's text before the
command body runs, so a remote reference never touches the local filesystem.
Every command but ``run`` is then forwarded as the same command to the remote's
own httk (the options the user gave, then ``--``, then the arguments with
``REMOTE:`` taken off): its stdout and stderr are streamed back as they come and
its exit status becomes ours. Local files the command names are declared with
:class:`LocalPaths`; they are uploaded into a private directory there first,
the command runs in it, and the directory is removed afterwards
(:mod:`~httk.workflow.operations.remote_staging`). One :class:`RemoteSession` is
one SSH connection for everything a command does. ``run`` instead reads the
remote workspace's path and settings there, composes a batch script and submits
it through the remote's batch system. The remote resolves a bare workspace name
with its own registry. Spec: 000 "Running on a remote", "Initialize a workspace".
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import posixpath
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import click
from click.core import ParameterSource

from ..bootstrap import remote_adapters
from ..operations.remote_staging import PREPARE, RESOLVE, Upload, launch_argv, remove_argv, staged_name, upload
from ..operations.remotes import Remote, RemoteError, RemoteReference, RemoteRegistry, split_reference
from ..ports import BatchSystem, BatchSystemError, CommandResult, RemoteTransport, TransportError
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
    """One remote's transport and batch system for the length of one command.

    Used as a context manager: a transport or batch-system failure inside it leaves
    as the same one-line error with the remote's name in front, since the adapters
    know only a host and port.
    """

    remote: Remote
    transport: RemoteTransport
    batch: BatchSystem

    @property
    def httk_command(self) -> list[str]:
        words = shlex.split(str(self.remote.settings.get("httk_command", "httk")))
        if not words:
            raise RemoteError(f"remote {self.remote.name}: httk_command is blank; 'httk workflow remote configure "
                              f"{self.remote.name} --set httk_command=' restores the default")
        return words

    @property
    def timeout(self) -> float:
        return float(self.remote.settings.get("command_timeout", 300))

    def httk(self, args: Sequence[str]) -> CommandResult:
        """Run ``httk ARGS`` there and capture its output; a missing httk is a one-line error."""
        result = self.transport.run(launch_argv(self.httk_command, args), timeout=self.timeout)
        if result.returncode == 127 and not result.stdout and not result.stderr:
            raise self.no_httk()
        return result

    def stream_httk(self, args: Sequence[str], *, cwd: str = "", timeout: float | None) -> int:
        """Run ``httk ARGS`` there (in ``cwd``), its output streamed to ours as it comes; its exit status."""
        seen = False

        def sink(name: str) -> Callable[[bytes], None]:
            write = _binary_writer(name)

            def hand(data: bytes) -> None:
                nonlocal seen
                seen = True
                write(data)

            return hand

        code = self.transport.stream(
            launch_argv(self.httk_command, args, cwd), out=sink("stdout"), err=sink("stderr"), timeout=timeout
        )
        if code == 127 and not seen:
            raise self.no_httk()
        return code

    def no_httk(self) -> RemoteError:
        """The refusal for a remote where the httk command cannot be found."""
        name = self.remote.name
        if "httk_command" in self.remote.chosen:
            return RemoteError(f"remote {name}: cannot run httk_command {shlex.join(self.httk_command)!r} there; "
                               f"fix it with 'httk workflow remote configure {name} --set httk_command=PATH' "
                               f"(see 'httk workflow remote check {name}')")
        return RemoteError(f"remote {name}: no httk there (not on PATH, nor in ~/.local/bin); install it there "
                           f"('pipx install httk-workflow') or give its path with 'httk workflow remote configure "
                           f"{name} --set httk_command=PATH'")

    def batch_httk_command(self) -> list[str]:
        """The httk words a batch script runs: httk_command as set, else the path ``httk`` resolves to there.

        A batch job gets the environment of the non-interactive login that submitted it,
        whose PATH need not hold ``~/.local/bin``: an absolute path does not depend on it.
        """
        if "httk_command" in self.remote.chosen:
            return self.httk_command
        result = self.transport.run(["sh", "-c", RESOLVE, "httk-workflow", self.httk_command[0]],
                                    timeout=self.timeout)
        if result.returncode != 0 or not result.stdout.strip():
            raise self.no_httk()
        return [result.stdout.strip(), *self.httk_command[1:]]

    def prepare_uploads(self, reference: RemoteReference) -> tuple[str, str]:
        """``(workspace, directory)``: the workspace's absolute path there ('' = unknown) and a new
        private directory for uploads below its ``.httk-workflow/tmp`` (else the remote's ``$TMPDIR``)."""
        path, registered = reference.path, ""
        if "/" not in path and path not in (".", ".."):
            # A name (or the default): the remote's registry knows its path.
            for row in self.httk_json(["workflow", "workspace", "list", "--json"]):
                if (row.get("name") == path) if path else row.get("default"):
                    registered = str(row.get("path") or "")
        result = self.transport.run(
            ["sh", "-c", PREPARE, "httk-workflow", self.httk_command[0], path, registered], timeout=self.timeout
        )
        if result.returncode == 127 and not result.stderr:
            raise self.no_httk()
        lines = result.stdout.splitlines()
        if result.returncode != 0 or len(lines) != 2:
            raise RemoteError(f"remote {self.remote.name}: {remote_error_line(result)}; check the free space and "
                              "permissions of the workspace's .httk-workflow/tmp and of $TMPDIR there")
        return lines[0], lines[1]

    def httk_json(self, args: Sequence[str]) -> Any:
        """``httk ARGS`` there, which must succeed and print one JSON value."""
        result = self.httk(args)
        if result.returncode != 0:
            raise RemoteError(f"remote {self.remote.name}: {remote_error_line(result)}")
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            raise RemoteError(f"remote {self.remote.name}: httk {' '.join(args[:3])} printed no JSON; "
                              f"compare its version with this machine's ('httk workflow remote check "
                              f"{self.remote.name}')") from None

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.close()
        if isinstance(exc, TransportError | BatchSystemError):
            raise type(exc)(f"remote {self.remote.name}: {exc}") from None


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
    ``separator`` the path follows it (``--input KEY=PATH``). ``kind`` is ``file`` or
    ``payload`` (a directory holding job.json). A value that is no such local path is
    passed on unchanged, unless ``required``: then it is refused here.
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
            if spec.command_path == ("run",):
                return submit_manager(app, reference)
            return forward(app, reference, spec)

        return wrapper  # type: ignore[return-value]

    return decorate


def forward(app: AppContext, reference: RemoteReference, spec: Forwarding) -> None:
    """Run the current command on the remote, streaming its output back, and exit with its status."""
    ctx = click.get_current_context()
    param = next(p for p in ctx.command.params if p.name == spec.argument)
    if spec.bare and reference.path:
        raise RemoteError(f"{reference}: name only the remote here, as '{reference.remote}:'")
    if not reference.path and param.required:
        raise RemoteError(f"{reference}: give the path on {reference.remote} after the colon")
    params = dict(ctx.params)
    uploads = stage_local_paths(app, params, spec.local_paths, reference.remote)
    with open_session(app, reference.remote) as session:
        timeout = None if spec.unbounded else session.timeout
        if not uploads:
            params[spec.argument] = workspace_value(spec, params, reference.path)
            code = session.stream_httk(command_argv(ctx, spec, params), timeout=timeout)
        else:
            workspace_path, directory = session.prepare_uploads(reference)
            try:
                upload(app.container.fs(), session.transport, uploads, directory)
                # The command runs in the upload directory: a relative workspace path must not move with it.
                spelled = workspace_path if reference.path and workspace_path else reference.path
                params[spec.argument] = workspace_value(spec, params, spelled)
                code = session.stream_httk(command_argv(ctx, spec, params), cwd=directory, timeout=timeout)
            finally:
                _remove_quietly(session, directory)
    ctx.exit(code)


def _remove_quietly(session: RemoteSession, directory: str) -> None:
    """Remove the upload directory; failing to is a warning, never a mask over the command's own error."""
    try:
        result = session.transport.run(remove_argv(directory), timeout=session.timeout)
        failed = result.returncode != 0
    except TransportError:
        failed = True
    if failed:
        click.echo(f"warning: remote {session.remote.name}: could not remove {directory} there; remove it by hand",
                   err=True)


def stage_local_paths(
    app: AppContext, params: dict[str, Any], declarations: Sequence[LocalPaths], remote: str
) -> list[Upload]:
    """The uploads the declared parameters name; ``params`` gets their spelling below the upload directory."""
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
            items[position] = _stage(app, declaration, str(items[position]), uploads, remote)
        params[declaration.param] = tuple(items) if isinstance(value, tuple) else items[0]
    return uploads


def _stage(app: AppContext, declaration: LocalPaths, text: str, uploads: list[Upload], remote: str) -> str:
    prefix, path = "", text
    if declaration.separator is not None:
        key, separator, rest = text.partition(declaration.separator)
        if not separator:
            return text
        prefix, path = key + separator, rest
    source = app.absolute(path)
    if declaration.kind == "payload":
        found = os.path.isdir(source) and os.path.isfile(os.path.join(source, "job.json"))
    else:
        found = os.path.isfile(source)
    if not found:
        if declaration.required:
            what = "a payload directory (holding job.json)" if declaration.kind == "payload" else "a file"
            raise RemoteError(f"{path}: not {what} on this machine; name the local {declaration.kind} to send "
                              f"to {remote}")
        return text
    destination = staged_name(path, source, len(uploads))
    # The real path: a symlinked payload is sent as the tree it names.
    uploads.append(Upload(os.path.realpath(source), destination))
    return prefix + destination


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
    manager_args = option_argv(ctx, exclude=("workers",))
    target = ["--", reference.path] if reference.path else []
    with open_session(app, reference.remote) as session:
        # The absolute path: the batch job must not depend on the remote registry's state later.
        path = str(session.httk_json(["workflow", "workspace", "status", "--json", *target])["path"])
        settings = session.httk_json(["workflow", "workspace", "settings", "show", "--json", "--", path])
        script = session.batch.compose_script(path, settings, manager_args, session.batch_httk_command(),
                                              workers=workers)
        job_id = session.batch.submit(script, workdir=f"{path}/.httk-workflow/batch")
    click.echo(f"submitted {session.batch.name} job {job_id} on {reference.remote}: a manager for {path}")


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
