"""The closing summary line and the idle-timeout advice of a manager.

Finished jobs are counted as this manager finished them, never by walking the
terminal trees: like a tick, the summary costs what is active, not the
workspace's history. The active kinds are walked once, at exit. Spec: 000 "One
banner, then one summary".
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..domain.lifecycle import TERMINAL_KINDS, StateKind
from ..domain.scheduling import Requirements, mismatches
from .store import JobDamage

if TYPE_CHECKING:
    from .manager import Manager


def classify(manager: Manager) -> dict[str, object]:
    """Counts of every job this manager's prefixes cover, by what keeps it where it is."""
    store = manager.store
    prefixes = tuple(manager.config.placement_prefixes)
    counts: Counter[str] = Counter()
    not_claimable: Counter[str] = Counter()
    for kind in StateKind:
        if kind in TERMINAL_KINDS:
            continue
        for marker in store.iter_markers(kind, prefixes):
            counts[kind.value] += 1
            if kind not in (StateKind.READY, StateKind.SUBMITTED, StateKind.COMMITTING, StateKind.CANCELLING):
                continue
            try:
                spec = store.read_spec(marker)
            except JobDamage:
                counts["unreadable"] += 1
                continue
            if kind in (StateKind.COMMITTING, StateKind.CANCELLING):
                continue
            requirements = Requirements(
                pool=spec.pool,
                capabilities=frozenset(spec.capabilities),
                executor=spec.executor,
                placement=marker.placement,
            )
            for mismatch in mismatches(manager.offer, requirements):
                if mismatch.kind != "placement_prefix":
                    not_claimable[f"{mismatch.kind} {mismatch.value}"] += 1
                    break
    return {"counts": counts, "not_claimable": not_claimable}


def summarize(manager: Manager) -> str:
    data = classify(manager)
    counts: Counter[str] = data["counts"]  # type: ignore[assignment]
    counts.update(manager.finished)
    blocked: Counter[str] = data["not_claimable"]  # type: ignore[assignment]
    blocked_text = ", ".join(f"{count} need {reason}" for reason, count in sorted(blocked.items())) or "0"
    return (
        f"httk-workflow manager {manager.id} idle: {counts['succeeded']} succeeded, {counts['failed']} failed, "
        f"{counts['cancelled']} cancelled; not claimable here: {blocked_text}; "
        f"{counts['waiting']} waiting on children, {counts['paused']} paused, "
        f"{counts['ready']} ready, {counts['running'] + counts['claimed']} running elsewhere, "
        f"{counts['unreadable']} with an unreadable definition"
    )


def idle_advice(manager: Manager) -> list[str]:
    data = classify(manager)
    blocked: Counter[str] = data["not_claimable"]  # type: ignore[assignment]
    counts: Counter[str] = data["counts"]  # type: ignore[assignment]
    lines = [f"idle timeout reached after {manager.config.idle_timeout}s without progress"]
    for reason, count in sorted(blocked.items()):
        kind, value = reason.split(" ", 1)
        flag = {"pool": f"--pool {value}", "capability": f"--capability {value}"}.get(kind)
        fix = f"start a manager with {flag}" if flag else f"run a manager that serves the {value!r} executor"
        lines.append(f"{count} job(s) need {kind} {value!r}: {fix}")
    if counts["unreadable"]:
        lines.append(f"{counts['unreadable']} job(s) have an unreadable definition: run 'httk workflow workspace fsck'")
    return lines
