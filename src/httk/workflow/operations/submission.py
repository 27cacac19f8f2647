"""Submission: a prepared payload becomes a job at a placement.

Order is what makes it crash-safe: validate, reserve the job id workspace-wide
(:mod:`.job_ids`), copy the payload into the control tree's staging area, rename
it into place (never over an existing name), and only then publish the
generation-0 ``submitted`` marker. A crash before the
marker leaves an orphan payload that no manager sees: the workspace reads back
as before the submission, never between.

A refusal writes nothing. Everything that can be known before the first write
is checked first: the placement, job.json, that every path the job will use
fits the filesystem's name limits, that ``--move`` stays on one filesystem, that
no other job holds the job id, that a workspace runner the job pins is in the
store, and that a payload runner is in the payload (it can never appear later). A write that fails anyway
is undone (staged copy, created placement directories) before the error is
raised. Spec: 000 "Submit a job", "Share one runner between many jobs".
"""

from __future__ import annotations

import errno
import posixpath
from collections.abc import Callable, Iterator, Sequence

import attrs

from .. import codec
from ..domain.lifecycle import StateKind
from ..domain.model import JobKey, ValidationError, check_placement, check_tag
from ..ports import DOCUMENT_LIMIT, DocumentTooLarge, Filesystem, UnreadableDocument, walk_tree
from ..protocol import JOB_FILE, PRIVATE_DIR, JobSpec, parse_job_bytes
from ..store.digests import fs_digest
from ..store.job_ids import JobIdTaken, Reservation, check_job_id, job_id_traces, release_job_id, reserve_job_id
from ..store.markers import Marker
from ..store.runners import RunnerUnavailable, digest_mismatch, object_path, resolve_runner
from ..store.workspaces import WorkspaceHandle

#: Conservative POSIX limits: NAME_MAX bytes per component, PATH_MAX bytes with the NUL.
NAME_MAX = 255
PATH_MAX = 4096
#: What a marker name can add to the job key: ``.p<priority>.g<generation>.<record ref>``
#: (20-digit priority and ref numbers, a 64-bit base-36 generation), plus ``.audit.json``
#: of a quarantined marker. Generous on purpose: a marker must never outgrow its directory.
MARKER_SUFFIX_RESERVE = 140
#: What an attempt directory name adds to the attempt id: the ordinal and a dash.
ATTEMPT_PREFIX_RESERVE = 21
_SYMLINK_HOPS = 40
#: Distinct job.json contents a batch remembers the definitions of (the bytes are the key: bounded memory).
PARSED_LIMIT = 4096

class SubmissionError(ValueError):
    """A payload or placement that cannot be submitted; nothing was written."""


@attrs.frozen
class Submitted:
    marker: Marker
    payload: str
    spec: JobSpec
    #: One line the caller shows, e.g. a runner accepted although the store lacks it.
    warning: str | None = None


@attrs.frozen
class Planned:
    """One submission checked against the workspace (:func:`plan_submission`); nothing is written yet."""

    source: str
    placement: str
    key: JobKey
    spec: JobSpec
    destination: str
    #: Where a copy is staged before it is renamed into place: ``tmp/submit-<job-id>-<token>``, a name
    #: of this submission's own (two replays of one chosen id never share it), so it is copied in place.
    staging: str
    warning: str | None
    #: The job.json of a job submitted from its definition (:func:`plan_spec`): the payload is
    #: this file alone, written into ``staging``; ``source`` then only names the job in messages.
    data: bytes | None = None

    @property
    def reservation(self) -> Reservation:
        return Reservation(self.key.job_id, str(self.key), self.placement)


