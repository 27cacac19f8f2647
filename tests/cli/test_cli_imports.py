"""What a read command imports: the pin that keeps ``workspace status``, ``job list`` and ``job show`` fast to start.

Each command runs in a fresh interpreter and reports ``sys.modules``. A read command may
import only the modules of :data:`READ_PATH` (a new import on the read path fails here,
which is the point: docs/benchmarks.md "CLI start-up" has what each one costs), no
third-party package but the CLI's own, and none of the heavy standard-library packages
of :data:`HEAVY_STDLIB` (asyncio alone is about 20 ms, and dependency-injector imports it
unless ``bootstrap`` defers it). The deferral must not break asyncio for a program that
uses it afterwards, which the last tests check. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_support import Cli

#: The packages a read command may import besides the standard library (exceptiongroup: an older cattrs).
THIRD_PARTY = {"httk", "click", "attr", "attrs", "cattrs", "typing_extensions", "exceptiongroup", "dependency_injector"}
#: Standard-library packages no read command needs; each costs milliseconds (asyncio: ssl, socket, subprocess).
HEAVY_STDLIB = {"asyncio", "ssl", "socket", "selectors", "subprocess", "concurrent", "signal", "tempfile", "email",
                "http", "xml", "multiprocessing", "sqlite3", "zipfile", "tarfile", "argparse"}
#: Every ``httk.workflow`` module a read command may import (``workspace status`` of a workspace with
#: jobs checks them with fsck's ``job_damage``, which brings the last five).
READ_PATH = {f"httk.workflow.{name}" if name else "httk.workflow" for name in (
    "", "adapters", "adapters.clock", "adapters.fs_posix", "adapters.ids", "adapters.plugins", "adapters.renames",
    "bootstrap", "injector_import", "cli", "cli.context", "cli.defaults", "cli.lazy", "cli.main", "cli.progress",
    "cli.remote_refs",
    "cli.render", "cli.workspace_cmds", "cli.job_cmds", "codec", "domain", "domain.frames", "domain.lifecycle",
    "domain.model", "domain.placement", "domain.settings", "domain.budgets", "languages",
    "languages.installation", "languages.realization", "operations", "operations.inspection",
    "operations.registry", "operations.remotes", "ports", "protocol", "store", "store.discovery",
    "store.journal", "store.layout", "store.markers", "store.policy", "store.store", "store.workspaces",
    "operations.fsck", "operations.fsck_census", "engine", "engine.manifest", "store.job_ids",
    "store.transfer_ledger",
)} | {"httk"}
#: Only ``job show`` reports budgets; status and list create none of those records.
NOT_FOR_STATUS_OR_LIST = {"httk.workflow.domain.budgets", "httk.workflow.domain.requests",
                          "httk.workflow.domain.scheduling"}

PROBE = """
import json, sys
from httk.workflow.cli.main import httk
try:
    httk(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported_by(cli: Cli, *args: str) -> set[str]:
    """The modules one ``httk workflow ARGS`` imported, in a fresh interpreter with the test's XDG homes."""
    done = subprocess.run([sys.executable, "-c", PROBE, "workflow", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **cli.env})
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def outside_the_read_path(modules: set[str]) -> dict[str, list[str]]:
    """What ``modules`` hold beyond what a read command may import, by kind (empty when nothing)."""
    stdlib = set(sys.stdlib_module_names)
    tops = {name.split(".")[0] for name in modules}
    foreign = {top for top in tops - stdlib - THIRD_PARTY
               if top not in ("__main__", "cython_runtime", "_distutils_hack") and not top.startswith("_cython")}
    found = {
        "third party": sorted(foreign),
        "heavy stdlib": sorted(tops & HEAVY_STDLIB),
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
