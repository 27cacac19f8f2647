"""CommandLineBatchSystem: a batch scheduler driven by argument vectors through a RemoteTransport.

A subclass supplies argv builders (submit, status, cancel), pure parsers of what
those commands print, and ``compose_script``; this base runs them through the
transport and turns a failing command into one
:class:`~httk.workflow.ports.BatchSystemError` line. The batch script is the one
place (besides the SSH transport) where a command line is composed as text, and
every word in it goes through ``shlex.join``. ARCHITECTURE.md rules 6 and 7;
spec 000 "Running on a remote", "Application settings".
"""

from __future__ import annotations

import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ...domain import settings as engine_settings
from ...domain.model import ValidationError
from ...ports import BatchJobStatus, BatchSystemError, CommandResult, RemoteTransport

#: The workspace setting that supplies the default worker count.
WORKERS_SETTING = engine_settings.WORKERS_SETTING


class CommandLineBatchSystem(ABC):
    """Submit, query and cancel batch jobs by running the scheduler's commands through a transport."""

    #: The batch system's name, as templates spell it (``batch`` in remote.json).
    name: ClassVar[str]
    #: Programs the target must provide (what ``remote check`` looks for).
    commands: ClassVar[tuple[str, ...]]
    #: What a job id of this scheduler looks like; anything else is refused before it reaches a command.
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"[0-9]+")

    @classmethod
    def check_setting(cls, name: str, value: Any) -> None:
        """Refuse a workspace setting ``<name>.*`` (this batch system's own) that it could not use.

        ``workspace settings set`` asks the batch system named by a setting's first
        component; raise :class:`~httk.workflow.ports.BatchSystemError` with one line. Use
        the rule ``compose_script`` applies at run time, so a value is refused when it is
        written rather than when a manager is submitted.
        """
        return None  # a batch system without settings of its own has nothing to refuse

    def __init__(self, transport: RemoteTransport, *, timeout: float | None = 120.0) -> None:
        self.transport = transport
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transport!r})"

    # -- what a subclass supplies ---------------------------------------------------------------
    @abstractmethod
    def compose_script(
        self,
        workspace_path: str,
        settings: Mapping[str, Any],
        manager_args: Sequence[str],
        httk_command: Sequence[str],
        *,
        workers: int | None = None,
    ) -> str:
        """The batch script that runs one manager on ``workspace_path``."""

    @abstractmethod
    def submit_argv(self, workdir: str) -> list[str]:
        """The command that reads a batch script on stdin and submits it to run in ``workdir``."""

    @abstractmethod
    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's output."""

    @abstractmethod
    def status_argv(self, job_ids: Sequence[str]) -> list[str]: ...

    @abstractmethod
    def parse_status(self, result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        """Every id asked for with its status; ``UNKNOWN`` for an id the scheduler does not list."""

    @abstractmethod
    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]: ...

    # -- the port -------------------------------------------------------------------------------
    def submit(self, script: str, *, workdir: str) -> str:
        """Create ``workdir``, submit ``script`` to run there, return the job id."""
        self._checked(["mkdir", "-p", "--", workdir])
        argv = self.submit_argv(workdir)
        return self.parse_submit(self._checked(argv, input=script).stdout)

    def status(self, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        ids = self.check_ids(job_ids)
        if not ids:
            return {}
        result = self.transport.run(self.status_argv(ids), timeout=self.timeout)
        return self.parse_status(result, ids)

    def cancel(self, job_ids: Sequence[str]) -> None:
        ids = self.check_ids(job_ids)
        if ids:
            self._checked(self.cancel_argv(ids))

    # -- helpers --------------------------------------------------------------------------------
    def check_ids(self, job_ids: Sequence[str]) -> list[str]:
        """The ids, each checked against :attr:`id_pattern`."""
        ids = [str(job_id).strip() for job_id in job_ids]
        for job_id in ids:
            if not self.id_pattern.fullmatch(job_id):
                raise BatchSystemError(f"{self.name}: {job_id!r} is not a {self.name} job id")
        return ids

    def _checked(self, argv: Sequence[str], *, input: str | None = None) -> CommandResult:
        result = self.transport.run(argv, input=input, timeout=self.timeout)
        if result.returncode != 0:
            raise BatchSystemError(f"{self.name}: {argv[0]} failed (exit {result.returncode}): {first_line(result)}")
        return result


def first_line(result: CommandResult) -> str:
    """The first non-empty line of stderr (else stdout), for one-line errors."""
    for text in (result.stderr, result.stdout):
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def resolve_workers(settings: Mapping[str, Any], workers: int | None) -> int:
    """``workers`` when given, else the ``manager.workers`` setting, else 1 (the domain's rule)."""
    try:
        return engine_settings.resolve_workers(settings, workers)
    except ValidationError as error:
        raise BatchSystemError(str(error)) from None


def manager_command(
    workspace_path: str, manager_args: Sequence[str], httk_command: Sequence[str], workers: int
) -> str:
    """The quoted ``httk workflow run WORKSPACE --workers N ...`` line of a batch script."""
    if not httk_command:
        raise BatchSystemError("the remote's httk_command is empty")
    for word in (workspace_path, *manager_args, *httk_command):
        # A batch script is parsed line by line (sbatch reads #SBATCH lines): no control characters.
        if any(ord(character) < 32 or ord(character) == 127 for character in word):
            raise BatchSystemError(f"refusing {word!r} in a batch script: it contains a control character")
    return shlex.join([*httk_command, "workflow", "run", workspace_path, "--workers", str(workers), *manager_args])
