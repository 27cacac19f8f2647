"""The composition root: the only module that names adapter classes.

A ``Container`` wires ports to adapters; tests override providers with the
public doubles (``container.fs.override(providers.Object(InMemoryFilesystem()))``)
or build services on ``testing.memory_ports()``. Services receive ports by
constructor injection. Adapters needed only by some commands (signing, log
rotation) are imported where they are used, so every CLI call starts fast.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from dependency_injector import containers, providers

from .adapters.batch.base import CommandLineBatchSystem
from .adapters.batch.local import LocalBatchSystem
from .adapters.batch.slurm import SlurmBatchSystem
from .adapters.clock import SystemClock
from .adapters.fs_posix import PosixFilesystem
from .adapters.ids import UuidIds
from .adapters.process import LocalProcessControl
from .adapters.transport_local import LocalTransport
from .engine.attempts import LaunchSettings
from .engine.manager import Manager, ManagerConfig
from .operations.gc import GarbageCollector
from .operations.remotes import Remote, RemoteError
from .ports import BatchSystem, RemoteTransport, Signer
from .store.workspaces import Ports, WorkspaceHandle, WorkspaceService

#: Entry-point group through which an installed package adds a batch system (ARCHITECTURE.md rule 7).
BATCH_SYSTEM_ENTRY_POINTS = "httk.workflow.batch_systems"


def adapter_templates_path() -> str:
    """The packaged remote templates (top-level ``adapters/``, shipped as ``adapter_templates``)."""
    from importlib.resources import files

    return str(files("httk.workflow").joinpath("adapter_templates"))


def _ssh_transport(**options: Any) -> RemoteTransport:
    # Imported on first use: fabric and paramiko cost a fifth of a second that local commands never need.
    from .adapters.transport_ssh import SshTransport

    return SshTransport(**options)


#: The batch systems of this distribution; others arrive through the entry-point group.
BUILT_IN_BATCH_SYSTEMS: dict[str, type[CommandLineBatchSystem]] = {"local": LocalBatchSystem, "slurm": SlurmBatchSystem}


def check_batch_setting(name: str, value: Any) -> None:
    """Let the batch system named by the setting's first component refuse it (``slurm.*``: Slurm).

    Raises :class:`~httk.workflow.ports.BatchSystemError`. Only the one entry point of
    that name is loaded, so ``settings set vasp.command ...`` imports nothing.
    """
    system_name = name.split(".", 1)[0]
    system = BUILT_IN_BATCH_SYSTEMS.get(system_name)
    if system is None:
        from importlib.metadata import entry_points

        found = [entry for entry in entry_points(group=BATCH_SYSTEM_ENTRY_POINTS) if entry.name == system_name]
        if not found:
            return
        system = found[0].load()
    checker = getattr(system, "check_setting", None)
    if checker is not None:
        checker(name, value)


class Container(containers.DeclarativeContainer):
    """Ports and services of one process."""

    fs = providers.Singleton(PosixFilesystem)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidIds)
    process = providers.Singleton(LocalProcessControl)
    ports = providers.Singleton(Ports, fs=fs, clock=clock, ids=ids, check_setting=providers.Object(check_batch_setting))
    workspaces = providers.Singleton(WorkspaceService, ports=ports)
    adapter_templates = providers.Callable(adapter_templates_path)
    #: Keyed by a template's ``transport`` and ``batch``; a test overrides them with doubles.
    transports = providers.FactoryAggregate(
        local=providers.Factory(LocalTransport), ssh=providers.Factory(_ssh_transport)
    )
    batch_systems = providers.FactoryAggregate(
        local=providers.Factory(LocalBatchSystem), slurm=providers.Factory(SlurmBatchSystem)
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
    remote.require_complete()
    settings = remote.settings
    timeout = float(settings.get("command_timeout", 300))
    if remote.template.transport == "ssh":
        transport = container.transports(
            "ssh",
            host=settings["host"],
            # Unset: ~/.ssh/config's Port for the host, else 22 (the template default only describes that).
            port=remote.chosen.get("port"),
            user=settings.get("username"),
            key_filename=settings.get("key_filename"),
            known_hosts=settings.get("known_hosts"),
            connect_timeout=float(settings.get("connect_timeout", 10)),
        )
    else:
        transport = container.transports(remote.template.transport)
    name = remote.template.batch
    if name in container.batch_systems.providers:
        return transport, container.batch_systems(name, transport, timeout=timeout)
    from importlib.metadata import entry_points

    for entry in entry_points(group=BATCH_SYSTEM_ENTRY_POINTS):
        if entry.name == name:
            return transport, entry.load()(transport, timeout=timeout)
    raise RemoteError(
        f"remote {remote.name}: no batch system {name!r} is installed (entry points {BATCH_SYSTEM_ENTRY_POINTS})"
    )


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
    site's modules.
    """
    env = dict(environ)
    if sys.prefix == sys.base_prefix:
        return env
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        env["PATH"] = f"{bindir}{os.pathsep}{path}" if path else bindir
    return env


def build_manager(container: Container, handle: WorkspaceHandle, config: ManagerConfig) -> Manager:
    """Wire a manager for ``handle`` with this process's adapters and logging."""
    process = container.process()
    ids = container.ids()
    manager_id = f"m-{ids.new_hex(12)}"
    launch = LaunchSettings(
        python=sys.executable,
        shell_lib=shell_library_path(),
        base_env=attempt_base_env(os.environ),
        runner_search_paths=tuple(os.path.abspath(path) for path in config.runner_search_paths),
    )
    manager = Manager(handle, process, launch, config, manager_id=manager_id)
    from .adapters.signing import Ed25519Verifier

    manager.verifier = Ed25519Verifier()
    if config.gc_interval is not None:
        manager.gc_hook = lambda: GarbageCollector(handle).run()
    configure_logging(config, manager.log_path())
    return manager


def configure_logging(config: ManagerConfig, log_file: str) -> None:
    """Console: warnings and up (or the chosen level); file: the full record, rotated."""
    logger = logging.getLogger("httk.workflow")
    level = getattr(logging, config.log_level.upper(), logging.INFO)
    logger.setLevel(min(level, logging.INFO) if config.log_level.lower() != "debug" else logging.DEBUG)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    formatter: logging.Formatter = JsonLogFormatter() if config.json_logs else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    console = logging.StreamHandler()
    console.setLevel(max(level, logging.WARNING) if config.log_level.lower() == "info" else level)
    console.setFormatter(formatter)
    logger.addHandler(console)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    from logging.handlers import RotatingFileHandler

    file_handler = RotatingFileHandler(log_file, maxBytes=16 << 20, backupCount=4)
    file_handler.setLevel(level)
    file_handler.setFormatter(formatter)
    logger.addHandler(file_handler)
    logger.propagate = False


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line, for ingestion."""

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


def operator_signer(environ: Mapping[str, str]) -> Signer | None:
    """The operator identity created by ``config init``, if any."""
    from .adapters.signing import default_signer

    return default_signer(environ)


def create_operator_identity(environ: Mapping[str, str], *, force: bool = False) -> dict[str, str]:
    """Create the operator's Ed25519 key pair in their config directory."""
    from .adapters.signing import config_dir, create_identity

    return create_identity(config_dir(environ), force=force)
