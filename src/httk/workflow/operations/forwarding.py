"""Commands on a ``REMOTE:WS`` workspace: forwarded to the remote's httk, or a manager submitted there.

One :class:`RemoteSession` is one remote's transport and batch system (one SSH
connection) for everything a command does. :func:`run_forwarded` runs a command
line there with its output streamed back as it comes; the local files it names are
chosen by :func:`stage` and uploaded first into a private directory there, in which
the command then runs, and which is removed afterwards
(:mod:`~httk.workflow.operations.remote_staging`). :func:`manager_script` reads the
remote workspace's path and settings there and composes a manager's batch script
(:mod:`~httk.workflow.operations.manager_submission` submits it), and
:func:`manager_jobs` asks the batch system about such jobs. The command line
itself (which options the user gave, the ``--`` before the arguments) is the
CLI's to spell.
Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..ports import (
    BatchCommandMissing,
    BatchSystem,
    BatchSystemError,
    CommandResult,
    Filesystem,
    OutputSink,
    RemoteTransport,
    TransportError,
)
from .remote_staging import (
    PREPARE,
    RESOLVE,
    Upload,
    launch_argv,
    remove_argv,
    staged_name,
    upload,
    uploaded_document,
)
from .remotes import Remote, RemoteError, RemoteReference

#: Receives a forwarded command's output, chunk by chunk, as it arrives.
Sink = OutputSink


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
        result = self.transport.run(launch_argv(self.httk_command, args, remote=self.remote.name),
                                    timeout=self.timeout)
        if result.returncode == 127 and not result.stdout and not result.stderr:
            raise self.no_httk()
        return result

    def stream_httk(self, args: Sequence[str], *, out: Sink, err: Sink, cwd: str = "", uploaded: str = "",
                    timeout: float | None) -> int:
        """Run ``httk ARGS`` there (in ``cwd``, told ``uploaded``: :func:`.remote_staging.uploaded_document`),
        its output handed to ``out``/``err`` as it comes; its exit status."""
        seen = False

        def noting(write: Sink) -> Sink:
            def hand(data: bytes) -> None:
                nonlocal seen
                seen = True
                write(data)

            return hand

        code = self.transport.stream(
            launch_argv(self.httk_command, args, cwd, remote=self.remote.name, uploaded=uploaded), out=noting(out),
            err=noting(err),
            timeout=timeout,
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
            line, named = remote_error_line(result), f"remote {self.remote.name}: "
            # A forwarded httk there names its remote itself (HTTK_WORKFLOW_FORWARDED_AS): not twice.
            raise RemoteError(line if line.startswith(named) else named + line)
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
        if isinstance(exc, BatchCommandMissing):
            raise type(exc)(f"remote {self.remote.name}: {exc} (remote check {self.remote.name})") from None
        if isinstance(exc, TransportError | BatchSystemError):
            raise type(exc)(f"remote {self.remote.name}: {exc}") from None


def remote_error_line(result: CommandResult) -> str:
    """The remote command's ``error:`` line (or its first line of output), without the prefix."""
    lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return lines[0] if lines else f"exit status {result.returncode}"


# -- uploads ---------------------------------------------------------------------------------------
@attrs.frozen
class LocalPath:
    """A local file or payload a forwarded argument names: as spelled absolute, and with links resolved."""

    absolute: str
    real: str


#: What each kind of local path is, as a refusal names it.
_KINDS = {"file": "a file", "payload": "a payload directory (holding job.json)", "tree": "a file or directory"}

#: ``locate(path, kind)``: the local ``kind`` (a key of :data:`_KINDS`) that ``path`` names on this
#: machine, or ``None``.
Locate = Callable[[str, str], "LocalPath | None"]


def stage(
    text: str, *, kind: str, separator: str | None, required: bool, remote: str, uploads: list[Upload],
    locate: Locate,
) -> str:
    """``text`` as the forwarded command spells it; a local ``kind`` it names is appended to ``uploads``.

    With a ``separator`` the path follows it (``structure=POSCAR``). A value that names no
    such local path is passed on unchanged, unless ``required``: then it is refused. A
    symlinked payload is sent as the tree it names.
    """
    prefix, path = "", text
    if separator is not None:
        key, found_separator, rest = text.partition(separator)
        if not found_separator:
            return text
        prefix, path = key + found_separator, rest
    found = locate(path, kind)
    if found is None:
        if required:
            what = _KINDS.get(kind, "a file")
            raise RemoteError(f"{path}: not {what} on this machine; name a local one to send to {remote}")
        return text
    destination = staged_name(path, found.absolute, len(uploads))
    uploads.append(Upload(found.real, destination, found.absolute))
    return prefix + destination


