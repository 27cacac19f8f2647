"""PbsBatchSystem: managers as PBS Pro / OpenPBS batch jobs (qsub, qstat -f -F json -x, qdel).

Argv builders and pure parsers only; the transport runs them. The ``#PBS``
directives come from the workspace's ``pbs.*`` settings (``pbs.queue`` is also
how a job enters a reservation: PBS names a reservation's queue ``R123``).
``qsub`` reads the script on stdin in the workdir, so the joined output file
``httk-WS.oNNN`` lands there. ``qstat -x`` also lists finished jobs for as long
as the server keeps job history; an id it no longer knows (``qstat: Unknown Job
Id ...`` and exit 153, which is ``PBSE_UNKJOBID`` 15001 modulo 256) is
``UNKNOWN`` and counted as finished; so is a job in state ``M``, moved to another
server and no longer this one's (its outcome unknown). An id is matched on its
server too where it names one. A finished job succeeded when its
``Exit_status`` is 0 (a job killed by signal N reports 256+N). The samples the
parsers are tested on, and where each comes from: tests/data/pbs/README.md.
Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...ports import BatchJobStatus, BatchSystemError, CommandResult
from .base import Capabilities, CommandLineBatchSystem, Directive, ValueRule, first_line

_NAME = ValueRule("a PBS name ([A-Za-z0-9_.+@-])", re.compile(r"[A-Za-z0-9_.+@-]+"))
_RESOURCE = r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.+-]+"
_CHUNK = rf"(?:[1-9][0-9]*|{_RESOURCE})(?::{_RESOURCE})*"
#: ``pbs.*`` settings → qsub options, in the order the directives are written.
DIRECTIVES: tuple[Directive, ...] = (
    Directive("pbs.queue", "-q {}", _NAME),
    Directive("pbs.account", "-A {}", _NAME),
    Directive("pbs.project", "-P {}", _NAME),
    Directive("pbs.walltime", "-l walltime={}", ValueRule(  # an integer is seconds
        "seconds or [[HH:]MM:]SS as PBS spells it", re.compile(r"[0-9]+(:[0-9]{1,2}){0,2}"), integers=True)),
    Directive("pbs.select", "-l select={}", ValueRule(
        "a PBS chunk list like '2:ncpus=8:mem=4gb' (chunks joined by '+')", re.compile(rf"{_CHUNK}(?:\+{_CHUNK})*"))),
    Directive("pbs.place", "-l place={}", ValueRule(
        "a PBS placement like 'scatter:excl'", re.compile(r"[a-z]+(:[a-z]+(=[A-Za-z0-9_.-]+)?)*"))),
)

#: ``job_state`` letters as words (PBS Professional Reference Guide, "Job States").
STATES: dict[str, str] = {
    "B": "BEGUN",  # an array job with a running subjob
    "E": "EXITING",
    "F": "FINISHED",
    "H": "HELD",
    "M": "MOVED",  # to another server (qmove, peer scheduling): no longer this server's job
    "Q": "QUEUED",
    "R": "RUNNING",
    "S": "SUSPENDED",
    "T": "TRANSIT",
    "U": "SUSPENDED",  # suspended because its workstation became busy
    "W": "WAITING",
    "X": "EXPIRED",  # a finished subjob
}
#: The state table: finished and expired jobs never run again; their ``Exit_status`` says how they ended.
#: A moved job left this server ("the job was moved to another server"), which keeps only its history:
#: from here it is finished, its outcome unknown (the manager's own files say how it ended).
FINISHED_STATES: dict[str, bool | None] = {"FINISHED": None, "EXPIRED": None, "MOVED": None}
_UNKNOWN_LINE = re.compile(r"qstat: Unknown Job Id \S+")
# qsub reads the script on stdin; its cwd becomes PBS_O_WORKDIR, where the output file goes.
_SUBMIT = 'cd "$1" || exit 1; exec qsub'


class PbsBatchSystem(CommandLineBatchSystem):
    """PBS Professional and OpenPBS through their command-line clients."""

    name = "pbs"
    title = "PBS"
    description = "a manager runs as a PBS batch job there"
    commands = ("qsub", "qstat", "qdel")
    # SEQ[.SERVER], an array job SEQ[] and a subjob SEQ[N].
    id_pattern = re.compile(r"[0-9]+(\[[0-9]*\])?(\.[A-Za-z0-9_.-]+)?")
    capabilities = Capabilities(array_jobs=True, reservations=True, qos=False)
    directive_prefix = "#PBS"
    directives = DIRECTIVES
    finished_states = FINISHED_STATES

    def fixed_directives(self, name: str) -> list[str]:
        return [f"-N {name}", "-j oe"]

    def submit_argv(self, workdir: str) -> list[str]:
        return ["sh", "-c", _SUBMIT, "qsub", workdir]

    def parse_submit(self, stdout: str) -> str:
        return parse_qsub(stdout)

    def status_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["qstat", "-f", "-F", "json", "-x", *job_ids]

    def parse_status(self, result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        return parse_qstat(result, job_ids)

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["qdel", *job_ids]


def parse_qsub(stdout: str) -> str:
    """The job id ``qsub`` printed (``SEQ.SERVER``, the whole of its output)."""
    text = stdout.strip()
    if not PbsBatchSystem.id_pattern.fullmatch(text):
        raise BatchSystemError(f"pbs: qsub printed {text[:80]!r}, not a job id")
    return text


def parse_qstat(result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
    """``qstat -f -F json -x`` as statuses; an id it does not list is ``UNKNOWN`` (finished).

    qstat exits non-zero when any id is unknown yet prints the others; any other
    complaint on stderr, or output that is no JSON object, is a one-line error.
    """
    complaints = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    if result.returncode != 0 and (not complaints or not all(_UNKNOWN_LINE.fullmatch(c) for c in complaints)):
        raise BatchSystemError(f"pbs: qstat failed (exit {result.returncode}): {first_line(result)}")
    jobs = _jobs(result.stdout)
    statuses: dict[str, BatchJobStatus] = {}
    for job_id in job_ids:
        entry = jobs.get(job_id)
        if entry is None:
            entry = next((value for key, value in jobs.items() if same_job(job_id, key)), None)
        statuses[job_id] = PbsBatchSystem.forgotten if entry is None else job_status(entry)
    return statuses


def same_job(job_id: str, key: str) -> bool:
    """Whether qstat's ``key`` names the job ``job_id`` (``SEQ`` or ``SEQ.SERVER``).

    qsub prints ``SEQ.SERVER`` with the server's short name and qstat's key may
    carry a longer one (``1.pbs`` as ``1.pbs.example.org``) or the reverse, so a
    server given must equal the key's or one be the other's leading labels; a
    bare ``SEQ`` matches any server. The same number on another server is another job.
    """
    sequence, _, server = job_id.partition(".")
    key_sequence, _, key_server = key.partition(".")
    if sequence != key_sequence:
        return False
    longer, shorter = sorted((f"{server}.", f"{key_server}."), key=len, reverse=True)
    return not server or longer.startswith(shorter)


def job_status(entry: Mapping[str, Any]) -> BatchJobStatus:
    """One job's attributes (``job_state``, ``Exit_status``) as a status."""
    letter = str(entry.get("job_state", ""))
    state = STATES.get(letter, letter or "UNKNOWN")
    exit_status = entry.get("Exit_status")
    succeeded = exit_status == 0 if isinstance(exit_status, int) and not isinstance(exit_status, bool) else None
    return PbsBatchSystem.status_of(state, succeeded=succeeded)


def _jobs(stdout: str) -> dict[str, Mapping[str, Any]]:
    """The ``Jobs`` object of qstat's JSON; none when it printed nothing or no ``Jobs`` (no id matched)."""
    if not stdout.strip():
        return {}
    try:
        # strict=False: some PBS versions write raw control characters (a tab, a newline of a
        # multi-line value) inside Variable_List / Submit_arguments strings, which strict JSON refuses.
        document = json.loads(stdout, strict=False)
    except json.JSONDecodeError as error:
        raise BatchSystemError(f"pbs: qstat -F json printed no JSON ({error.msg} at line {error.lineno})") from None
    jobs = document.get("Jobs", {}) if isinstance(document, dict) else None
    if not isinstance(jobs, dict):
        raise BatchSystemError("pbs: qstat -F json printed no 'Jobs' object")
    return {str(key): value for key, value in jobs.items() if isinstance(value, dict)}