def submit(
    workspace: WorkspaceHandle,
    payload: str,
    placement: str,
    *,
    move: bool = False,
    tag: str | None = None,
    job_id: str | None = None,
    allow_missing_runner: bool = False,
) -> Submitted:
    """Submit the payload directory ``payload`` at ``placement`` and return the new job.

    Raises :class:`SubmissionError` (nothing written) for anything that cannot be
    submitted; ``allow_missing_runner`` accepts a pinned workspace runner the
    store lacks, with a warning in the result.
    """
    fs = workspace.fs
    planned = plan_submission(
        workspace, payload, placement, move=move, tag=tag, job_id=job_id, allow_missing_runner=allow_missing_runner
    )
    source, placement, key, destination, staging = (
        planned.source, planned.placement, planned.key, planned.destination, planned.staging)
    # The directories this submission creates, so that a failed write can take them back.
    marker_dir = f"{workspace.layout.kind_dir(StateKind.SUBMITTED)}/{placement}"
    reservation = planned.reservation
    reservation_path = workspace.layout.id_reservation(key.job_id)
    created = (missing_ancestors(fs, destination) + missing_ancestors(fs, f"{marker_dir}/{key}")
               + missing_ancestors(fs, reservation_path))
    durable = workspace.durable
    placed = reserved = False
    try:
        # The id first: from here on no other job, at any placement, can take it.
        reserved = reserve_job_id(fs, workspace.layout, reservation, durable=durable)
        if move:
            if durable:
                # The payload may never have been synced: the rename would move unsynced data
                # under a marker that survives a crash the data does not.
                fs.sync_tree(source)
            fs.rename(source, destination, durable=durable)
        else:
            fs.copy_tree(source, staging, durable=durable, staged=True)
            fs.rename(staging, destination, durable=durable)
        placed = True
        marker = workspace.store.create_submitted(placement, key, planned.spec.priority)
    except JobIdTaken as taken:  # another submission reserved the id since the check
        _undo(fs, source, destination, staging, created, move=move, placed=placed)
        raise SubmissionError(id_refusal(placement, taken)) from None
    except OSError as error:
        release = (lambda: release_job_id(fs, workspace.layout, reservation)) if reserved else None
        _undo(fs, source, destination, staging, created, move=move, placed=placed, release=release)
        raise SubmissionError(write_refusal(error, source, placement, workspace.root, move=move)) from None
    return Submitted(marker, destination, planned.spec, planned.warning)


def plan_submission(
    workspace: WorkspaceHandle,
    payload: str,
    placement: str,
    *,
    move: bool = False,
    tag: str | None = None,
    job_id: str | None = None,
    allow_missing_runner: bool = False,
    runner_check: Callable[[JobSpec, str], str | None] | None = None,
    shapes: set[tuple[object, ...]] | None = None,
    parsed: dict[bytes, JobSpec] | None = None,
    token: str | None = None,
) -> Planned:
    """Everything that can be known before the first write, checked; :class:`SubmissionError` if refused.

    Reads only. ``runner_check`` replaces :func:`check_runner` (a batch checks each
    pinned runner once); ``shapes`` remembers the path shapes that fit the name limits
    (:func:`path_shape`), so a batch checks each shape once; ``parsed`` the definitions of
    the job.json contents read so far, so a batch validates each distinct content once;
    ``token`` names the staging copies of one batch (:func:`staging_token`; a fresh one by default).
    """
    fs = workspace.fs
    source = posixpath.normpath(payload)
    try:
        placement = check_placement(placement)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    info = fs.lstat(source)
    if info is None or not info.is_dir:
        raise SubmissionError(f"{source}: not a payload directory (expected a directory holding job.json)")
    job_file = f"{source}/{JOB_FILE}"
    try:
        # As a manager reads it (Store.read_spec): a regular file, never through a link, never blocking.
        data = fs.read_document(job_file)
    except FileNotFoundError:
        raise SubmissionError(f"{job_file}: missing; prepare the payload with prepare_job_payload first") from None
    except DocumentTooLarge as error:
        raise SubmissionError(f"{error}: a job.json is limited to {DOCUMENT_LIMIT // (1024 * 1024)} MiB; "
                              "keep large data in payload files beside it") from None
    except UnreadableDocument as error:
        raise SubmissionError(f"{error}; a manager runs only a payload whose job.json is a regular file: "
                              "prepare the payload with prepare_job_payload") from None
    spec = parsed.get(data) if parsed is not None else None
    if spec is None:
        try:
            spec = parse_job_bytes(data, job_file)
        except codec.DocumentError as error:
            raise SubmissionError(str(error)) from None
        if parsed is not None and len(parsed) < PARSED_LIMIT:
            parsed[data] = spec
    chosen_tag = tag if tag is not None else spec.tag
    try:
        if chosen_tag is not None:
            check_tag(chosen_tag)
        key = JobKey(job_id or workspace.ports.ids.new_id(), chosen_tag)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    destination = workspace.layout.payload(placement, str(key))
    if job_id is not None:
        # A generated id is a fresh random UUID that no job holds: the exclusive reservation and the
        # no-replace rename would refuse a clash anyway, so only a chosen id costs these reads.
        if fs.exists(destination):
            raise SubmissionError(f"{destination}: already exists")
        check_id(workspace, Reservation(key.job_id, str(key), placement))
    staging = staging_path(workspace, key, token)
    files = list(_payload_files(fs, source))
    shape = path_shape(placement, key, files, staged=not move)
    if shapes is None or shape not in shapes:
        check_path_lengths(job_paths(workspace, source, placement, key, staging=None if move else staging,
                                     files=files), placement)
        if shapes is not None:
            shapes.add(shape)
    if move:
        _check_same_filesystem(fs, source, destination, workspace.root)
    # Per payload, never through ``runner_check``: a batch checks that once per runner reference.
    check_payload_runner(fs, source, spec)
    if runner_check is None:
        warning = check_runner(workspace, spec, allow_missing=allow_missing_runner, payload=source)
    else:
        warning = runner_check(spec, source)
    return Planned(source, placement, key, spec, destination, staging, warning)


