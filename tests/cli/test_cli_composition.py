"""The composition root: configuration selects the adapters, factories wire the manager, tests override.

The CLI takes every service from the container its :class:`AppContext` holds, so a
container configured for memory (``filesystem=memory``, ``clock=fake``) runs real
commands without touching the disk; the container re-reads the XDG homes on every
invocation; and a manager is built by the container's factory with its verifier and
``gc_hook`` (also the in-memory one of ``testing.memory_manager``, which overrides
only the process control and the launch settings). Importing the CLI does not import
the configuration backends dependency-injector would load (pydantic, PyYAML).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from dependency_injector import providers

from cli_support import Cli
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.bootstrap import Container, new_manager
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.testing import (
    FakeClock,
    FakeProcessControl,
    InMemoryFilesystem,
    memory_container,
    memory_manager,
    memory_workspace,
    scripted_runner,
)


def test_the_configuration_selects_the_filesystem_and_the_clock():
    assert isinstance(Container().fs(), PosixFilesystem)
    container = memory_container()
    fs, clock = container.fs(), container.clock()
    assert isinstance(fs, InMemoryFilesystem) and isinstance(clock, FakeClock)
    assert container.ports().fs is fs and fs.clock is clock  # one fake time for the files and the services


def test_commands_on_a_memory_container_write_nothing_on_disk(cli: Cli, tmp_path: Path):
    cli.container = memory_container()
    target = tmp_path / "ws"
    cli("workspace", "init", str(target), "--name", "alpha")
    status = cli.json("workspace", "status", "alpha")

    assert (status["name"], status["path"], status["total"]) == ("alpha", str(target), 0)
    assert not target.exists() and not cli.registry.exists()
    assert cli.container.fs().exists(str(cli.registry))  # the registry went where the workspace went


def test_each_invocation_reads_its_own_homes(cli: Cli, tmp_path: Path):
    other = tmp_path / "other-data"
    cli("workspace", "init", str(tmp_path / "a"), "--name", "a")
    cli("workspace", "init", str(tmp_path / "b"), "--name", "b", env={"XDG_DATA_HOME": str(other)})

    here = {row["name"] for row in cli.json("workspace", "list")}
    elsewhere = cli("workspace", "list", "--json", env={"XDG_DATA_HOME": str(other)})
    there = {row["name"] for row in json.loads(elsewhere.stdout)}
    assert "a" in here and "b" not in here
    assert "b" in there and "a" not in there


def test_a_manager_is_wired_at_construction(cli: Cli, tmp_path: Path):
    cli("workspace", "init", str(tmp_path / "ws"))
    handle = cli.container.workspaces().open(str(tmp_path / "ws"))
    # new_manager is build_manager without the process-wide logging set-up.
    manager = new_manager(cli.container, handle, ManagerConfig(runner_search_paths=("runners",)))

    assert manager.verifier is cli.container.verifier() and manager.gc_hook is not None
    assert manager.id.startswith("m-") and manager.proc is cli.container.process()
    launch = cli.container.launch(runner_search_paths=("runners",))
    assert launch.runner_search_paths == (str(Path("runners").absolute()),) and launch.base_env["PATH"]


def test_the_memory_manager_overrides_only_the_process_and_collects_garbage_like_production():
    memory = memory_workspace(1)
    handle, clock = memory.handle, memory.ports.clock
    handle.set_policy("retention.trash_days", 0)
    trash = f"{handle.layout.control}/data/some-job/trash/old"
    handle.fs.makedirs(trash)
    process = FakeProcessControl(clock, scripted_runner(memory.ports.fs), host="fakehost")
    manager = memory_manager(handle, process=process, gc_interval=1.0)
    manager.on_iteration = lambda: clock.advance(2.0)

    assert manager.proc is process and manager.verifier is not None
    assert manager.run() == 0
    assert not handle.fs.exists(trash)  # the container's gc_hook ran


def test_an_override_of_the_process_reaches_the_manager(tmp_path: Path):
    container = Container()
    fake = FakeProcessControl(FakeClock(), scripted_runner(InMemoryFilesystem()))
    workspace = container.workspaces().init(str(tmp_path / "ws"))
    with container.override_providers(process=providers.Object(fake)):
        manager = new_manager(container, workspace, ManagerConfig())
    assert manager.proc is fake
    assert container.process() is not fake  # the override ended with the block


BACKENDS = ("yaml", "pydantic", "pydantic_settings")


@pytest.mark.skipif(not any(importlib.util.find_spec(name) for name in BACKENDS),
                    reason="neither PyYAML nor pydantic is installed: there is nothing to keep out")
def test_the_cli_does_not_import_the_backends_dependency_injector_would_load():
    installed = [name for name in BACKENDS if importlib.util.find_spec(name)]
    probe = (
        "import sys, importlib\n"
        "import httk.workflow.cli.main\n"
        f"print(sorted(name for name in {BACKENDS!r} if name in sys.modules))\n"
        f"for name in {installed!r}: importlib.import_module(name)\n"  # and they still import afterwards
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "ok"]


@pytest.mark.skipif(importlib.util.find_spec("yaml") is None, reason="PyYAML is not installed")
def test_a_thread_importing_yaml_while_the_composition_root_loads_is_not_refused():
    # An SDK program may import bootstrap lazily (workspace.py) while another of its threads imports yaml;
    # the import-time trick that keeps yaml out must then stay out of the way: with a second thread alive,
    # dependency-injector is imported plainly (and loads yaml as it always does), so no import can be refused.
    # (A thread that re-imports yaml in a loop meanwhile reproduced the refusal, but racing deletions of
    # sys.modules can deadlock the import locks; the rule is checked here deterministically instead.)
    probe = (
        "import sys, threading\n"
        "stop = threading.Event()\n"
        "thread = threading.Thread(target=stop.wait)\n"
        "thread.start()\n"
        "import httk.workflow.bootstrap\n"
        "stop.set()\n"
        "thread.join()\n"
        "print('yaml' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


def test_a_forwarded_commands_marker_does_not_reach_runners():
    from httk.workflow.bootstrap import attempt_base_env
    from httk.workflow.store.workspaces import FORWARDED_ENV

    env = attempt_base_env({"PATH": "/usr/bin", FORWARDED_ENV: "ci", "KEEP": "1"})
    assert FORWARDED_ENV not in env and env["KEEP"] == "1"
