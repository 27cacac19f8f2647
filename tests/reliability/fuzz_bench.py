"""The fuzz bench of tests/reliability: one workspace, in memory or on real files, with scripted runners.

A :class:`Bench` holds a workspace, submits jobs whose runners publish scripted
outcome trees, puts a mutated document or a non-regular file (:class:`Special`)
where a document belongs, runs managers until idle on fake process control, and
runs every reader an operator has (fsck, status, show, log, why, collect,
precheck) through the command line in-process, checking that each one ends in a
designed exit. The ``check_*`` helpers are the campaign's shared invariants.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import socket
import time
from collections.abc import Callable
from typing import Any

import attrs
from click.testing import CliRunner
from dependency_injector import providers
from reliability_support import SPECIALS, Special, documented_codes, mutate_document, where

from httk.workflow import codec
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.bootstrap import Container
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.attempts import LaunchSettings
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.operations.submission import submit
from httk.workflow.ports import DOCUMENT_LIMIT
from httk.workflow.protocol import JobSpec
from httk.workflow.store.journal import SEGMENT_HEADER
from httk.workflow.store.markers import Marker
from httk.workflow.store.workspaces import Ports, WorkspaceService
from httk.workflow.testing import FakeClock, FakeProcessControl, SequentialIds, memory_ports

SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})
OUTCOME = {"format": "httk-workflow-outcome", "format_version": 1}
#: A refusal that carries an exception type was an unexpected exception the manager contained.
CONTAINED_CRASH = re.compile(r"^[\w ]+ failed: [A-Za-z_][\w.]*: ")
CODES = documented_codes()
#: The journal's damage codes: what ``fsck --repair --quarantine-unrepairable`` must leave none of.
FRAME_CODES = {"missing_segment", "short_read", "checksum_mismatch", "reference_mismatch", "identity_mismatch"}


# -- processes -------------------------------------------------------------------------------------

class StrictProcessControl(FakeProcessControl):
    """:class:`FakeProcessControl` refusing what ``execve`` refuses, as the real adapter would meet it."""

    def launch(self, argv: Any, *, cwd: str, env: Any, stdout_path: str, stderr_path: str) -> Any:
        for text in (*argv, cwd, *env, *env.values()):
            if "\x00" in text:
                raise ValueError("embedded null byte")
            os.fsencode(text)  # a lone surrogate raises UnicodeEncodeError, as subprocess does
        for name in env:
            if not name or "=" in name:
                raise ValueError(f"illegal environment variable name {name!r}")
        return super().launch(argv, cwd=cwd, env=env, stdout_path=stdout_path, stderr_path=stderr_path)


Tree = dict[str, "bytes | Special | dict[str, Any]"]


class Bench:
    """One workspace with scripted runners: in memory, or on real files below ``base`` (for specials)."""

    def __init__(self, base: str | None = None, *, durable: bool = False) -> None:
        self.posix = base is not None
        if base is None:
            self.ports = memory_ports()
            base = ""
        else:
            self.ports = Ports(fs=PosixFilesystem(), clock=FakeClock(time.time()), ids=SequentialIds())
        self.fs = self.ports.fs
        self.uid = os.getuid() if self.posix else self.fs.uid
        self.base, self.root, self.src, self.outside = base, f"{base}/ws", f"{base}/src", f"{base}/outside"
        self.handle = WorkspaceService(self.ports).init(self.root, durable=durable)
        if self.posix:  # a missing frame is waited for this long on real files
            self.handle.set_policy("visibility_deadline_seconds", 0.05)
        self.fs.write_atomic(f"{self.outside}/secret.txt", b"outside\n", durable=False)
        #: job id -> what its runner publishes (called with the launch; ``None``: a plain succeed).
        self.trees: dict[str, Callable[[Any], Tree | None]] = {}
        self.good: list[Marker] = []
        self.proc = StrictProcessControl(self.ports.clock, self.behaviour, uid=self.uid)
        self._payloads = 0
        self._copies = 0

    @property
    def store(self) -> Any:
        return self.handle.store

    # -- jobs --------------------------------------------------------------------------------------
    def payload(self, job: JobSpec | bytes | None = None, runner: bytes = b"#!/bin/sh\n") -> str:
        self._payloads += 1
        path = f"{self.src}/p{self._payloads}"
        spec = job if job is not None else JobSpec(name="j", workflow="w", runner_path="run.sh")
        self.fs.write_atomic(f"{path}/job.json", spec if isinstance(spec, bytes) else spec.to_bytes(), durable=False)
        self.fs.write_atomic(f"{path}/run.sh", runner, durable=False)
        return path

    def submit(self, job: JobSpec | None = None, placement: str = "p",
               tree: Callable[[Any], Tree | None] | None = None) -> Marker:
        marker = submit(self.handle, self.payload(job), placement).marker
        if tree is not None:
            self.trees[marker.job_id] = tree
        return marker

    def add_good(self, count: int = 2) -> None:
        self.good += [self.submit(placement="good") for _ in range(count)]

    def marker(self, job_id: str) -> Marker | None:
        found = [marker for kind in StateKind for marker in self.store.iter_markers(kind) if marker.job_id == job_id]
        assert len(found) <= 1, f"job {job_id} has {len(found)} markers: {[m.relative_path() for m in found]}"
        return found[0] if found else None

    def kind(self, job_id: str) -> str | None:
        marker = self.marker(job_id)
        return marker.kind.value if marker else None

    # -- runners -----------------------------------------------------------------------------------
    def behaviour(self, launch: Any) -> int:
        builder = self.trees.get(launch.env["HTTK_WORKFLOW_JOB_ID"])
        tree = builder(launch) if builder is not None else None
        succeed = {"outcome.json": {**OUTCOME, "action": "succeed"}}
        self.publish(launch.env["HTTK_WORKFLOW_CONTROL_DIR"], tree or succeed)
        return 0

    def publish(self, control: str, tree: Tree) -> None:
        draft = f"{control}/outcome.tmp.1"
        self.fs.makedirs(draft)
        for relative, content in tree.items():
            self.place(f"{draft}/{relative}", content if not isinstance(content, dict) else codec.encode(content))
        self.fs.rename(draft, f"{control}/outcome.ready", durable=False)

    def place(self, path: str, content: bytes | Special) -> None:
        """Put ``content`` at ``path``, replacing what is there: bytes, or a :class:`Special`."""
        fs = self.fs
        info = fs.lstat(path)
        if info is not None:
            fs.rmtree(path)
        if isinstance(content, bytes):
            fs.write_atomic(path, content, durable=False)
            return
        fs.makedirs(os.path.dirname(path))
        what = content.what
        if what == "directory":
            fs.makedirs(f"{path}/inner.json")
        elif what == "fifo":
            os.mkfifo(path) if self.posix else fs.mkfifo(path)
        elif what == "symlink-inside":
            # A valid copy elsewhere in the workspace (not beside it: a second request or marker would count).
            self._copies += 1
            target = f"{self.root}/valid-copies/{self._copies}"
            fs.write_atomic(target, content.valid, durable=False)
            self._symlink(target, path)
        elif what == "symlink-outside":
            self._symlink(f"{self.outside}/secret.txt", path)
        elif what == "dangling-symlink":
            self._symlink(f"{self.outside}/nothing-here", path)
        elif what == "symlink-loop":
            self._symlink(path, path)
        elif what == "oversized":
            if self.posix:
                with open(path, "wb") as handle:
                    handle.truncate(DOCUMENT_LIMIT + 1)  # sparse: no 16 MiB written
            else:
                fs.write_atomic(path, b" " * (DOCUMENT_LIMIT + 1), durable=False)
        elif what == "empty":
            fs.write_atomic(path, b"", durable=False)
        elif what == "socket" and self.posix:
            self._socket(path)
        else:  # a socket in memory: the nearest thing the double has
            fs.mkfifo(path)

    def _symlink(self, target: str, path: str) -> None:
        os.symlink(target, path) if self.posix else self.fs.symlink(target, path)

    @staticmethod
    def _socket(path: str) -> None:
        # AF_UNIX paths are limited to 108 bytes: bind a short relative name from inside the directory.
        here = os.getcwd()
        os.chdir(os.path.dirname(path))
        try:
            server = socket.socket(socket.AF_UNIX)
            server.bind(os.path.basename(path))
            server.close()
        finally:
            os.chdir(here)

    # -- managers ----------------------------------------------------------------------------------
    def manager(self, name: str = "m-a", **config: Any) -> Manager:
        return Manager(self.handle, self.proc, SETTINGS, ManagerConfig(**config), manager_id=name,
                       out=lambda line: None)

    def run(self, name: str = "m-a", **config: Any) -> Manager:
        """A manager until idle; it must return 0 and must not have contained an unexpected exception."""
        manager = self.manager(name, **config)
        status = manager.run()
        assert status == 0, f"manager {name} exited {status}"
        crashes = [f"{key}: {reason}" for key, reason in manager.refused.items() if CONTAINED_CRASH.match(reason)]
        assert not crashes, f"manager {name} contained an unexpected exception: {crashes[0][:500]}"
        return manager

    def check_good(self) -> None:
        for marker in self.good:
            assert self.kind(marker.job_id) == "succeeded", f"good job {marker.key} is {self.kind(marker.job_id)}"

    def run_beside_good(self) -> Manager:
        """Add the good jobs, run a manager until idle and check they all succeeded beside the bad one."""
        self.add_good()
        manager = self.run()
        self.check_good()
        return manager

    # -- observations ------------------------------------------------------------------------------
    def snapshot(self, top: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
        """``path -> what`` for everything below ``top`` except the ``skip`` subtrees (content digests)."""
        found: dict[str, str] = {}
        pending = [top]
        while pending:
            directory = pending.pop()
            for entry in self.fs.scandir(directory):
                if entry.path in skip:
                    continue
                info = self.fs.lstat(entry.path)
                if info is None:
                    continue
                if info.is_symlink:
                    found[entry.path] = f"link {self.fs.readlink(entry.path)}"
                elif info.is_dir:
                    found[entry.path] = "dir"
                    pending.append(entry.path)
                elif info.is_file:
                    data = self.fs.read_document(entry.path, limit=None)
                    found[entry.path] = hashlib.sha256(data).hexdigest()[:16]
                else:
                    found[entry.path] = "special"
        return found

    def outside_snapshot(self) -> dict[str, str]:
        """Everything that is neither the workspace nor the sources the bench writes (``outside/`` and the rest)."""
        return self.snapshot(self.base or "/", skip=(self.root, self.src))

    # -- readers -----------------------------------------------------------------------------------
    @property
    def container(self) -> Container:
        if not hasattr(self, "_container"):
            container = Container()
            container.override_providers(
                fs=providers.Object(self.fs), clock=providers.Object(self.ports.clock),
                ids=providers.Object(self.ports.ids), process=providers.Object(self.proc),
            )
            self._container = container
        return self._container

    def cli(self, *args: str, codes: tuple[int, ...] = (0, 1, 2)) -> Any:
        """``httk workflow ARGS`` in-process; it must end in a designed exit, never a traceback."""
        result = CliRunner().invoke(httk, ["workflow", *args], obj=AppContext(self.container))
        shown = " ".join(args)[:120]
        error = result.exception
        if error is not None and not isinstance(error, SystemExit):
            raise AssertionError(f"'{shown}' raised {type(error).__name__}: {str(error)[:300]} "
                                 f"[{where(error)}]").with_traceback(error.__traceback__)
        if result.exit_code not in codes:
            raise AssertionError(f"'{shown}' exited {result.exit_code}, not one of {codes}: {result.stderr[-300:]}")
        if "Traceback" in result.stdout or "Traceback" in result.stderr:
            raise AssertionError(f"'{shown}' printed a traceback: {result.stderr[-300:]}")
        if result.exit_code == 2:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), f"'{shown}' exit 2, stderr {lines[:3]}"
        return result

    def read_everything(self, job_ids: list[str]) -> dict[str, Any]:
        """Every reader of a workspace, as an operator runs them; returns fsck's report."""
        fsck = json.loads(self.cli("workspace", "fsck", self.root, "--json", codes=(0, 1)).stdout)
        self.cli("workspace", "status", self.root, "--json", codes=(0, 1))
        self.cli("collect", self.root, *(f"--kind={kind.value}" for kind in StateKind), codes=(0,))
        self.cli("collect", self.root, "--raw", *(f"--kind={kind.value}" for kind in StateKind), codes=(0,))
        self.cli("job", "list", self.root, codes=(0, 1))
        self.cli("precheck", self.root)
        for job_id in job_ids:
            self.cli("job", "show", self.root, job_id)
            self.cli("job", "log", self.root, job_id)
            self.cli("job", "why", self.root, job_id)
        return fsck