def plan_spec(
    workspace: WorkspaceHandle,
    spec: JobSpec,
    placement: str,
    *,
    label: str,
    tag: str | None = None,
    runner_check: Callable[[JobSpec, str | None], str | None] | None = None,
    shapes: set[tuple[object, ...]] | None = None,
    token: str | None = None,
) -> Planned:
    """:func:`plan_submission` of the payload ``prepare_job_payload(DIR, spec)`` would make, without the directory.

    The job.json bytes are the prepared payload's (:meth:`.JobSpec.to_bytes`, refused as a
    reader refuses them); the job gets a fresh id. ``label`` names the job in messages. That
    payload is its job.json alone, so a payload runner is refused (:func:`check_spec_runner`).
    Reads only.
    """
    try:
        placement = check_placement(placement)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    try:
        data = spec.to_bytes()
    except codec.DocumentError as error:
        raise SubmissionError(str(error)) from None
    chosen_tag = tag if tag is not None else spec.tag
    try:
        if chosen_tag is not None:
            check_tag(chosen_tag)
        key = JobKey(workspace.ports.ids.new_id(), chosen_tag)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    destination = workspace.layout.payload(placement, str(key))
    staging = staging_path(workspace, key, token)
    shape = path_shape(placement, key, (JOB_FILE,), staged=True)
    if shapes is None or shape not in shapes:
        check_path_lengths(job_paths(workspace, label, placement, key, staging=staging, files=(JOB_FILE,)), placement)
        if shapes is not None:
            shapes.add(shape)
    check_spec_runner(spec, label)
    if runner_check is None:
        warning = check_runner(workspace, spec, allow_missing=False)
    else:
        warning = runner_check(spec, None)
    return Planned(label, placement, key, spec, destination, staging, warning, data)


def staging_token(workspace: WorkspaceHandle) -> str:
    """A fresh name for the staging copies of one submission or batch (the job ids tell its copies apart)."""
    return workspace.ports.ids.new_hex(12)


def staging_path(workspace: WorkspaceHandle, key: JobKey, token: str | None) -> str:
    """``tmp/submit-<job-id>-<token>``: where the job's copy is staged, a name of this submission's own.

    The job id alone is not: two submissions of one chosen id (a replay, or a race a
    reservation settles only later) would copy into, and remove, each other's copy.
    """
    return f"{workspace.layout.tmp}/submit-{key.job_id}-{token or staging_token(workspace)}"


def check_id(workspace: WorkspaceHandle, reservation: Reservation) -> None:
    """Refuse a job id another job holds: by its reservation or, in a workspace older than reservations,
    by the directories it left. Reads only."""
    fs, layout = workspace.fs, workspace.layout
    try:
        check_job_id(fs, layout, reservation)
    except JobIdTaken as taken:
        raise SubmissionError(id_refusal(reservation.placement, taken)) from None
    trace = job_id_traces(fs, layout, reservation.job_id)
    if trace is not None:
        raise SubmissionError(
            f"cannot submit at placement {reservation.placement!r}: job id {reservation.job_id} was used by "
            f"another job already ({trace} exists); {_FRESH_ID}"
        )


def id_refusal(placement: str, taken: JobIdTaken) -> str:
    return f"cannot submit at placement {placement!r}: {taken}; {_FRESH_ID}"


_FRESH_ID = "choose another job id, or let submission generate a fresh one"


# -- checks before anything is written -----------------------------------------------------------
def path_shape(placement: str, key: JobKey, files: Sequence[str], *, staged: bool) -> tuple[object, ...]:
    """What decides :func:`check_path_lengths` of :func:`job_paths`: the placement, the payload's names, and
    the byte lengths of the job key and id (every other component is the workspace's own).

    Two jobs of one shape get the same verdict, so a batch checks each shape once.
    """
    return placement, _size(str(key)), _size(key.job_id), tuple(files), staged


