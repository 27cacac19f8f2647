"""Transfer bundles: one checksummed directory holding everything of the jobs a transfer moves.

```text
bundle/
  manifest.json                       httk-workflow-transfer-bundle v1
  jobs/<job-id>/frames.json           the job's journal frames, oldest first
  jobs/<job-id>/payload/              <placement>/<job-key>/ (job.json, runner, .httk-job/ ...)
  jobs/<job-id>/attempts/             .httk-workflow/attempts/<job-id>/
  jobs/<job-id>/workdir/              .httk-workflow/workdirs/<job-id>/
  jobs/<job-id>/data/                 .httk-workflow/data/<job-id>/ (transactional data)
  jobs/<job-id>/joins/                .httk-workflow/joins/<job-id>/ (its children's notes)
  runners/objects/<sha256>/<basename> every workspace runner the jobs pin
```

The manifest lists every other entry of the bundle: a directory, a file with its
``size``, ``sha256`` and ``executable`` bit, or a link with its ``target``; the
sha256 of the manifest's own bytes is recorded in both ledgers, so a bundle is
verified end to end. A bundle is built in ``bundle.tmp/`` and renamed into
place, so a crash leaves either no bundle or a whole one. Spec: 000 "Running on
a remote", "Share one runner between many jobs".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import codec
from ..domain.model import control_character
from ..ports import Entry, Filesystem, walk_tree
from .layout import Layout

BUNDLE_FORMAT = "httk-workflow-transfer-bundle"
FRAMES_FORMAT = "httk-workflow-transfer-frames"
MANIFEST = "manifest.json"
#: The trees of one job, in the order they are bundled and put back.
TREES = ("payload", "attempts", "workdir", "data", "joins")
_CHUNK = 8 * 1024 * 1024
#: How many problems a verification names before it stops looking.
_PROBLEMS = 5


class BundleError(ValueError):
    """A bundle that is incomplete, damaged or malformed; the message names the first problem."""


def job_trees(layout: Layout, placement: str, job_key: str, job_id: str) -> dict[str, str]:
    """Where each tree of a job lives in a workspace (some may not exist)."""
    return {
        "payload": layout.payload(placement, job_key),
        "attempts": layout.job_attempts(job_id),
        "workdir": layout.persistent_workdir(job_id),
        "data": layout.data_dir(job_id),
        "joins": f"{layout.control}/joins/{job_id}",
    }


def file_digest(fs: Filesystem, path: str) -> tuple[int, str]:
    """``(size, sha256)`` of one regular file, read in chunks."""
    digest = hashlib.sha256()
    offset = 0
    while True:
        chunk = fs.read_range(path, offset, _CHUNK)
        if not chunk:
            return offset, digest.hexdigest()
        digest.update(chunk)
        offset += len(chunk)


def listing(fs: Filesystem, root: str) -> list[dict[str, Any]]:
    """Every entry below ``root`` (links not followed) as manifest entries, sorted by path."""
    out: list[dict[str, Any]] = []
    for name, entry in walk_tree(fs, root, _not_manifest):
        if entry.is_symlink:
            out.append({"path": name, "type": "link", "target": fs.readlink(entry.path)})
        elif entry.is_dir:
            out.append({"path": name, "type": "dir"})
        else:
            info = fs.lstat(entry.path)
            size, sha256 = file_digest(fs, entry.path)
            executable = bool(info is not None and info.mode & 0o111)
            out.append({"path": name, "type": "file", "size": size, "sha256": sha256, "executable": executable})
    return sorted(out, key=lambda item: item["path"])


def frames_document(frames: Sequence[Mapping[str, Any]]) -> bytes:
    """``frames.json``: ``[{record_ref, frame}]`` oldest first."""
    return codec.encode({"format": FRAMES_FORMAT, "format_version": 1, "frames": list(frames)})


def build(
    fs: Filesystem,
    directory: str,
    jobs: Sequence[Mapping[str, Any]],
    trees: Mapping[str, Mapping[str, str]],
    frames: Mapping[str, Sequence[Mapping[str, Any]]],
    runners: Sequence[Mapping[str, Any]],
    header: Mapping[str, Any],
    *,
    durable: bool,
) -> tuple[dict[str, Any], str]:
    """Copy the jobs' trees, frames and runner objects into ``directory`` and return (manifest, its sha256).

    ``trees`` maps a job id to its tree paths (:func:`job_trees`), ``runners`` lists
    ``{name, sha256, kind, object}`` with the store path of each object. Built in a
    sibling ``.tmp`` directory and renamed into place; a bundle left by an interrupted
    build is replaced.
    """
    staging = f"{directory}.tmp"
    fs.rmtree(staging)
    for job in jobs:
        job_id = str(job["job_id"])
        base = f"{staging}/jobs/{job_id}"
        fs.makedirs(base)
        for name in TREES:
            source = trees[job_id][name]
            if fs.lstat(source) is not None:
                fs.copy_tree(source, f"{base}/{name}", durable=False)
        fs.write_new(f"{base}/frames.json", frames_document(frames[job_id]), durable=False)
    for runner in runners:
        target = f"{staging}/runners/objects/{runner['sha256']}/{runner['object'].rsplit('/', 1)[-1]}"
        if fs.lstat(target) is None:
            fs.copy_tree(str(runner["object"]), target, durable=False)
    entries = listing(fs, staging)
    manifest = {
        "format": BUNDLE_FORMAT,
        "format_version": 1,
        **header,
        "jobs": list(jobs),
        "runners": [{key: value for key, value in runner.items() if key != "object"} for runner in runners],
        "files": entries,
        "bytes": sum(int(entry.get("size", 0)) for entry in entries),
    }
    data = codec.encode(manifest)
    fs.write_new(f"{staging}/{MANIFEST}", data, durable=False)
    if durable:
        fs.sync_tree(staging)
    fs.rmtree(directory)
    fs.rename(staging, directory, durable=durable)
    return manifest, hashlib.sha256(data).hexdigest()


def read_manifest(fs: Filesystem, directory: str, expected_sha256: str | None = None) -> dict[str, Any]:
    """The manifest of the bundle in ``directory``, checked against ``expected_sha256`` when given."""
    path = f"{directory}/{MANIFEST}"
    try:
        data = fs.read_document(path, limit=None)
    except FileNotFoundError:
        raise BundleError(f"{path} does not exist") from None
    return parse_manifest(data, path, expected_sha256)


def parse_manifest(data: bytes, where: str, expected_sha256: str | None = None) -> dict[str, Any]:
    """A manifest's bytes as a checked document; every path is refused unless it stays inside the bundle."""
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise BundleError(f"{where} is not the manifest the source recorded (sha256 differs)")
    try:
        manifest = codec.decode_object(data, where)
    except codec.DocumentError as error:
        raise BundleError(str(error)) from None
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("format_version") != 1:
        raise BundleError(f"{where}: not an {BUNDLE_FORMAT} version 1 document")
    files = manifest.get("files")
    if not isinstance(files, list) or not isinstance(manifest.get("jobs"), list):
        raise BundleError(f"{where}: files and jobs must be lists")
    for entry in files:
        if not isinstance(entry, dict) or entry.get("type") not in ("dir", "file", "link"):
            raise BundleError(f"{where}: a files entry must be a dir, file or link")
        check_relative(str(entry.get("path", "")), where)
    return manifest


