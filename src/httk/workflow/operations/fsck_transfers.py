"""fsck of the transfer ledgers: an unfinished transfer is a warning, a ledger nothing can finish a problem.

An unfinished transfer is no damage: its jobs are safe at one end and its own
command (again, or with ``--resume``) settles it; fsck cannot, it needs the other
side. A ledger that does not read, or a ``transferring`` job no ledger here will
ever settle, is left for an operator. Spec: 000 "Checking and repairing a
workspace", "Running on a remote".
"""

from __future__ import annotations

from typing import Any

from ..store.markers import Marker
from ..store.transfer_ledger import SOURCE, ledger_census, resume_command, transfers_dir
from ..store.workspaces import WorkspaceHandle
from .fsck_census import Problem


def transfer_problems(
    handle: WorkspaceHandle, transferring: dict[str, list[Marker]], *, repair: bool, problems: list[Problem],
) -> list[dict[str, Any]]:
    """Each unfinished transfer, returned (a warning); each ledger nothing can finish, in ``problems``.

    ``transferring`` maps a transfer id (``""``: none named) to the ``transferring`` jobs the walk met.
    """
    fs, store = handle.fs, handle.store
    left = "left: fsck does not rewrite a transfer ledger" if repair else "reported"
    unfinished: list[dict[str, Any]] = []
    named: set[str] = set()
    for ledger in ledger_census(fs, handle.layout, handle.ports.clock):
        transfer_id = ledger["transfer_id"]
        named.add(transfer_id)
        if "problem" in ledger:
            held = transferring.get(transfer_id, [])
            keys = ", ".join(str(marker.key) for marker in held[:3]) + (", …" if len(held) > 3 else "")
            holds = f"; it holds {len(held)} transferring job(s) ({keys}), which no manager claims" if held else ""
            problems.append(Problem("transfer_ledger_unreadable", ledger["path"], None,
                                    f"the ledger of transfer {transfer_id} does not read "
                                    f"({ledger['problem']}){holds}", left))
            continue
        unfinished.append(unfinished_warning(handle, ledger))
    for transfer_id, markers in sorted(transferring.items()):
        if transfer_id in named:
            continue
        exists = bool(transfer_id) and fs.exists(f"{transfers_dir(handle.layout)}/{transfer_id}/ledger.json")
        why = ("its frame names no transfer" if not transfer_id else
               f"transfer {transfer_id} ended without settling it" if exists else
               f"transfer {transfer_id} has no ledger here")
        for marker in markers:
            path = store.marker_path(marker)
            if fs.lstat(path) is None:
                continue  # settled since the walk met it (retired or rolled back)
            problems.append(Problem("transfer_ledger_missing", path, str(marker.key),
                                    f"the job is transferring, but {why}: nothing will move it again", left))
    return unfinished


def unfinished_warning(handle: WorkspaceHandle, ledger: dict[str, Any]) -> dict[str, Any]:
    """The warning of one unfinished transfer: which, which way, how many jobs, and the command finishing it."""
    here, jobs = handle.reference, len(ledger["jobs"])
    counted = f"{jobs} job{'' if jobs == 1 else 's'}"
    unless = "(unless that transfer's command is still running)"
    if ledger["role"] == SOURCE:
        source, destination = here, ledger["destination"] or "DESTINATION"
        resume = resume_command(source, destination)
        message = (f"{counted} held by unfinished transfer {ledger['transfer_id']} to {destination} (at step "
                   f"{ledger['step']}): no manager claims them until it ends; finish it with '{resume}' {unless}")
    else:
        source, destination = ledger["source"] or "SOURCE", here
        resume = resume_command(source, destination)
        message = (f"{counted} in flight in unfinished transfer {ledger['transfer_id']} from {source} (imported "
                   f"here, not acknowledged): finish it from the machine that started it with '{resume}' {unless}")
    return {"code": "unfinished_transfer", "transfer_id": ledger["transfer_id"], "role": ledger["role"],
            "step": ledger["step"], "source": source, "destination": destination, "jobs": ledger["jobs"],
            "resume": resume, "path": ledger["path"], "message": message}
