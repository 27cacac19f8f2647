"""ToyBatchSystem: a batch system that ships outside httk-workflow, written against its seam only.

The "scheduler" is POSIX sh on the target: ``submit`` saves the script in the
workdir and starts it with ``nohup`` in the background, the job id is
``toy-PID``; ``status`` asks ``kill -0`` whether the pid still runs; ``cancel``
sends SIGTERM. A workspace's ``toy.label`` setting becomes a ``#TOY`` directive.
Every variable part reaches the fixed ``sh -c`` programs as a positional
parameter, never inside the program text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from httk.workflow.adapters.batch.base import CommandLineBatchSystem, Directive, ValueRule
from httk.workflow.ports import BatchJobStatus, BatchSystemError, CommandResult

_SUBMIT = ('cd "$1" || exit 1; cat > "toy-job.$$.sh" || exit 1; '
           'nohup sh "toy-job.$$.sh" > "toy-$$.out" 2>&1 < /dev/null & echo "toy-$!"')
_STATUS = 'for id do if kill -0 "${id#toy-}" 2>/dev/null; then echo "$id RUNNING"; else echo "$id DONE"; fi; done'
_CANCEL = 'for id do kill -TERM "${id#toy-}" 2>/dev/null; done; exit 0'


class ToyBatchSystem(CommandLineBatchSystem):
    """Managers as background shells on the transport's machine."""

    name = "toy"
    title = "toy"
    description = "a manager runs as a toy batch job (a nohup'd shell) there"
    commands = ("sh", "nohup", "kill")
    id_pattern = re.compile(r"toy-[1-9][0-9]*")
    directive_prefix = "#TOY"
    directives = (Directive("toy.label", "--label={}", ValueRule("a label ([a-z0-9-])", re.compile(r"[a-z0-9-]+"))),)
    finished_states = {"DONE": None}  # kill -0 cannot tell how it ended

    def submit_argv(self, workdir: str) -> list[str]:
        return ["sh", "-c", _SUBMIT, "toy-submit", workdir]

    def parse_submit(self, stdout: str) -> str:
        text = stdout.strip()
        if not self.id_pattern.fullmatch(text):
            raise BatchSystemError(f"toy: submit printed {text[:80]!r}, not a job id")
        return text

    def status_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["sh", "-c", _STATUS, "toy-status", *job_ids]

    def parse_status(self, result: CommandResult, job_ids: Sequence[str]) -> dict[str, BatchJobStatus]:
        if result.returncode != 0:
            raise BatchSystemError(f"toy: status failed (exit {result.returncode})")
        seen = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.count(" ") == 1)
        return {job_id: self.status_of(seen[job_id]) if job_id in seen else self.forgotten for job_id in job_ids}

    def cancel_argv(self, job_ids: Sequence[str]) -> list[str]:
        return ["sh", "-c", _CANCEL, "toy-cancel", *job_ids]