def check_relative(path: str, where: str) -> str:
    """``path`` when it is a relative path below the bundle (no ``..``, no control characters)."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise BundleError(f"{where}: {path!r} is not a path inside the bundle")
    if control_character(path) is not None:
        raise BundleError(f"{where}: {path!r} holds a control character")
    return path


def entry_problem(fs: Filesystem, directory: str, entry: Mapping[str, Any]) -> str | None:
    """What is wrong with one manifest entry in ``directory``, or ``None`` when it is intact."""
    path = f"{directory}/{entry['path']}"
    info = fs.lstat(path)
    kind = entry["type"]
    if info is None:
        return f"{entry['path']} is missing"
    if kind == "dir":
        return None if info.is_dir and not info.is_symlink else f"{entry['path']} is not a directory"
    if kind == "link":
        if not info.is_symlink or fs.readlink(path) != entry.get("target"):
            return f"{entry['path']} is not the link the manifest lists"
        return None
    if not info.is_file or info.is_symlink:
        return f"{entry['path']} is not a regular file"
    if info.size != entry.get("size"):
        return f"{entry['path']} has {info.size} bytes, the manifest lists {entry.get('size')}"
    if bool(info.mode & 0o111) != bool(entry.get("executable")):
        return f"{entry['path']} lost its executable bit"
    if file_digest(fs, path)[1] != entry.get("sha256"):
        return f"{entry['path']} fails its sha256"
    return None


def verify(fs: Filesystem, directory: str, manifest: Mapping[str, Any]) -> list[str]:
    """Every problem of the bundle in ``directory`` against ``manifest`` (extra entries included)."""
    problems: list[str] = []
    listed = {str(entry["path"]) for entry in manifest["files"]}
    for entry in manifest["files"]:
        problem = entry_problem(fs, directory, entry)
        if problem is not None:
            problems.append(problem)
            if len(problems) >= _PROBLEMS:
                return problems
    for entry in listing_names(fs, directory):
        if entry not in listed:
            problems.append(f"{entry} is not in the manifest")
            if len(problems) >= _PROBLEMS:
                break
    return problems


def listing_names(fs: Filesystem, root: str) -> Iterable[str]:
    """The relative names below ``root`` (links not followed), the manifest itself excluded."""
    return (name for name, _entry in walk_tree(fs, root, _not_manifest))


def _not_manifest(name: str, _entry: Entry) -> bool:
    return name != MANIFEST


def read_frames(fs: Filesystem, directory: str, job_id: str) -> list[dict[str, Any]]:
    """The ``[{record_ref, frame}]`` list a bundle carries for one job."""
    path = f"{directory}/jobs/{job_id}/frames.json"
    try:
        document = codec.decode_object(fs.read_document(path, limit=None), path)
    except FileNotFoundError:
        raise BundleError(f"{path} is missing") from None
    except codec.DocumentError as error:
        raise BundleError(str(error)) from None
    frames = document.get("frames")
    if document.get("format") != FRAMES_FORMAT or not isinstance(frames, list) or not frames:
        raise BundleError(f"{path}: expected {FRAMES_FORMAT} with at least one frame")
    for item in frames:
        if not isinstance(item, dict) or not isinstance(item.get("frame"), dict):
            raise BundleError(f"{path}: every entry is {{record_ref, frame}}")
    return frames
