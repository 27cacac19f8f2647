"""LocalBatchSystem: a manager started detached on the target itself, its pid as the job id.

No scheduler: ``submit`` runs ``setsid nohup sh -s`` in the background with the
script on stdin and prints the background shell's pid, which the script then
``exec``s into the manager, so the id names the manager process itself.
``status`` looks the pids up in ``/proc`` (``kill -0`` where there is no
procfs); an exited manager's exit status is not kept, so a finished job is
``EXITED`` with ``succeeded`` unknown: the workspace says how its jobs ended.
The jobs a workdir records are read off the script copies ``local-PID.START.sh``
(:meth:`LocalBatchSystem.job_ids_in`), so a status without ``--job`` keeps the
start time too.
The fixed ``sh -c`` programs below take their variable parts as positional
parameters, never by interpolation. Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ...ports import BatchJobStatus, BatchSystemError, CommandResult
from .base import CommandLineBatchSystem

# fd 3 carries the script: a background command of a non-interactive shell gets /dev/null
# as stdin unless it redirects stdin itself. setsid does not fork here (the background
# child is no process-group leader), so $! is the pid of the shell that runs the script.
# The id is PID.STARTTIME (field 22 of /proc/PID/stat), so a reused pid never passes for the manager.
_LAUNCH = (
    'cd "$1" || exit 1; exec 3<&0; setsid nohup sh -s <&3 >/dev/null 2>&1 3<&- & p=$!; '
    's=$(sed "s/.*) //" "/proc/$p/stat" 2>/dev/null | cut -d" " -f20); echo "$p${s:+.$s}"'
)

# alive ID: whether the process the id names (pid and start time) still runs; a zombie has exited.
_ALIVE = """alive() {
  p=${1%%.*}; want=${1#"$p"}; want=${want#.}
  if [ -d /proc/self ]; then
    [ -r "/proc/$p/stat" ] || return 1
    grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null && return 1
    [ -z "$want" ] || [ "$(sed 's/.*) //' "/proc/$p/stat" | cut -d' ' -f20)" = "$want" ]
  else kill -0 "$p" 2>/dev/null; fi
}
"""
_PROBE = _ALIVE + """for id do if alive "$id"; then echo "$id RUNNING"; else echo "$id EXITED"; fi; done"""
# SIGTERM only the process the id names: the manager drains, then exits.
_CANCEL = _ALIVE + """for id do if alive "$id"; then kill -TERM "${id%%.*}"; fi; done"""


class LocalBatchSystem(CommandLineBatchSystem):
    """Detached background processes on the transport's machine."""

    name = "local"
    title = "local"
    description = "a manager runs as a detached background process (no scheduler)"
    commands = ("setsid", "nohup", "sh")
    # A pid, and the process's start time so a reused pid is never mistaken for the manager.
    id_pattern = re.compile(r"[1-9][0-9]*(\.[0-9]+)?")
    job_ids_are_pids = True
    finished_states = {"EXITED": None}  # the exit status of a detached process is not kept
    # The probe names every id it is given: one it does not is a probe gone wrong, not a finished job.
    forgotten = BatchJobStatus("UNKNOWN", finished=False)
    # local-PID.out (script_body): the pid alone, which the probe accepts without the start time.
    output_pattern = re.compile(r"local-([1-9][0-9]*)\.out")
    # local-PID.START.sh, the copy of the script 'run' keeps (forwarding.script_name): the whole job id.
    script_pattern = re.compile(r"local-([1-9][0-9]*)(\.[0-9]+)?\.sh")

    def script_body(self, command: str) -> list[str]:
        """Output to ``local-PID.out`` in the workdir, then the manager in place of this shell."""
        return [
            "# One httk-workflow task manager, started detached; job id = this shell's pid.",
            'exec >"local-$$.out" 2>&1',
            # Not earlier: this shell reads the rest of its script from stdin.
            f"exec {command} </dev/null",
        ]

    def submit_argv(self, workdir: str) -> list[str]:
        return ["sh", "-c", _LAUNCH, "httk-local-batch", workdir]

    def parse_submit(self, stdout: str) -> str:
        return parse_pid(stdout)

    def status_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["sh", "-c", _PROBE, "httk-local-batch", *job_ids]

    def parse_status(self, result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        if result.returncode != 0:
            raise BatchSystemError(f"local: probing pids failed (exit {result.returncode}): {result.stderr.strip()}")
        return parse_probe(result.stdout, job_ids)

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["sh", "-c", _CANCEL, "httk-local-batch", *job_ids]

    def job_ids_in(self, names: Iterable[str]) -> list[str]:
        """The ids ``PID.START`` the workdir's script copies carry; a bare ``PID`` only for output without one (pure).

        The output file ``local-PID.out`` names the pid alone, and a pid is reused: a
        bare pid probes whatever process has it now. The script copy beside it,
        ``local-PID.START.sh``, carries the start time, so the probe tells a reused pid
        from the manager. Only an output whose pid no script copy names (the copy could
        not be written, or a host without procfs, whose ids have no start) stays bare.
        """
        listed = list(names)
        ids: set[str] = set()
        timed: set[str] = set()
        for name in listed:
            if match := self.script_pattern.fullmatch(name):
                ids.add(match.group(1) + (match.group(2) or ""))
                if match.group(2):
                    timed.add(match.group(1))
        ids -= timed  # a bare pid that a timed id of the same pid names is that id
        for name in listed:
            if (match := self.output_pattern.fullmatch(name)) and match.group(1) not in timed:
                ids.add(match.group(1))
        return sorted(ids, key=lambda job_id: [int(part) for part in job_id.split(".")])



def parse_pid(stdout: str) -> str:
    """The pid the launcher printed."""
    text = stdout.strip()
    if not re.fullmatch(r"[1-9][0-9]*(\.[0-9]+)?", text):
        raise BatchSystemError(f"local: the launcher printed {text[:80]!r}, not a process id")
    return text


def parse_probe(stdout: str, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
    """``PID RUNNING|EXITED`` lines as statuses; a pid the probe did not mention is ``UNKNOWN``."""
    seen: dict[str, BatchJobStatus] = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] in ("RUNNING", "EXITED"):
            seen[fields[0]] = LocalBatchSystem.status_of(fields[1])
    return {job_id: seen.get(job_id, LocalBatchSystem.forgotten) for job_id in job_ids}