# -- shared invariants ----------------------------------------------------------------------------

def bad_document(rng: random.Random, notes: list[str], document: Any, special: Special | None) -> bytes | Special:
    """The bad document: the given special, now and then another one, else a mutation of ``document``."""
    if special is None and rng.random() < 0.08:
        special = Special(rng.choice(SPECIALS))
    if special is not None:
        notes.append(f"a {special.what} instead of the file")
        return attrs.evolve(special, valid=codec.encode(document))
    return mutate_document(rng, document, notes)


def check_codes(report: dict[str, Any]) -> None:
    unknown = sorted({problem["code"] for problem in report["problems"]} - CODES)
    assert not unknown, f"fsck reported undocumented codes {unknown}: {report['problems'][:2]}"


def check_outside(bench: Bench, before: dict[str, str]) -> None:
    after = bench.outside_snapshot()
    changed = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
    assert not changed, f"written outside the workspace: {changed[:5]}"


def check_clean(bench: Bench, job_ids: list[str], before: dict[str, str], what: str) -> None:
    """fsck finds these jobs clean, every payload has its marker, and nothing outside the workspace changed."""
    report = bench.read_everything(job_ids)
    assert report["clean"], f"a bad {what} damaged the workspace: {report['problems'][:2]}"
    check_no_orphans(bench)
    check_outside(bench, before)


