"""Session-wide isolation: no test reads or writes the real per-user httk-workflow homes.

Before the first test, ``XDG_DATA_HOME``, ``XDG_CONFIG_HOME``, ``XDG_STATE_HOME`` and
``XDG_CACHE_HOME`` point below one temporary directory, in ``os.environ`` itself, so
every subprocess a test starts inherits them too. ``HOME`` stays: tools found through it
(pyenv, cargo) keep working, and the remote tests take explicit key and known_hosts paths
from the infrastructure's env file, never ``~/.ssh``. No ``HTTK_*`` variable names a home
(the homes all derive from ``XDG_*`` or ``HOME``); the ``HTTK_WORKFLOW_*`` variables of a
running attempt are removed so that a suite started from inside a job does not act on it.

A guard snapshots the real registry files (the data home's ``httk-workflow`` tree, to
the first entries of each workspace, and the whole config home's ``httk-workflow`` tree)
at session start and fails the session at its end when any of them changed: a test
that escaped the isolation (say, by deleting ``XDG_DATA_HOME`` and falling back to
``~/.local/share``) is caught, naming what it changed.

The fixtures every folder shares live here too, built from the top-level support
modules (imported by name; no conftest is ever imported): ``cli``, the in-process
command line of :mod:`cli_support`, and ``make_attempt`` / ``workspace_spec``, the
hand-built attempt of :mod:`attempt_support` the Python and Bash SDK tests run in,
and ``ports`` / ``handle``, a workspace on the in-memory ports for the store, engine and
operations tests (:mod:`memory_support`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import attempt_support
from cli_support import Cli
from httk.workflow.store.workspaces import Ports, WorkspaceHandle, WorkspaceService
from httk.workflow.testing import memory_ports
from memory_support import ROOT

XDG_HOMES = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
#: Below the data home's ``httk-workflow/`` a snapshot goes this deep: the registry, the
#: workspaces directory, each workspace and its top entries, never a workspace's whole tree.
DATA_DEPTH = 3


def real_home(variable: str, fallback: str) -> Path:
    """Where ``variable`` points in the environment pytest was started with (XDG rules)."""
    value = os.environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path(os.path.expanduser("~")) / fallback


REAL_TREES = (
    (real_home("XDG_DATA_HOME", ".local/share") / "httk-workflow", DATA_DEPTH),
    (real_home("XDG_CONFIG_HOME", ".config") / "httk-workflow", None),
)


def snapshot(root: Path, depth: int | None) -> dict[str, str]:
    """``relative path -> content digest`` (``dir`` for a directory) of ``root``, up to ``depth`` levels."""
    found: dict[str, str] = {}
    if not root.exists():
        return found
    pending: list[tuple[Path, int]] = [(root, 0)]
    while pending:
        directory, level = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            found[str(directory.relative_to(root))] = f"unreadable: {error.strerror}"
            continue
        for entry in entries:
            path = Path(entry.path)
            name = str(path.relative_to(root))
            if entry.is_dir(follow_symlinks=False):
                found[name] = "dir"
                if depth is None or level + 1 < depth:
                    pending.append((path, level + 1))
            else:
                try:
                    found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError as error:
                    found[name] = f"unreadable: {error.strerror}"
    return found


def real_registry() -> dict[str, dict[str, str]]:
    return {str(root): snapshot(root, depth) for root, depth in REAL_TREES}


def changes(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> list[str]:
    out = []
    for root in before:
        old, new = before[root], after[root]
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                verb = "created" if name not in old else "removed" if name not in new else "changed"
                out.append(f"{verb} {root}/{name}")
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = real_registry()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    changed = changes(before, real_registry())
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [
            "the test session changed the real per-user httk-workflow registry; a test escaped the "
            "XDG isolation of tests/conftest.py:",
            *(f"  {line}" for line in changed[:20]),
        ]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True, bold=True)
        else:
            print("\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[dict[str, dict[str, str]]]()


@pytest.fixture(scope="session", autouse=True)
def isolated_homes() -> Iterator[Path]:
    """Private XDG homes for the whole session (``os.environ``, so subprocesses inherit them)."""
    saved = {name: os.environ.get(name) for name in os.environ if name.startswith("HTTK_WORKFLOW_")}
    saved.update({name: os.environ.get(name) for name in XDG_HOMES})
    with tempfile.TemporaryDirectory(prefix="httk-test-homes-") as scratch:
        for name in XDG_HOMES:
            home = Path(scratch) / name.lower()
            home.mkdir()
            os.environ[name] = str(home)
        for name in saved:
            if name.startswith("HTTK_WORKFLOW_"):
                del os.environ[name]
        try:
            yield Path(scratch)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """``httk workflow ...`` in-process, with private XDG homes below ``tmp_path``."""
    return Cli(tmp_path)


@pytest.fixture(name="workspace_spec")
def workspace_spec_fixture() -> Any:
    """The :func:`attempt_support.workspace_spec` factory: a job whose runner is a shared workspace runner."""
    return attempt_support.workspace_spec


@pytest.fixture
def make_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``make_attempt(step, spec=..., children=..., settings=...)`` -> :class:`attempt_support.FakeAttempt`."""
    return attempt_support.attempt_factory(tmp_path, monkeypatch)


@pytest.fixture
def ports() -> Ports:
    """The in-memory ports (filesystem, clock, ids, processes) of one test."""
    return memory_ports()


@pytest.fixture
def handle(ports: Ports) -> WorkspaceHandle:
    """A workspace initialised at :data:`memory_support.ROOT` on ``ports``."""
    return WorkspaceService(ports).init(ROOT)
