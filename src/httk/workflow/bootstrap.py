"""The composition root: the only module that names adapter classes.

A ``Container`` wires ports to adapters. Its ``config`` (a ``Configuration``)
selects the filesystem and the clock (``Selector``: posix or memory, system or
fake) and places the registries; a manager is a ``Factory`` with its process
control, id, verifier and ``gc_hook`` injected at construction. Tests override
providers with the public doubles (``container.override_providers(process=...)``,
``testing.memory_manager``, ``testing.memory_container``). Services receive
ports by constructor injection. Adapters needed only by some commands (signing,
log rotation, SSH) are imported where they are used, so every CLI call starts
fast; docs/architecture.md "Composition root" has the figures.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .adapters.clock import SystemClock
from .adapters.fs_posix import PosixFilesystem
from .adapters.ids import UuidIds
from .adapters.plugins import EntryPointCatalog
from .injector_import import import_dependency_injector
from .operations.registry import Registry
from .ports import BatchSystem, Clock, Filesystem, Ids, ProcessControl, RemoteTransport, Signer, Verifier
from .store.workspaces import FORWARDED_ENV, Ports, WorkspaceHandle, WorkspaceService

if TYPE_CHECKING:
    # The manager, its launch settings and the garbage collector are imported by the providers
    # that build them: a read-only command (``workspace status``) never pays for the engine.
    import logging

    from .engine.attempts import LaunchSettings
    from .engine.manager import Manager, ManagerConfig
    from .operations.remotes import Remote, RemoteRegistry

import_dependency_injector()

from dependency_injector import containers, providers  # noqa: E402  (after the guard above)


def adapter_program_path() -> str:
    """The generic adapter program ``remote check`` runs on a target (top-level ``adapters/adapter``)."""
    from importlib.resources import files

    return str(files("httk.workflow").joinpath("adapter_bundle", "adapter"))


def _find_module(name: str) -> Any:
    """:func:`.languages.installation.find_module` (imported on first use: a read command asks for none)."""
    from .languages.installation import find_module

    return find_module(name)


def _remote_registry(*args: Any) -> RemoteRegistry:
    """A :class:`~.operations.remotes.RemoteRegistry` of ``args`` (its module is imported on first use)."""
    from .operations.remotes import RemoteRegistry

    return RemoteRegistry(*args)


def _memory_filesystem(clock: Clock) -> Filesystem:
    # Imported on first use: the production CLI never selects the in-memory double.
    from .testing.memory_fs import InMemoryFilesystem

    return InMemoryFilesystem(clock=clock)


def _fake_clock() -> Clock:
    from .testing.clock import FakeClock

    return FakeClock()


def _verifier() -> Verifier:
    # Imported on first use: cryptography costs start-up that only a manager pays.
    from .adapters.signing import Ed25519Verifier

    return Ed25519Verifier()


def _process_control() -> ProcessControl:
    # Imported on first use: only a manager controls processes.
    from .adapters.process import LocalProcessControl

    # The off switch of the preloaded Python launcher (docs/task_manager.md "How runners are started").
    return LocalProcessControl(python_preload=os.environ.get("HTTK_WORKFLOW_PYTHON_PRELOAD", "1") != "0")


def _manager(**given: Any) -> Manager:
    """A :class:`Manager` of ``given`` (the engine is imported on the first manager built)."""
    from .engine.manager import Manager

    return Manager(**given)


def _new_manager_id(ids: Ids) -> str:
    return f"m-{ids.new_hex(12)}"


def _launch_settings(runner_search_paths: Sequence[str] = (), base_env: Mapping[str, str] | None = None
                     ) -> LaunchSettings:
    """How attempts start: this interpreter, the packaged Bash library, :func:`attempt_base_env` of this process."""
    from .engine.attempts import LaunchSettings

    return LaunchSettings(
        python=sys.executable,
        shell_lib=shell_library_path(),
        base_env=dict(base_env) if base_env is not None else attempt_base_env(os.environ),
        runner_search_paths=tuple(os.path.abspath(path) for path in runner_search_paths),
    )


def _garbage_collection(handle: WorkspaceHandle, process: ProcessControl) -> Callable[[], None]:
    """The manager's ``gc_hook``: one retention pass over ``handle`` (called only with ``gc_interval`` set).

    ``process`` lets the pass tell a crashed manager of this host from a live one.
    """

    def collect() -> None:
        from .operations.gc import GarbageCollector

        GarbageCollector(handle, process=process).run()

    return collect


class Container(containers.DeclarativeContainer):
    """Ports and services of one process.

    ``config`` holds what the container cannot know by itself: ``filesystem``
    (``posix`` or ``memory``) and ``clock`` (``system`` or ``fake``) select the
    adapters, and ``registry_path``, ``remotes_dir`` and ``default_workspace``
    (set by the CLI from the XDG homes of each invocation) place the registries.
    """

    config = providers.Configuration(default={"filesystem": "posix", "clock": "system"})
    clock = providers.Selector(
        config.clock, system=providers.Singleton(SystemClock), fake=providers.Singleton(_fake_clock)
    )
    fs = providers.Selector(
        config.filesystem,
        posix=providers.Singleton(PosixFilesystem),
        memory=providers.Singleton(_memory_filesystem, clock=clock),
    )
    ids = providers.Singleton(UuidIds)
    process = providers.Singleton(_process_control)
    #: The batch systems and transports, registered only through entry points (ARCHITECTURE.md rule 7);
    #: a test overrides it with ``EntryPointCatalog(given={group: {name: double}})``.
    plugins = providers.Singleton(EntryPointCatalog)
    ports = providers.Singleton(Ports, fs=fs, clock=clock, ids=ids, check_setting=plugins.provided.check_setting,
                                find_module=_find_module)
    workspaces = providers.Singleton(WorkspaceService, ports=ports)
    #: This user's workspace names (a Factory: the paths are read from ``config`` on each call).
    registry = providers.Factory(Registry, fs, config.registry_path, config.default_workspace)
    adapter_program = providers.Callable(adapter_program_path)
    remote_registry = providers.Factory(_remote_registry, fs, config.remotes_dir, plugins, adapter_program)
    verifier = providers.Singleton(_verifier)
    launch = providers.Factory(_launch_settings)
    #: ``manager(handle=..., config=..., launch=..., gc_hook__handle=...)``: see :func:`new_manager`.
    manager = providers.Factory(
        _manager,
        process=process,
        manager_id=providers.Factory(_new_manager_id, ids=ids),
        verifier=verifier,
        gc_hook=providers.Factory(_garbage_collection, process=process),
    )


_default: Container | None = None


def default_container() -> Container:
    """The process-wide production container."""
    global _default
    if _default is None:
        _default = Container()
    return _default


def remote_adapters(container: Container, remote: Remote) -> tuple[RemoteTransport, BatchSystem]:
    """The transport and batch system of a configured remote (not connected yet: that happens on first use)."""
    return container.remote_registry().adapters(remote)


def shell_library_path() -> str:
    """The packaged Bash runner library (``shell/httk-workflow.sh``)."""
    from importlib.resources import files

    return str(files("httk.workflow").joinpath("shell", "httk-workflow.sh"))


def attempt_base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment every attempt starts from: this process's, with a virtual environment's bin first.

    A manager installed in a virtual environment (pipx, a project venv) runs attempts as
    if that environment were activated, so ``python -m httk.workflow...`` and the httk
    commands in a runner or a setting such as ``vasp.command`` resolve to the
    installation that runs the manager even where a batch job's PATH does not name it.
    A system interpreter changes nothing: putting ``/usr/bin`` first would shadow the
    site's modules. The marker of a forwarded command (``HTTK_WORKFLOW_FORWARDED_AS``) is
    dropped: it tells that one command how to spell fix hints, and a runner is not that command.
    """
    env = dict(environ)
    env.pop(FORWARDED_ENV, None)
    if sys.prefix == sys.base_prefix:
        return env
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        env["PATH"] = f"{bindir}{os.pathsep}{path}" if path else bindir
    return env