def check_no_orphans(bench: Bench) -> None:
    """Every payload directory of the workspace belongs to exactly one marker (nothing left half-created)."""
    payloads = {bench.store.payload_dir(marker) for kind in StateKind for marker in bench.store.iter_markers(kind)}
    for path, what in bench.snapshot(bench.root, skip=(f"{bench.root}/.httk-workflow",)).items():
        if path.endswith("/job.json") and "/.httk-job/" not in path and what != "dir":
            assert path.rsplit("/", 1)[0] in payloads, f"payload {path.rsplit('/', 1)[0]} has no marker"


def first_attempt(tree_of):
    """A runner that publishes ``tree_of(launch)`` on the job's first attempt and succeeds afterwards."""
    seen: set[str] = set()

    def tree(launch):
        job = launch.env["HTTK_WORKFLOW_JOB_ID"]
        if job in seen:
            return None
        seen.add(job)
        return tree_of(launch)

    return tree


def ended(bench: Bench, job_id: str, allowed: tuple[str, ...]) -> str:
    kind = bench.kind(job_id)
    assert kind in allowed, f"job {job_id} ended {kind}, not one of {allowed}"
    if kind == "failed":
        failure = bench.store.read_frame(bench.marker(job_id)).failure
        assert failure is not None and failure.code, f"failed without a code: {failure}"
    return kind


