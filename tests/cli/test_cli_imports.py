"""What a read command imports: the pin that keeps ``workspace status``, ``job list`` and ``job show`` fast to start.

Each command runs in a fresh interpreter and reports ``sys.modules``. A read command may
import only the modules of :data:`READ_PATH` (a new import on the read path fails here,
which is the point: docs/benchmarks.md "CLI start-up" has what each one costs), no
third-party package but the CLI's own, and none of the standard-library packages of
:data:`HEAVY_STDLIB` (asyncio alone is about 20 ms, and dependency-injector imports it
unless ``bootstrap`` defers it) and :data:`DEFERRED_STDLIB` (imported where a command
uses them, 1 to 5 ms each). The deferrals must not break asyncio, configparser or
dependency-injector's wiring for a program that uses them afterwards, which the last
tests check, and a command runs with the garbage collector on: the console scripts
(``cli.entry``) pause it for the CLI's import and freeze what exists then, while
importing ``cli.main`` as a library changes nothing process-wide. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from cli_support import Cli

#: The packages a read command may import besides the standard library (exceptiongroup: an older cattrs).
THIRD_PARTY = {"httk", "click", "attr", "attrs", "cattrs", "typing_extensions", "exceptiongroup", "dependency_injector"}
#: Standard-library packages no read command needs; each costs milliseconds (asyncio: ssl, socket, subprocess).
HEAVY_STDLIB = {"asyncio", "ssl", "socket", "selectors", "subprocess", "concurrent", "signal", "tempfile", "email",
                "http", "xml", "multiprocessing", "sqlite3", "zipfile", "tarfile", "argparse"}
#: Standard-library modules a read command must not import though modules on its path use them: ids without
#: ``secrets`` (hmac, random), the filesystem adapter's copies and removals (``shutil``) and its ``renameat2``
#: (``ctypes``) loaded on first use, ``logging`` only by a manager, ``configparser`` deferred in
#: dependency-injector's import (``injector_import``).
DEFERRED_STDLIB = {"secrets", "hmac", "random", "shutil", "ctypes", "logging", "configparser"}
#: Modules of the CLI's own packages a read command must not import: dependency-injector's wiring (deferred as
#: configparser), the remote registry (only ``REMOTE:`` parsing is on the read path: ``remote_reference``).
DEFERRED_MODULES = {"dependency_injector.wiring", "dependency_injector._cwiring", "httk.workflow.operations.remotes",
                    "httk.workflow.languages.installation"}
#: Every ``httk.workflow`` module a read command may import (``workspace status`` of a workspace with
#: jobs checks them with fsck's ``job_damage``, which brings the last five).
READ_PATH = {f"httk.workflow.{name}" if name else "httk.workflow" for name in (
    "", "adapters", "adapters.clock", "adapters.fs_posix", "adapters.ids", "adapters.plugins", "adapters.renames",
    "adapters.tree_copy",
    "bootstrap", "injector_import", "cli", "cli.context", "cli.defaults", "cli.entry", "cli.lazy", "cli.main",
    "cli.progress", "cli.remote_refs",
    "cli.render", "cli.workspace_cmds", "cli.job_cmds", "codec", "domain", "domain.frames", "domain.lifecycle",
    "domain.model", "domain.placement", "domain.settings", "domain.budgets", "languages",
    "languages.realization", "operations", "operations.inspection",
    "operations.registry", "operations.remote_reference", "ports", "protocol", "store", "store.discovery",
    "store.journal", "store.layout", "store.markers", "store.policy", "store.store", "store.workspaces",
    "operations.fsck", "operations.fsck_census", "engine", "engine.manifest", "store.job_ids",
    "store.transfer_ledger",
)} | {"httk"}
#: Only ``job show`` reports budgets and a job's realization; status and list create none of those records.
NOT_FOR_STATUS_OR_LIST = {"httk.workflow.domain.budgets", "httk.workflow.domain.requests",
                          "httk.workflow.domain.scheduling", "httk.workflow.languages",
                          "httk.workflow.languages.realization"}

#: A console script's run (pip's script calls ``cli.entry``'s function, which reads ``sys.argv``).
PROBE = """
import gc, json, sys
from httk.workflow.cli.entry import httk
try:
    httk()
finally:
    print(json.dumps({"modules": sorted(sys.modules), "collecting": gc.isenabled()}), file=sys.stderr)