def run_forwarded(
    session: RemoteSession,
    reference: RemoteReference,
    command: Callable[[str], list[str]],
    uploads: Sequence[Upload],
    fs: Filesystem,
    *,
    timeout: float | None,
    out: Sink,
    err: Sink,
    warn: Callable[[str], None],
) -> int:
    """Run ``command(workspace)`` (httk's arguments there) on the remote; its exit status.

    ``workspace`` is how the remote workspace is spelled in that command line: as the
    reference gave it, or, when there are ``uploads``, its absolute path there, since the
    command then runs in the upload directory and a relative path must not move with it.
    The upload directory is removed afterwards; failing to is a ``warn``, never a mask
    over the command's own error. What the command says on stderr names each upload by
    its local path (:class:`LocalSpelling`), and the command is told those paths too.
    """
    if not uploads:
        return session.stream_httk(command(reference.path), out=out, err=err, timeout=timeout)
    workspace_path, directory = session.prepare_uploads(reference)
    respelled = LocalSpelling(directory, uploads, err)
    try:
        upload(fs, session.transport, uploads, directory)
        spelled = workspace_path if reference.path and workspace_path else reference.path
        return session.stream_httk(command(spelled), cwd=directory, uploaded=uploaded_document(directory, uploads),
                                   out=out, err=respelled, timeout=timeout)
    finally:
        respelled.flush()
        _remove_quietly(session, directory, warn)


def _bytes(path: str) -> bytes:
    """``path`` as the file system spells it (``os.fsencode`` on POSIX: a name that is no UTF-8 kept as is)."""
    return path.encode("utf-8", "surrogateescape")


class LocalSpelling:
    """A sink that hands on whole lines with each upload's path there replaced by its local path.

    A message about an uploaded payload (``…/httk-upload.X/p/job.json @ $.data: …``) then
    names the file the user can open and fix. Only what may still become such a path
    waits (at most to the end of its line: ``\n`` or ``\r``); :meth:`flush` hands on the rest.
    """

    def __init__(self, directory: str, uploads: Sequence[Upload], sink: Sink) -> None:
        self._sink = sink
        self._pending = b""
        self._directory = _bytes(directory)
        pairs = sorted(((_bytes(f"{directory}/{item.destination}"), _bytes(item.named)) for item in uploads),
                       key=lambda pair: len(pair[0]), reverse=True)
        self._local = dict(pairs)
        # Longest first, and never inside a longer name: .upload/1/p is not the start of .upload/10/p or p-2.
        self._pattern = re.compile(b"(" + b"|".join(re.escape(there) for there, _ in pairs) + rb")(?![\w-]|\.\w)")

    def __call__(self, data: bytes) -> None:
        data = self._pending + data
        # Everything is handed on at once but what may still become an upload's path: from the
        # directory's last mention in the unfinished line, or a start of its name at the very end.
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        rest = data[end:]
        held = rest.rfind(self._directory)
        if held < 0:
            held = next((len(rest) - size for size in range(min(len(rest), len(self._directory)), 0, -1)
                         if rest.endswith(self._directory[:size])), len(rest))
        cut = end + held
        self._pending = data[cut:]
        if cut:
            self._sink(self._respell(data[:cut]))

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, b""
            self._sink(self._respell(pending))

    def _respell(self, data: bytes) -> bytes:
        return self._pattern.sub(lambda match: self._local[match.group(1)], data)


def _remove_quietly(session: RemoteSession, directory: str, warn: Callable[[str], None]) -> None:
    try:
        result = session.transport.run(remove_argv(directory), timeout=session.timeout)
        failed = result.returncode != 0
    except TransportError:
        failed = True
    if failed:
        warn(f"remote {session.remote.name}: could not remove {directory} there; remove it by hand")


# -- managers submitted to the remote's batch system ------------------------------------------------
@attrs.frozen
class ManagerScript:
    """The batch script of a manager for one remote workspace, and what it was composed from."""

    #: The workspace's absolute path there: the batch job must not depend on the remote registry later.
    workspace: str
    settings: dict[str, Any]
    script: str

    @property
    def workdir(self) -> str:
        """Where the batch system runs it (and keeps its output): the workspace's ``.httk-workflow/batch``."""
        return f"{self.workspace}/.httk-workflow/batch"


def manager_script(
    session: RemoteSession, reference: RemoteReference, manager_args: Sequence[str], workers: int | None
) -> ManagerScript:
    """Compose the batch script of a manager for the remote workspace from its settings there.

    ``manager_args`` are the manager options as the user gave them; ``workers`` ``None``
    lets the script take ``manager.workers`` from the remote workspace's settings.
    """
    target = ["--", reference.path] if reference.path else []
    path = str(session.httk_json(["workflow", "workspace", "status", "--json", *target])["path"])
    settings = session.httk_json(["workflow", "workspace", "settings", "show", "--json", "--", path])
    script = session.batch.compose_script(path, settings, list(manager_args), session.batch_httk_command(),
                                          workers=workers)
    return ManagerScript(path, settings, script)


#: How long ``run`` waits for the remote's precheck before it submits without its advice.
PRECHECK_SECONDS = 60.0