def job_paths(
    workspace: WorkspaceHandle, source: str, placement: str, key: JobKey, *, staging: str | None,
    files: Sequence[str] | None = None,
) -> Iterator[tuple[str, bool]]:
    """``(path, depends_on_placement)`` for the longest paths the job will ever use.

    The payload's files below the payload directory (``files``, relative, when the
    caller has listed them already), the staged copy, the copies an attempt seeds into
    its workdir, and the markers of every state kind (with room for any generation and
    record reference).
    """
    layout = workspace.layout
    destination = layout.payload(placement, str(key))
    attempt = layout.attempt_dir(key.job_id, 0, key.job_id)
    workdirs = (f"{attempt}{'0' * ATTEMPT_PREFIX_RESERVE}/workdir", layout.persistent_workdir(key.job_id))
    for relative in _payload_files(workspace.fs, source) if files is None else files:
        yield f"{destination}/{relative}", True
        if staging is not None:
            yield f"{staging}/{relative}", False
        for workdir in workdirs:
            yield f"{workdir}/{relative}", False
    marker_name = f"{key}{'x' * MARKER_SUFFIX_RESERVE}"
    longest_kind = max((kind.value for kind in StateKind), key=len)
    for tree in (layout.state, layout.quarantine):
        yield f"{tree}/{longest_kind}/{placement}/{marker_name}", True


def _payload_files(fs: Filesystem, source: str) -> Iterator[str]:
    """Every name below ``source``, relative to it (symlinks are not followed)."""
    return (name for name, _entry in walk_tree(fs, source))