"""


def imported_by(cli: Cli, *args: str) -> set[str]:
    """The modules one ``httk workflow ARGS`` imported, in a fresh interpreter with the test's XDG homes.

    The garbage collector, paused while the CLI starts (``cli.entry``), must be on again once the command ran.
    """
    done = subprocess.run([sys.executable, "-c", PROBE, "workflow", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **cli.env})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stderr.strip().splitlines()[-1])
    assert found["collecting"], "the command ran with the garbage collector off"
    return set(found["modules"])


def outside_the_read_path(modules: set[str]) -> dict[str, list[str]]:
    """What ``modules`` hold beyond what a read command may import, by kind (empty when nothing)."""
    stdlib = set(sys.stdlib_module_names)
    tops = {name.split(".")[0] for name in modules}
    foreign = {top for top in tops - stdlib - THIRD_PARTY
               if top not in ("__main__", "cython_runtime", "_distutils_hack") and not top.startswith("_cython")}
    found = {
        "third party": sorted(foreign),
        "heavy stdlib": sorted(tops & HEAVY_STDLIB),
        "deferred": sorted(modules & (DEFERRED_STDLIB | DEFERRED_MODULES)),
        "httk": sorted(name for name in modules if name.startswith("httk") and name not in READ_PATH),
    }
    return {kind: names for kind, names in found.items() if names}


@pytest.fixture
def populated(cli: Cli, tmp_path: Path, make_payload) -> tuple[str, str]:
    """A workspace with one submitted job, and that job's id."""
    workspace = str(tmp_path / "ws")
    cli("workspace", "init", workspace)
    job = cli("job", "submit", workspace, str(make_payload(tmp_path / "payload")), "--placement", "p/1").stdout.strip()
    return workspace, job


def test_workspace_status_of_an_empty_workspace_imports_only_the_read_path(cli: Cli, workspace: str):
    modules = imported_by(cli, "workspace", "status", workspace)
    assert outside_the_read_path(modules) == {}
    assert modules.isdisjoint(NOT_FOR_STATUS_OR_LIST | {"httk.workflow.operations.fsck"})


def test_workspace_status_with_a_job_imports_only_the_read_path(cli: Cli, populated: tuple[str, str]):
    modules = imported_by(cli, "workspace", "status", populated[0])
    assert outside_the_read_path(modules) == {}
    assert "httk.workflow.operations.fsck" in modules  # the job was checked as fsck checks it
    assert modules.isdisjoint(NOT_FOR_STATUS_OR_LIST)


def test_job_list_imports_only_the_read_path(cli: Cli, populated: tuple[str, str]):
    modules = imported_by(cli, "job", "list", populated[0])
    assert outside_the_read_path(modules) == {}
    assert modules.isdisjoint(NOT_FOR_STATUS_OR_LIST)


def test_job_show_imports_only_the_read_path(cli: Cli, populated: tuple[str, str]):
    modules = imported_by(cli, "job", "show", *populated)
    assert outside_the_read_path(modules) == {}
    assert "httk.workflow.domain.budgets" in modules  # it reports the job's budgets
    assert "httk.workflow.languages.realization" in modules  # and its realization


def run_python(*parts: str) -> list[str]:
    """What a fresh interpreter prints running ``parts`` (each dedented) one after the other."""
    code = "".join(textwrap.dedent(part) for part in parts)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


ASYNC_PROVIDERS = """
    import asyncio
    import inspect
    from dependency_injector import containers, providers

    async def answer():
        return 21

    class Async(containers.DeclarativeContainer):
        value = providers.Factory(answer)
        doubled = providers.Singleton(lambda value: value * 2, value)  # an awaitable injection: gather, Future
        call = providers.Coroutine(answer)

    async def main(container):
        return [await container.value(), await container.doubled(), await container.call()]

    # asyncio.iscoroutinefunction knows the provider by its marker alone (it is no function): the marker
    # dependency-injector took at its import must be the one of the asyncio.coroutines imported now.
    print(*asyncio.run(main(Async())), asyncio.iscoroutinefunction(Async.call),
          inspect.iscoroutinefunction(Async.call), sys.modules["asyncio.coroutines"] is asyncio.coroutines)
"""


def test_asyncio_imported_after_the_cli_works_for_async_providers():
    # The CLI imports dependency-injector without asyncio; a program that then uses asyncio gets the real
    # package, with the same coroutine marker dependency-injector's Coroutine provider carries.
    out = run_python("""
        import sys
        import httk.workflow.cli.main
        print("asyncio" in sys.modules, "asyncio.coroutines" in sys.modules)
    """, ASYNC_PROVIDERS)
    assert out == ["False", "False", "21", "42", "21", "True", "False", "True"]