def new_manager(container: Container, handle: WorkspaceHandle, config: ManagerConfig, **given: Any) -> Manager:
    """The container's manager for ``handle``: its process control, id, verifier and ``gc_hook``.

    ``given`` are keyword arguments of :class:`Manager` that replace the container's
    (``manager_id``, ``out``); a test overrides providers instead (``testing.memory_manager``).
    """
    launch = container.launch(runner_search_paths=config.runner_search_paths)
    return container.manager(handle=handle, config=config, launch=launch, gc_hook__handle=handle, **given)


def build_manager(container: Container, handle: WorkspaceHandle, config: ManagerConfig) -> Manager:
    """Wire a manager for ``handle`` with this process's adapters and logging."""
    manager = new_manager(container, handle, config)
    configure_logging(config, manager.log_path())
    return manager


def configure_logging(config: ManagerConfig, log_file: str) -> None:
    """Console and rotated file, each at its configured level (``--log-level`` sets both)."""
    import logging  # here, not at the top: only a manager logs, and logging is a cost of every command's start-up

    logger = logging.getLogger("httk.workflow")
    console_level = getattr(logging, config.console_log_level.upper(), logging.WARNING)
    file_level = getattr(logging, config.file_log_level.upper(), logging.INFO)
    logger.setLevel(min(console_level, file_level))
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    formatter: logging.Formatter = json_log_formatter() if config.json_logs else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    console = logging.StreamHandler()
    console.setLevel(console_level)
    console.setFormatter(formatter)
    logger.addHandler(console)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    from logging.handlers import RotatingFileHandler

    file_handler = RotatingFileHandler(log_file, maxBytes=16 << 20, backupCount=4)
    file_handler.setLevel(file_level)
    file_handler.setFormatter(formatter)
    logger.addHandler(file_handler)
    logger.propagate = False


def json_log_formatter() -> logging.Formatter:
    """A formatter of one JSON object per line, for ingestion (its class is made here: see configure_logging)."""
    import logging

    class JsonLogFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return json.dumps(
                {
                    "time": record.created,
                    "level": record.levelname.lower(),
                    "logger": record.name,
                    "message": record.getMessage(),
                },
                sort_keys=True,
            )

    return JsonLogFormatter()


def operator_signer(environ: Mapping[str, str]) -> Signer | None:
    """The operator identity created by ``config init``, if any."""
    from .adapters.signing import default_signer

    return default_signer(environ)


def create_operator_identity(environ: Mapping[str, str], *, force: bool = False) -> dict[str, str]:
    """Create the operator's Ed25519 key pair in their config directory."""
    from .adapters.signing import config_dir, create_identity

    return create_identity(config_dir(environ), force=force)