def _size(text: str) -> int:
    """Bytes of ``text`` in the filesystem's encoding (ASCII, the common case, without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))


def check_path_lengths(paths: Iterator[tuple[str, bool]], placement: str) -> None:
    """Refuse, naming the placement, a path with a component over NAME_MAX or a length over PATH_MAX."""
    for part in placement.split("/"):
        if _size(part) > NAME_MAX:
            raise SubmissionError(
                f"placement {_clip(placement)} is too long for the filesystem: its component {_clip(part)} is "
                f"{_size(part)} bytes, more than the {NAME_MAX}-byte name limit; choose a shorter placement"
            )
    checked: set[str] = set()  # the same components recur in every path: check each once
    for path, by_placement in paths:
        for part in path.split("/"):
            if part in checked:
                continue
            checked.add(part)
            if _size(part) > NAME_MAX:
                raise SubmissionError(
                    f"placement {_clip(placement)}: the payload name {_clip(part)} is {_size(part)} bytes, more than "
                    f"the {NAME_MAX}-byte name limit; rename it in the payload"
                )
        if _size(path) >= PATH_MAX:
            fix = "choose a shorter placement" if by_placement else "shorten the payload's file names"
            raise SubmissionError(
                f"placement {_clip(placement)} is too long for the filesystem: the job would use the path "
                f"{_clip(path)} of {_size(path)} bytes, more than the {PATH_MAX - 1}-byte path limit; "
                f"{fix} (or use a workspace at a shorter path)"
            )


def _clip(text: str, keep: int = 40) -> str:
    return repr(text) if len(text) <= 2 * keep else repr(f"{text[:keep]}...{text[-keep:]}")


def _device(fs: Filesystem, path: str) -> int | None:
    """The device of ``path``, or of its nearest existing ancestor; symlinked ancestors are followed."""
    hops = 0
    while True:
        info = fs.lstat(path)
        if info is None:
            parent = posixpath.dirname(path)
            if parent == path:
                return None
            path = parent
        elif info.is_symlink and hops < _SYMLINK_HOPS:
            hops += 1
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), fs.readlink(path)))
        else:
            return info.device


def _check_same_filesystem(fs: Filesystem, source: str, destination: str, root: str) -> None:
    if _device(fs, source) != _device(fs, posixpath.dirname(destination)):
        raise SubmissionError(_cross_device(source, root))


def _cross_device(source: str, root: str) -> str:
    return (
        f"--move cannot rename {source} into the workspace at {root}: they are on different filesystems; "
        "drop --move to copy the payload instead"
    )


def _publish_command(fs: Filesystem, payload: str | None, spec: JobSpec, workspace: str, *,
                     replace: bool = False) -> str:
    """The command that publishes the runner ``spec`` pins into ``workspace`` (as a hint names it: ``REMOTE:PATH``
    in a forwarded command, which sends the file there): from the payload's file of that digest when there is one.

    The runner's name in the store says nothing about the file a user has: a job that
    pins ``run.sh`` may have been made from ``trivial.sh``. So the source is a real file
    (found by its digest), or a placeholder said to be the file with that digest.
    """
    tail = f"--workspace {workspace} --name {spec.runner_path}{' --replace' if replace else ''}"
    if payload is not None and spec.runner_sha256:
        for relative, entry in walk_tree(fs, payload, keep=lambda path, _entry: path != PRIVATE_DIR):
            if entry.is_file and not entry.is_symlink and relative != JOB_FILE:
                path = f"{payload}/{relative}"
                if fs_digest(fs, path) == spec.runner_sha256:
                    return f"'httk workflow runner publish {path} {tail}'"
    return f"'httk workflow runner publish FILE {tail}' (FILE: the runner with that sha256)"


def check_runner(
    workspace: WorkspaceHandle, spec: JobSpec, *, allow_missing: bool, payload: str | None = None
) -> str | None:
    """Refuse a job whose workspace runner the manager would refuse at attempt start.

    The manager's own rule decides (:func:`.runners.resolve_runner`, then
    :func:`.runners.digest_mismatch`): a runner that does not resolve is refused,
    or with ``allow_missing`` accepted with the returned warning, since it can still
    be published before the job runs; one that resolves to other bytes is always
    refused, naming both digests. Payload and installed runners are checked by
    ``precheck`` and at attempt start: their files are not the workspace's. The
    publish command a refusal suggests names ``payload``'s file of the pinned digest
    when it has one.
    """
    if spec.runner_source != "workspace":
        return None
    fs, root, name = workspace.fs, workspace.root, spec.runner_path
    owner = fs.lstat(root)
    try:
        # The account only matters to payload runners; the workspace's owner stands in.
        found = resolve_runner(fs, workspace.layout, root, spec, (), uid=owner.uid if owner else -1)
    except RunnerUnavailable:
        problem = f"job.json pins workspace runner {name!r} (sha256 {spec.runner_sha256}), which {root} lacks"
        # Only on refusal: it may hash the payload's files.
        publish = _publish_command(fs, payload, spec, workspace.reference)
        if allow_missing:
            return f"{problem}; publish it with {publish} before the job runs, or it fails with runner_unavailable"
        raise SubmissionError(f"{problem}; publish it with {publish}, or submit with --allow-missing-runner") from None
    mismatch = digest_mismatch(fs, found, spec)
    if mismatch is None:
        return None
    actual = mismatch.details["actual"]
    if found == object_path(workspace.layout, spec.runner_sha256 or "", name):
        # Publishing never rewrites an existing object: the damaged one must go first.
        fix = (f"remove {posixpath.dirname(found)}, then publish the runner again with "
               f"{_publish_command(fs, payload, spec, workspace.reference)}")
    else:
        again = _publish_command(fs, payload, spec, workspace.reference, replace=True)
        fix = (f"publish the pinned bytes with {again}, "
               f"or prepare the payload against sha256 {actual}")
    raise SubmissionError(
        f"job.json pins workspace runner {name!r} at sha256 {spec.runner_sha256}, but {root} resolves it to "
        f"{found} with sha256 {actual} (runner_mismatch at attempt start); {fix}"
    )


#: What a payload runner refusal adds: it can never be fixed once the job is submitted.
_PAYLOAD_FIX = ("or name a published one with runner source 'workspace' (submission copies the payload as it is, "
                "so --allow-missing-runner cannot accept it: the job would fail with runner_unavailable)")
#: The names a runner directory starts by, as the manager looks for them at attempt start.
_ENTRY_POINTS = ("run", "run.py", "run.sh")


def check_payload_runner(fs: Filesystem, source: str, spec: JobSpec) -> None:
    """Refuse a payload runner that the manager would refuse, whatever account runs the job.

    The payload is copied (or moved) into the workspace as it is, links and modes
    included, and nothing adds a runner to it later: a runner missing from ``source`` (or one that is,
    or is reached through, a symbolic link, a FIFO, socket or device, a tree holding a
    link, a directory without ``run``, ``run.py`` or ``run.sh``) fails every attempt with
    ``runner_unavailable`` (:func:`.runners.resolve_runner`, then the entry point the
    attempt looks for). The owner and the group- or world-writable bits it also checks
    are not refused here: the owner depends on the manager's account, and a mode is
    fixed with ``chmod`` after submission. Reads only.
    """
    if spec.runner_source != "payload":
        return
    path = spec.runner_path
    parts = [part for part in path.split("/") if part not in ("", ".")]
    job_file = f"{source}/{JOB_FILE}"
    if not parts:
        raise SubmissionError(f"{job_file} names payload runner {path!r}, the payload directory itself; name the "
                              f"runner file or directory inside it, {_PAYLOAD_FIX}")
    current = source
    for index, part in enumerate(parts):
        current = f"{current}/{part}"
        info = fs.lstat(current)
        last = index == len(parts) - 1
        if info is None or not (last or info.is_dir or info.is_symlink):
            where = "" if info is None else f" ({current} is not a directory)"
            raise SubmissionError(f"{job_file} names payload runner {path!r}, which {source} lacks{where}; put the "
                                  f"runner there, {_PAYLOAD_FIX}")
        if info.is_symlink:
            what = "is a symbolic link" if last else f"is reached through the symbolic link {current}"
            raise SubmissionError(f"{job_file} names payload runner {path!r}, which {what}; copy the runner in "
                                  f"place of the link, {_PAYLOAD_FIX}")
    if not (info.is_file or info.is_dir):
        raise SubmissionError(f"{job_file} names payload runner {path!r}, which is not a regular file or directory "
                              f"({current}); put the runner there, {_PAYLOAD_FIX}")
    if not info.is_dir:
        return
    for _name, entry in walk_tree(fs, current):
        if entry.is_symlink:
            raise SubmissionError(f"{job_file} names payload runner {path!r}, whose tree holds the symbolic link "
                                  f"{entry.path}; copy the file in place of the link, {_PAYLOAD_FIX}")
    if not any(fs.lstat(f"{current}/{name}") is not None for name in _ENTRY_POINTS):
        raise SubmissionError(f"{job_file} names payload runner {path!r}, a directory with no "
                              f"{', '.join(_ENTRY_POINTS[:-1])} or {_ENTRY_POINTS[-1]}; add one, {_PAYLOAD_FIX}")


def check_spec_runner(spec: JobSpec, label: str) -> None:
    """:func:`check_payload_runner` of a job submitted from its definition, whose payload is its job.json alone."""
    if spec.runner_source != "payload":
        return
    parts = [part for part in spec.runner_path.split("/") if part not in ("", ".")]
    if parts == [JOB_FILE]:
        return  # a regular file the payload does hold: the manager resolves it
    raise SubmissionError(
        f"{label} names payload runner {spec.runner_path!r}, but a job submitted from its definition has a payload "
        f"of job.json alone; prepare a payload directory holding the runner (prepare_job_payload) and submit it, "
        f"{_PAYLOAD_FIX}"
    )


# -- undoing a failed write ----------------------------------------------------------------------
def missing_ancestors(fs: Filesystem, path: str) -> list[str]:
    """The parent directories of ``path`` that do not exist yet, deepest first."""
    missing = []
    parent = posixpath.dirname(path)
    while parent != posixpath.dirname(parent) and fs.lstat(parent) is None:
        missing.append(parent)
        parent = posixpath.dirname(parent)
    return missing


def _undo(
    fs: Filesystem, source: str, destination: str, staging: str, created: list[str], *, move: bool, placed: bool,
    release: Callable[[], None] | None = None,
) -> None:
    """Put everything back as it was before this submission wrote anything.

    ``release`` drops the id reservation this submission made, unless the payload name
    is now another submission's of the same job key (which won the rename and holds it:
    a payload, so it has a ``job.json``); a directory no submission made gives it back.
    """
    if placed and move:
        fs.rename(destination, source, durable=False)
    elif placed:
        fs.rmtree(destination)
    if not move:
        fs.rmtree(staging)
    if release is not None and (placed or not fs.exists(f"{destination}/{JOB_FILE}")):
        release()
    for directory in sorted(set(created), key=len, reverse=True):
        try:
            fs.rmdir(directory)
        except OSError:
            pass  # not empty: another submission placed a job there meanwhile


def write_refusal(error: OSError, source: str, placement: str, root: str, *, move: bool) -> str:
    if move and error.errno == errno.EXDEV:
        # Two mounts of one filesystem share a device number and still refuse a rename between them.
        return _cross_device(source, root)
    reason = error.strerror or str(error)
    return f"cannot submit {source} at placement {placement!r}: {reason}; nothing was submitted"