def test_an_asyncio_imported_before_the_composition_root_is_used_as_it_is():
    out = run_python("""
        import sys
        import asyncio
        real = asyncio
        import httk.workflow.bootstrap
        print(sys.modules["asyncio"] is real)
    """, ASYNC_PROVIDERS)
    assert out == ["True", "21", "42", "21", "True", "False", "True"]


def test_with_another_thread_alive_dependency_injector_is_imported_plainly():
    # The stand-in is process-wide, so another thread could see it: with one alive, nothing is deferred.
    out = run_python("""
        import sys, threading
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        import httk.workflow.bootstrap
        stop.set()
        thread.join()
        print("asyncio" in sys.modules)
    """, ASYNC_PROVIDERS)
    assert out == ["True", "21", "42", "21", "True", "False", "True"]


def test_configparser_and_wiring_deferred_at_the_composition_root_work_afterwards(tmp_path: Path):
    # dependency-injector took ConfigParser, wire and unwire as stand-ins that import the real modules when called:
    # Configuration.from_ini, container.wire()/unwire() and a wiring_config's automatic wiring must all work.
    ini = tmp_path / "settings.ini"
    ini.write_text("[section]\nkey = ${HTTK_TEST_UNSET:fallback}\n")
    out = run_python(f"""
        import sys, types
        import httk.workflow.bootstrap
        print(*(name in sys.modules for name in ("configparser", "dependency_injector.wiring")))
        from dependency_injector import containers, providers
        from dependency_injector.wiring import Provide, inject

        config = providers.Configuration()
        config.from_ini({str(ini)!r})
        print(config.section.key())

        module = types.ModuleType("wired_probe")
        sys.modules["wired_probe"] = module

        @inject
        def answer(value: int = Provide["value"]) -> object:
            return value

        module.answer = answer

        class Wired(containers.DeclarativeContainer):
            value = providers.Object(42)

        container = Wired()
        container.wire(modules=[module])
        print(module.answer())
        container.unwire()
        print(type(module.answer()).__name__)

        class AutoWired(containers.DeclarativeContainer):
            wiring_config = containers.WiringConfiguration(modules=["wired_probe"])
            value = providers.Object(7)

        AutoWired()
        print(module.answer())
    """)
    assert out == ["False", "False", "fallback", "42", "Provide", "7"]


ROOT = Path(__file__).resolve().parents[2]


def test_the_console_scripts_enter_through_cli_entry():
    # Only the console scripts pause and freeze the collector; what is installed is what pyproject declares.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert declared == {"httk": "httk.workflow.cli.entry:httk",
                        "httk-taskmanager": "httk.workflow.cli.entry:taskmanager"}
    installed = {point.name: point.value for point in entry_points(group="console_scripts") if point.name in declared}
    assert installed == declared, "reinstall: pip install -e . --no-deps"


COLLECTIONS = """
    import gc
    from httk.workflow.cli import entry
    seen = []
    gc.callbacks.append(lambda phase, info: seen.append(phase))
"""


def test_the_collector_paused_for_the_cli_import_is_on_again_unless_it_was_off():
    # The entry pauses the collector while it imports cli.main (no collection runs meanwhile) and freezes what
    # exists then; a program that turned the collector off itself keeps it off, and nothing is frozen.
    on = run_python(COLLECTIONS, """
        main = entry.load_commands()
        print(gc.isenabled(), gc.get_freeze_count() > 0, len(seen), main.__name__)
    """)
    off = run_python(COLLECTIONS, """
        gc.disable()
        entry.load_commands()
        print(gc.isenabled(), gc.get_freeze_count() > 0, len(seen))
    """)
    assert (on, off) == (["True", "True", "0", "httk.workflow.cli.main"], ["False", "False", "0"])


def test_importing_the_cli_as_a_library_freezes_nothing_and_garbage_is_collected():
    # A program holding cyclic garbage that then imports cli.main (CliRunner tests, notebooks) must get it
    # collected: a freeze at that import would keep it for good. The garbage is made old (a full collection
    # while it is alive) so that no young collection can free it before the import.
    out = run_python("""
        import gc, weakref
        import httk.workflow.cli  # the package: what follows measures cli.main's own import

        class Node:
            pass

        nodes = [Node() for _ in range(20_000)]
        for node, other in zip(nodes, nodes[1:] + nodes[:1]):
            node.other = other  # one ring: cyclic garbage once the list is gone
        refs = [weakref.ref(node) for node in nodes[::1000]]
        gc.collect()
        del nodes, node, other
        frozen = gc.get_freeze_count()
        import httk.workflow.cli.main
        print(gc.get_freeze_count() == frozen, gc.isenabled())
        gc.collect()
        print(sum(ref() is not None for ref in refs))
    """)
    assert out == ["True", "True", "0"]
