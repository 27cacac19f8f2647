"""Process groups on Linux: reading ``/proc/<pid>/stat``, liveness of a group, signalling it.

The one implementation behind the manager's :class:`~httk.workflow.adapters.process.LocalProcessControl`,
the runner side's :func:`httk.workflow.runtime.run_command` and
:class:`httk.workflow.supervision.ProcessSupervisor`. Invariants: a zombie never
counts as alive (it cannot run or write any more), and neither process group 1
(or 0) nor the caller's own group is ever signalled.
"""

from __future__ import annotations

import os

#: (state, ppid, pgrp, start_ticks) from ``/proc/<pid>/stat``; a plain tuple because a runner imports
#: this module at start-up and a NamedTuple class costs more to create than the whole rest of it.
ProcStat = tuple[str, int, int, int]


def read_stat(pid: int) -> ProcStat | None:
    """(state, ppid, pgrp, start_ticks) of ``pid`` from ``/proc/<pid>/stat``; ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if b")" not in raw:
        return None  # vanished while being read
    # comm (field 2) may contain spaces and ')': the fields resume after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def check_signallable(pgid: int) -> None:
    """``ValueError`` for a group whose signal would reach the caller itself (``killpg(0)``, our own group)."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to signal process group {pgid}")


def signal_group(pgid: int, signum: int) -> bool:
    """``killpg(pgid, signum)``; ``False`` when the group no longer exists (``PermissionError`` propagates)."""
    check_signallable(pgid)
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member exists, owned by someone else
    # killpg also reaches zombies nobody has reaped yet (orphans linger where PID 1 does
    # not reap); /proc tells them apart. Without /proc, a group that answers counts as alive.
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            stat = read_stat(pid)
        except OSError:
            continue  # unreadable (hidepid): not ours
        if stat is not None and stat[2] == pgid and stat[0] not in ("Z", "X"):
            return True
    return False


def child_exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it (its zombie keeps the group id reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