def unresolved_settings(
    session: RemoteSession, workspace: str, warn: Callable[[str], None]
) -> list[dict[str, Any]]:
    """The required settings the remote workspace's pending jobs lack, as its ``precheck`` reports them.

    Each entry names the setting, the jobs and the fix (``settings_missing`` of ``precheck
    --json``). A manager would fail those jobs at once, so ``run`` warns before it submits.
    A remote whose precheck cannot say (an older httk, output that is no report) gives none,
    and one that takes longer than :data:`PRECHECK_SECONDS` (a huge campaign) is a ``warn``:
    the advice never stops a submission; the authoritative gate is at attempt start.
    """
    args = ["workflow", "precheck", "--json", "--", workspace]
    try:
        result = session.transport.run(launch_argv(session.httk_command, args, remote=session.remote.name),
                                       timeout=min(session.timeout, PRECHECK_SECONDS))
    except TransportError as error:
        warn(f"remote {session.remote.name}: the pending jobs' settings were not checked ({error}); see "
             f"'httk workflow precheck {session.remote.name}:{workspace}'")
        return []
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        return []
    missing = report.get("settings_missing") if isinstance(report, dict) else None
    return [entry for entry in missing or () if isinstance(entry, dict) and entry.get("message")]


#: ``sh -c SAVE_SCRIPTS httk-workflow DIR NAME...`` with a script on stdin: each NAME in DIR holds it,
#: written to a hidden temp name first and renamed, so a reader never sees half a script.
SAVE_SCRIPTS = """dir=$1; shift
tmp=$(mktemp "$dir/.script.XXXXXXXX") || exit 1
cat >"$tmp" || { rm -f "$tmp"; exit 1; }
chmod 644 "$tmp"
for name do cp "$tmp" "$dir/.$name.tmp" && mv -f "$dir/.$name.tmp" "$dir/$name" || { rm -f "$tmp"; exit 1; }; done
rm -f "$tmp"
"""


def script_name(batch: str, job_id: str) -> str:
    """The copy of the script a batch job ran, beside its output: ``slurm-4811.sh`` for ``slurm-4811.out``."""
    return f"{batch}-{job_id}.sh"


def save_scripts(
    session: RemoteSession, workdir: str, script: str, job_ids: Sequence[str], warn: Callable[[str], None]
) -> None:
    """Keep a copy of the submitted ``script`` in ``workdir`` for each of ``job_ids`` (:func:`script_name`).

    The jobs are queued already, so a copy that cannot be written is a ``warn``, never an error
    (an error would invite submitting them again).
    """
    if not job_ids:
        return
    names = [script_name(session.batch.name, job_id) for job_id in job_ids]
    try:
        result = session.transport.run(["sh", "-c", SAVE_SCRIPTS, "httk-workflow", workdir, *names], input=script,
                                       timeout=session.timeout)
        failed = result.returncode != 0
    except TransportError:
        failed = True
    if failed:
        warn(f"remote {session.remote.name}: could not keep a copy of the batch script in {workdir}")


@attrs.frozen
class RecordedManagers:
    """The manager jobs a remote workspace's ``.httk-workflow/batch`` records (``job_ids`` ``None``: unknowable)."""

    workspace: str
    workdir: str
    job_ids: list[str] | None


def recorded_managers(session: RemoteSession, reference: RemoteReference) -> RecordedManagers:
    """The remote workspace's path and the manager jobs its batch workdir records, by their output files.

    ``job_ids`` is ``None`` for a batch system whose output names do not carry the job id
    (``job_ids_in`` answers ``None``, or a plug-in has no such method).
    """
    target = ["--", reference.path] if reference.path else []
    path = str(session.httk_json(["workflow", "workspace", "status", "--json", *target])["path"])
    workdir = f"{path}/.httk-workflow/batch"
    return RecordedManagers(path, workdir, recorded_job_ids(session, workdir))


def recorded_job_ids(session: RemoteSession, workdir: str) -> list[str] | None:
    """The manager job ids the output files in the batch ``workdir`` there name (``None``: unknowable)."""
    reader = getattr(session.batch, "job_ids_in", None)
    if reader is None:
        return None
    # No workdir yet (nothing was ever submitted there) is no manager, not an error.
    listing = session.transport.run(["sh", "-c", 'cd -- "$1" 2>/dev/null && ls -1A', "httk-workflow", workdir],
                                    timeout=session.timeout)
    names = listing.stdout.splitlines() if listing.returncode == 0 else []
    return None if (found := reader(names)) is None else list(found)


def manager_jobs(session: RemoteSession, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What the remote's batch system says about the manager jobs ``job_ids``: state, finished, succeeded."""
    statuses = session.batch.status(list(job_ids))
    return {job_id: {"state": s.state, "finished": s.finished, "succeeded": s.succeeded}
            for job_id, s in statuses.items()}
