"""CommandLineBatchSystem: the seam a batch scheduler plugs into, driven by argument vectors.

A batch system is one module (ARCHITECTURE.md rule 7): a subclass declares as
data its name, description, the commands ``remote check`` looks for, its job-id
pattern, its :class:`Capabilities`, the ``#``-directives a workspace's
``<name>.*`` settings become (:class:`Directive`) and its table of finished
states; it supplies argv builders (submit, status, cancel) and pure parsers of
their output. This base composes the batch script once for every scheduler,
refuses settings with the rule the script applies, runs the argv through the
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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from ...domain import settings as engine_settings
from ...domain.model import ValidationError
from ...domain.submit_limits import SubmitLimits
from ...ports import BatchCommandMissing, BatchJobStatus, BatchSystemError, CommandResult, RemoteTransport

#: The workspace setting that supplies the default worker count.
WORKERS_SETTING = engine_settings.WORKERS_SETTING


@attrs.frozen
class Capabilities:
    """What a scheduler offers beyond submit, status and cancel (declared data; nothing is probed)."""

    #: Many tasks under one job id (Slurm ``--array``, PBS ``-J``).
    array_jobs: bool = False
    #: Jobs can be placed into an advance reservation.
    reservations: bool = False
    #: Quality-of-service levels that carry their own limits.
    qos: bool = False

    def names(self) -> list[str]:
        """The capabilities offered, as people write them."""
        words = {"array_jobs": "array jobs", "reservations": "reservations", "qos": "QOS"}
        return [word for field, word in words.items() if getattr(self, field)]


@attrs.frozen
class ValueRule:
    """What a directive's value may be: text matching ``pattern`` and/or a positive integer."""

    #: How the refusal describes an acceptable value ("a positive integer").
    what: str
    pattern: re.Pattern[str] | None = None
    integers: bool = False

    def render(self, setting: str, value: Any) -> str:
        """``value`` as it goes into its directive; one-line error naming ``setting`` otherwise."""
        if self.integers and isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return str(value)
        if self.pattern is not None and isinstance(value, str) and self.pattern.fullmatch(value):
            return value
        raise BatchSystemError(f"setting {setting} must be {self.what}, not {value!r}")


@attrs.frozen
class Directive:
    """One workspace setting that becomes a batch directive: ``template`` with the value in ``{}``."""

    setting: str
    template: str
    rule: ValueRule

    def line(self, value: Any) -> str:
        return self.template.format(self.rule.render(self.setting, value))


