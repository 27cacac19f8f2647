"""How a command forwarded to ``REMOTE:WS`` is run there, and the local files it names sent first.

Every remote ``httk`` runs through :data:`LAUNCH`, one fixed ``sh -c`` script that
puts ``~/.local/bin`` (where ``pipx install`` puts ``httk``) at the end of ``PATH``,
optionally enters a directory, and exits 127 without a word when the command is
not there, so a missing httk is told apart from httk's own output even while that
output is streamed. Its arguments travel as an argument vector; the transport
quotes them (the one place a remote command line is composed).

A command that names local files (``job submit WS PAYLOAD``, ``job new --input
structure=POSCAR``, ``job debug WS PAYLOAD``) runs in a fresh directory made by
:data:`PREPARE` below the remote workspace's ``.httk-workflow/tmp/`` (else the
remote's ``$TMPDIR``), into which :func:`upload` copied those files first; the
caller removes the directory afterwards. A relative path without ``..`` keeps its
spelling there (:func:`staged_name`), so its argument is not rewritten and a value
that merely looks like a file name means the same on both sides; any other path
arrives as ``.upload/N/BASENAME``. Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

import attrs

from .. import codec
from ..ports import Filesystem, RemoteTransport
from ..store.workspaces import FORWARDED_ENV, UPLOADED_ENV
from .remotes import RemoteError

#: ``~/.local/bin`` last on PATH: a pipx-installed httk is found without setting httk_command.
_PATH = 'PATH="${PATH:+$PATH:}$HOME/.local/bin"; export PATH'
#: The first line of the adapter script ``remote check`` runs: it looks for httk where :data:`LAUNCH` does.
ADAPTER_PATH = _PATH
_FOUND = 'found=$(command -v "$1" 2>/dev/null) && [ -x "$found" ] || exit 127'

#: ``sh -c LAUNCH httk-workflow DIR REMOTE UPLOADED COMMAND...``: run COMMAND in DIR ('' = the login
#: directory) with ``HTTK_WORKFLOW_FORWARDED_AS=REMOTE`` (unless ''): its fix hints then name workspaces
#: ``REMOTE:PATH``; and with ``HTTK_WORKFLOW_UPLOADED=UPLOADED`` (unless ''): see :func:`uploaded_document`.
LAUNCH = f"""{_PATH}
if [ -n "$1" ]; then cd "$1" || exit 125; fi
if [ -n "$2" ]; then {FORWARDED_ENV}=$2; export {FORWARDED_ENV}; fi
if [ -n "$3" ]; then {UPLOADED_ENV}=$3; export {UPLOADED_ENV}; fi
shift 3
{_FOUND}
exec "$@"
"""

#: ``sh -c RESOLVE httk-workflow NAME``: the path NAME runs as (exit 127 when there is none).
RESOLVE = f"""{_PATH}
{_FOUND}
printf '%s\\n' "$found"
"""

#: ``sh -c PREPARE httk-workflow HTTK REFERENCE REGISTERED``: print the workspace's absolute
#: path ('' = unknown there) and a new private directory below its .httk-workflow/tmp (else
#: $TMPDIR). REFERENCE is the workspace argument as given ('' = the default); REGISTERED is the
#: path the remote registry holds for it. A name that exists as a path wins, as in 'resolve'. The
#: directory is printed as its real path (no link, no '//'): the one the command there sees as its
#: working directory, so the paths it names below it are spelled as the client looks for them.
PREPARE = f"""{_PATH}
{_FOUND}
ref=$2 ws=
case $ref in
  '') ws=$3 ;;
  */*|.|..) ws=$ref ;;
  *) if [ -e "$ref" ]; then ws=$ref; else ws=$3; fi ;;
esac
case $ws in '~') ws=$HOME ;; '~/'*) ws=$HOME/${{ws#'~/'}} ;; esac
case $ws in ''|/*) ;; *) ws=$PWD/$ws ;; esac
make_in() {{ [ -d "$1" ] && [ -w "$1" ] && dir=$(mktemp -d "$1/httk-upload.XXXXXXXX" 2>/dev/null) &&
  dir=$(cd "$dir" && pwd -P); }}
dir=
if {{ [ -n "$ws" ] && make_in "$ws/.httk-workflow/tmp"; }} || make_in "${{TMPDIR:-/tmp}}"; then
  printf '%s\\n%s\\n' "$ws" "$dir"
else
  echo "cannot make a temporary directory in ${{ws:+$ws/.httk-workflow/tmp or }}${{TMPDIR:-/tmp}}" >&2
  exit 1
fi
"""

#: ``sh -c LINK httk-workflow TARGET NAME ...``: make each symbolic link.
LINK = 'while [ $# -gt 1 ]; do ln -s -- "$1" "$2" || exit 1; shift 2; done'

#: Directories made by one ``mkdir -p`` call (keeps each command line far below ARG_MAX).
_BATCH = 500


def launch_argv(
    httk_command: Sequence[str], args: Sequence[str], cwd: str = "", *, remote: str = "", uploaded: str = ""
) -> list[str]:
    """The argument vector that runs ``HTTK ARGS`` there through :data:`LAUNCH`, forwarded as ``remote``."""
    return ["sh", "-c", LAUNCH, "httk-workflow", cwd, remote, uploaded, *httk_command, *args]


def uploaded_document(remote_dir: str, uploads: Sequence[Upload]) -> str:
    """``HTTK_WORKFLOW_UPLOADED`` of a command run in ``remote_dir``: where each upload came from.

    A JSON object ``{"directory": REMOTE_DIR, "origins": {DESTINATION: LOCAL PATH}}``: the
    remote httk names a file it was sent by its local path, in what it records
    (``job new``'s input ``from``) and in what it says.
    """
    return codec.dumps({"directory": remote_dir, "origins": {item.destination: item.named for item in uploads}})


@attrs.frozen
class Upload:
    """One local file or directory tree, and where it goes below the remote directory (relative).

    ``origin`` is the local path as the user named it, made absolute (``source`` has its
    links resolved): what the remote's messages and records say instead of the upload.
    """

    source: str
    destination: str
    origin: str = ""

    @property
    def named(self) -> str:
        return self.origin or self.source


def staged_name(value: str, source: str, index: int) -> str:
    """Where the local path spelled ``value`` (absolute ``source``) goes below the remote directory.

    A relative spelling that stays inside keeps its name, so the argument that named it
    needs no rewriting; anything else becomes ``.upload/INDEX/BASENAME``.
    """
    normal = posixpath.normpath(value)
    if not posixpath.isabs(value) and normal not in (".", "..") and not normal.startswith("../"):
        return normal
    return f".upload/{index}/{posixpath.basename(source.rstrip('/')) or 'root'}"


def uploaded_origin(document: str, path: str, realpath: Callable[[str], str] = lambda path: path) -> str:
    """The local path an upload below the directory of ``document`` (:func:`uploaded_document`) came from.

    ``path`` (absolute) is named by that upload's local path, or by the same path below
    it for a file inside an uploaded tree; any other path, or an unreadable ``document``,
    is returned as it is: a record then names what it would name without one. ``realpath``
    gives the directory as the command's working directory spells it (links resolved).
    """
    try:
        found = codec.decode_object(document.encode(), UPLOADED_ENV) if document else {}
    except codec.DocumentError:
        return path
    directory, origins = found.get("directory"), found.get("origins")
    if not isinstance(directory, str) or not isinstance(origins, dict):
        return path
    inside = None
    for spelling in {directory, realpath(directory)}:  # as the client was told it, and as the cwd is
        prefix = spelling.rstrip("/") + "/"
        if path.startswith(prefix):
            inside = path[len(prefix):]
    if inside is None:
        return path
    for destination, local in origins.items():
        if isinstance(local, str) and (inside == destination or inside.startswith(f"{destination}/")):
            return local + inside[len(destination):]
    return path


def upload(fs: Filesystem, transport: RemoteTransport, uploads: Sequence[Upload], remote_dir: str) -> int:
    """Copy every upload below ``remote_dir`` there (modes kept, symlinks recreated); the files sent."""
    directories: list[str] = []
    files: list[tuple[str, str]] = []
    links: list[str] = []
    for item in uploads:
        target = f"{remote_dir}/{item.destination}"
        parent = posixpath.dirname(target)
        if parent != remote_dir:
            directories.append(parent)
        _walk(fs, item.source, target, directories, files, links)
    for start in range(0, len(directories), _BATCH):
        _run(transport, ["mkdir", "-p", "--", *directories[start:start + _BATCH]], "make directories")
    for local, remote in files:
        transport.put(local, remote)
    if links:
        _run(transport, ["sh", "-c", LINK, "httk-workflow", *links], "make symbolic links")
    return len(files)


def _walk(
    fs: Filesystem, source: str, target: str, directories: list[str], files: list[tuple[str, str]], links: list[str]
) -> None:
    info = fs.lstat(source)
    if info is None:
        raise RemoteError(f"{source}: no such file here")
    if info.is_symlink:
        links += [fs.readlink(source), target]
    elif info.is_dir:
        directories.append(target)
        for entry in sorted(fs.scandir(source), key=lambda each: each.name):
            _walk(fs, entry.path, f"{target}/{entry.name}", directories, files, links)
    elif info.is_file:
        files.append((source, target))
    else:
        raise RemoteError(f"{source}: neither a file nor a directory; only those can be sent to a remote")


def _run(transport: RemoteTransport, argv: list[str], what: str) -> None:
    result = transport.run(argv)
    if result.returncode != 0:
        problem = " ".join(result.stderr.split())[:200] or f"exit status {result.returncode}"
        raise RemoteError(f"cannot {what} there ({problem}); check the remote's free space and permissions")


def remove_argv(remote_dir: str) -> list[str]:
    """The command that removes a directory :data:`PREPARE` made."""
    return ["rm", "-rf", "--", remote_dir]