def spec_end(bench: Bench, job_id: str, spec: JobSpec) -> None:
    """Where a job with a readable definition legitimately ends under a default manager."""
    if spec.executor != "path":
        ended(bench, job_id, ("submitted",))
    elif spec.pool != "default" or spec.capabilities:
        ended(bench, job_id, ("ready",))
    else:
        ended(bench, job_id, ("succeeded", "failed"))


def repair(bench: Bench, job_ids: list[str]) -> None:
    """``fsck --repair --quarantine-unrepairable``, then every reader again: the repair must hold."""
    repaired = bench.cli("workspace", "fsck", bench.root, "--repair", "--quarantine-unrepairable", "--json",
                         codes=(0, 1))
    report = codec.decode_object(repaired.stdout.encode(), "fsck --json")
    check_codes(report)
    # Only a repair settles a problem: a quarantined marker is left for an operator (spec 000, fsck exit status).
    left = [problem for problem in report["problems"] if problem["action"] != "repaired"]
    assert report["left_for_operator"] == len(left)
    assert repaired.exit_code == (1 if left else 0)
    again = bench.read_everything(job_ids)
    check_codes(again)
    unrepaired = [problem for problem in again["problems"] if problem["code"] in FRAME_CODES]
    assert not unrepaired, f"damage left after --repair --quarantine-unrepairable: {unrepaired[:2]}"
    bench.run("m-after")


def apply_model(files: dict[str, bytes], operation: dict[str, Any], staged: dict[str, dict[str, bytes]]) -> bool:
    """Apply one valid operation to ``files`` (path -> bytes); False when a real filesystem would refuse it."""
    destination = operation["destination"]
    parts = destination.split("/")
    if any("/".join(parts[:index]) in files for index in range(1, len(parts))):
        return False  # an ancestor is a file
    had = destination in files or any(path.startswith(f"{destination}/") for path in files)
    for path in [path for path in files if path == destination or path.startswith(f"{destination}/")]:
        del files[path]
    if operation["op"] == "put":
        for relative, data in staged[operation["id"]].items():
            files[f"{destination}/{relative}" if relative else destination] = data
    return had or operation["op"] == "put" or bool(operation.get("missing_ok"))


def staged_content(bench: Bench, root: str) -> dict[str, dict[str, bytes] | None]:
    """What the outcome really staged per operation: ``relative -> bytes``, ``None`` if it is not all regular."""
    out: dict[str, dict[str, bytes] | None] = {}
    for entry in bench.fs.scandir(root):
        info = bench.fs.lstat(entry.path)
        if info is not None and info.is_file:
            out[entry.name] = {"": bench.fs.read_document(entry.path, limit=None)}
        elif info is not None and info.is_dir and not info.is_symlink:
            tree = bench.snapshot(entry.path)
            regular = all(what == "dir" or len(what) == 16 for what in tree.values())
            out[entry.name] = {path[len(entry.path) + 1:]: bench.fs.read_document(path, limit=None)
                               for path, what in tree.items() if what != "dir"} if regular else None
        else:
            out[entry.name] = None
    return out


def segment_frames(data: bytes) -> list[tuple[int, int]]:
    """``(offset, total length)`` of every intact frame of a segment."""
    out, offset = [], len(SEGMENT_HEADER)
    while offset + 8 <= len(data):
        total = int.from_bytes(data[offset:offset + 8], "big") + 48
        if offset + total > len(data):
            break
        out.append((offset, total))
        offset += total
    return out
