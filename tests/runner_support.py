"""What the tests that run real processes share: the ``httk`` command, a Bash runner prelude, /proc probes.

Imported by name (``from runner_support import ...``), like memory_support and cli_support.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The venv's bin directory, put first on the PATH a spawned manager sees.
BIN = Path(sys.executable).parent
HTTK = str(BIN / "httk")

#: Bash prelude of every runner: ``publish JSON-MEMBERS`` publishes one outcome the protocol way;
#: ``wait_for FILE`` waits up to 60 s for FILE to appear in the workdir.
PRELUDE = r"""set -u
publish() {
  d="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.$$"; mkdir -p "$d"
  printf '{"format":"httk-workflow-outcome","format_version":1,%s}\n' "$1" > "$d/outcome.json"
  mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"
}
wait_for() {  # wait_for FILE: up to 60 s for FILE to appear in the workdir
  for _ in $(seq 1 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1
}
"""
SUCCEED = """publish '"action":"succeed"'"""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


def pid_alive(pid: int) -> bool:
    """The process ``pid`` exists and is not a zombie, from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")