class CommandLineBatchSystem(ABC):
    """Submit, query and cancel batch jobs by running the scheduler's commands through a transport."""

    #: The batch system's name: its entry point's name and the second half of a template name.
    name: ClassVar[str]
    #: How people write the scheduler's name in messages ("Slurm").
    title: ClassVar[str]
    #: What a manager becomes there, completing "This machine; ..." in a template's description.
    description: ClassVar[str]
    #: Programs the target must provide (what ``remote check`` looks for there).
    commands: ClassVar[tuple[str, ...]]
    #: What a job id of this scheduler looks like; anything else is refused before it reaches a command.
    id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"[0-9]+")
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Whether a job id is the manager's pid on the submitting machine (``local``): only then is a
    #: registered manager matched to a job by its pid, and its cancel spelled ``kill -TERM PID``.
    job_ids_are_pids: ClassVar[bool] = False
    #: The directive prefix of the batch script (``#SBATCH``); '' for a scheduler without directives.
    directive_prefix: ClassVar[str] = ""
    #: The workspace settings that become directives, in the order they are written.
    directives: ClassVar[tuple[Directive, ...]] = ()
    #: The state table: scheduler states after which a job never runs again, and whether each
    #: means success (``None``: the state alone does not say).
    finished_states: ClassVar[Mapping[str, bool | None]] = {}
    #: The status of an id the scheduler no longer lists.
    forgotten: ClassVar[BatchJobStatus] = BatchJobStatus("UNKNOWN", finished=True, succeeded=None)
    #: A manager's output file name in its workdir, the job id its group: how the jobs a workspace's
    #: ``.httk-workflow/batch`` records are found again (``None``: the names do not carry the id).
    output_pattern: ClassVar[re.Pattern[str] | None] = None

    @classmethod
    def check_setting(cls, name: str, value: Any) -> None:
        """Refuse a workspace setting ``<name>.*`` (this batch system's own) that its script could not carry.

        ``workspace settings set`` asks the batch system named by a setting's first
        component. The rule is the one :meth:`compose_script` applies, so a value is
        refused when it is written rather than when a manager is submitted; ``None``
        (JSON null) writes no directive and is accepted.
        """
        if not cls.directives:
            return  # a batch system without directives has no settings of its own to refuse
        table = {directive.setting: directive for directive in cls.directives}
        if name not in table:
            raise BatchSystemError(
                f"unknown {cls.title} setting {name!r}; the {cls.name}.* settings are the batch directives "
                f"{', '.join(sorted(table))}"
            )
        if value is not None:
            table[name].line(value)

    @classmethod
    def status_of(cls, state: str, *, succeeded: bool | None = None) -> BatchJobStatus:
        """The status of a job in ``state``, from the state table (``succeeded`` when the state does not say)."""
        if state not in cls.finished_states:
            return BatchJobStatus(state, finished=False)
        verdict = cls.finished_states[state]
        return BatchJobStatus(state, finished=True, succeeded=succeeded if verdict is None else verdict)

    def __init__(self, transport: RemoteTransport, *, timeout: float | None = 120.0) -> None:
        self.transport = transport
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transport!r})"

    # -- the batch script: composed here, once for every scheduler -------------------------------
    def compose_script(
        self,
        workspace_path: str,
        settings: Mapping[str, Any],
        manager_args: Sequence[str],
        httk_command: Sequence[str],
        *,
        workers: int | None = None,
    ) -> str:
        """The batch script that runs one manager on ``workspace_path`` (pure).

        Its directives are the fixed ones of :meth:`fixed_directives` and one per
        :attr:`directives` setting with a value; ``workers`` defaults to the
        ``manager.workers`` setting, then 1.
        """
        count = resolve_workers(settings, workers)
        command = manager_command(workspace_path, manager_args, httk_command, count)
        lines = ["#!/bin/sh"]
        chosen = [directive.line(settings[directive.setting]) for directive in self.directives
                  if settings.get(directive.setting) is not None]
        for directive in [*self.fixed_directives(job_name(workspace_path)), *chosen]:
            lines.append(f"{self.directive_prefix} {directive}")
        lines.extend(self.script_body(command))
        return "\n".join(lines) + "\n"

    def fixed_directives(self, name: str) -> list[str]:
        """Directives every script of this scheduler carries (its job name ``name``, its output file)."""
        return []

    def script_body(self, command: str) -> list[str]:
        """The lines after the directives; ``command`` is the quoted manager command line."""
        # exec: the scheduler's SIGTERM reaches the manager itself, which then drains.
        return [f"# One httk-workflow task manager, from the workspace's {self.name}.* and manager.* settings.",
                f"exec {command}"]

    # -- what a subclass supplies ---------------------------------------------------------------
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
        """Every id asked for with its status; :attr:`forgotten` for an id the scheduler does not list."""

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
        argv = self.status_argv(ids)
        result = self.transport.run(argv, timeout=self.timeout)
        self._refuse_missing(argv, result)
        return self.parse_status(result, ids)

    def cancel(self, job_ids: Sequence[str]) -> None:
        ids = self.check_ids(job_ids)
        if ids:
            self._checked(self.cancel_argv(ids))

    def submit_limits(self, settings: Mapping[str, Any]) -> SubmitLimits:
        """The site's submit limits; a batch system that reads none reports that in a note."""
        return SubmitLimits(notes=(f"{self.name} reports no submit limits",))

    def job_ids_in(self, names: Iterable[str]) -> list[str] | None:
        """The job ids the output files ``names`` of a workdir carry, in submission order (pure).

        ``None`` when this scheduler's output names do not carry its job id (:attr:`output_pattern`).
        """
        if self.output_pattern is None:
            return None
        found = {match.group(1) for name in names if (match := self.output_pattern.fullmatch(name))}
        return sorted(found, key=lambda job_id: [int(part) for part in re.findall(r"[0-9]+", job_id)])

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
        self._refuse_missing(argv, result)
        if result.returncode != 0:
            raise BatchSystemError(
                f"{self.name}: {program(argv)} failed (exit {result.returncode}): {first_line(result)}"
            )
        return result


    def _refuse_missing(self, argv: Sequence[str], result: CommandResult) -> None:
        """Raise :class:`BatchCommandMissing` when the shell could not find a declared command (exit 127)."""
        name = program(argv)
        if result.returncode == COMMAND_NOT_FOUND and name in self.commands:
            # Worded like 'remote check'; a remote session adds which remote and the check to run.
            raise BatchCommandMissing(f"batch system {self.name}: {name} is not installed on the remote; "
                                      f"install {self.title} or choose another template")


#: The exit status POSIX shells give a command they cannot find.
COMMAND_NOT_FOUND = 127


def program(argv: Sequence[str]) -> str:
    """The program an argv runs, for messages: ``$0`` of a fixed ``sh -c PROGRAM NAME ...``."""
    if len(argv) > 3 and argv[0] == "sh" and argv[1] == "-c":
        return argv[3]
    return argv[0]


def first_line(result: CommandResult) -> str:
    """The first non-empty line of stderr (else stdout), for one-line errors."""
    for text in (result.stderr, result.stdout):
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def job_name(workspace_path: str) -> str:
    """``httk-<the workspace's basename>``, spelt with ``[A-Za-z0-9._-]`` only (every scheduler takes that)."""
    base = workspace_path.rstrip("/").rsplit("/", 1)[-1] or "workspace"
    return "httk-" + re.sub(r"[^A-Za-z0-9._-]", "_", base)


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
