"""The closing summary line and the idle-timeout advice of a manager.

Finished jobs are counted as this manager finished them, never by walking the
terminal trees: like a tick, the summary costs what is active, not the
workspace's history. The active kinds are walked once, at exit, each directory
streamed as it is listed, so the walk's memory does not grow with the queue
(each ready job's ``job.json`` is read, classified and dropped). An owned job
(claimed, running, committing, cancelling) is classified by the same takeover
verdict the recovery pass acts on: "running elsewhere" only under a live
owner, "awaiting takeover" when a manager will take it over once the rules
admit it, "stranded" when no manager here ever will. Spec: 000 "One banner,
then one summary".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ..domain.lifecycle import OWNED_KINDS, TERMINAL_KINDS, StateKind
from ..domain.scheduling import Requirements, mismatches
from ..store.discovery import walk_names
from ..store.markers import Marker
from ..store.store import JobDamage
from .context import TickContext
from .recovery import Recovery


def _owned_bucket(ctx: TickContext, recovery: Recovery, marker: Marker) -> str:
    """Where an owned job stands: ``elsewhere``, ``awaiting``, ``stranded`` or ``unreadable``."""
    try:
        view = ctx.store.read_job(marker)
    except JobDamage:
        return "unreadable"
    if view.spec is None:
        return "unreadable"
    if view.frame.owner_id == ctx.manager_id:
        return "awaiting"  # left behind by this manager (a drain): the next one recovers it from its lease
    verdict = recovery.judge(view)
    if verdict is None or verdict.awaits_takeover:
        return "awaiting"
    return "elsewhere" if verdict.rule == "lease_live" else "stranded"


def classify(ctx: TickContext, recovery: Recovery) -> dict[str, object]:
    """Counts of every job this manager's prefixes cover, by what keeps it where it is."""
    store = ctx.store
    prefixes = tuple(ctx.config.placement_prefixes)
    counts: Counter[str] = Counter()
    not_claimable: Counter[str] = Counter()
    for kind in StateKind:
        if kind in TERMINAL_KINDS:
            continue
        # Streamed as listed: a count needs no order, so the walk holds no listing (a sorted walk
        # held every entry of the largest directory: 39 MB for a placement of 100,000 ready jobs).
        for placement, name in walk_names(store.fs, store.layout, kind, prefixes=prefixes, ordered=False):
            marker = Marker.parse(kind, placement, name)
            counts[kind.value] += 1
            if kind in OWNED_KINDS:
                counts[_owned_bucket(ctx, recovery, marker)] += 1
                continue
            if kind not in (StateKind.READY, StateKind.SUBMITTED):
                continue
            try:
                spec = store.read_spec(marker)
            except JobDamage:
                counts["unreadable"] += 1
                continue
            requirements = Requirements(
                pool=spec.pool,
                capabilities=frozenset(spec.capabilities),
                executor=spec.executor,
                placement=marker.placement,
            )
            for mismatch in mismatches(ctx.offer, requirements):
                if mismatch.kind != "placement_prefix":
                    not_claimable[f"{mismatch.kind} {mismatch.value}"] += 1
                    break
    return {"counts": counts, "not_claimable": not_claimable}


def summarize(ctx: TickContext, recovery: Recovery, *, finished: Mapping[str, int], refused: int) -> str:
    """The closing line: ``finished`` are the jobs this manager made terminal, ``refused`` how many it refuses."""
    data = classify(ctx, recovery)
    counts: Counter[str] = data["counts"]  # type: ignore[assignment]
    counts.update(finished)
    blocked: Counter[str] = data["not_claimable"]  # type: ignore[assignment]
    blocked_text = ", ".join(f"{count} need {reason}" for reason, count in sorted(blocked.items())) or "0"
    return (
        f"httk-workflow manager {ctx.manager_id} idle: {counts['succeeded']} succeeded, {counts['failed']} failed, "
        f"{counts['cancelled']} cancelled; not claimable here: {blocked_text}; "
        f"{counts['waiting']} waiting on children, {counts['paused']} paused, "
        f"{counts['ready']} ready, {counts['elsewhere']} running elsewhere, "
        f"{counts['awaiting']} awaiting takeover, {counts['stranded']} stranded (see 'job why'), "
        f"{counts['unreadable']} with an unreadable definition; {refused} refused (see 'job why')"
    )


def idle_advice(ctx: TickContext, recovery: Recovery) -> list[str]:
    data = classify(ctx, recovery)
    blocked: Counter[str] = data["not_claimable"]  # type: ignore[assignment]
    counts: Counter[str] = data["counts"]  # type: ignore[assignment]
    lines = [f"idle timeout reached after {ctx.config.idle_timeout}s without progress"]
    for reason, count in sorted(blocked.items()):
        kind, value = reason.split(" ", 1)
        flag = {"pool": f"--pool {value}", "capability": f"--capability {value}"}.get(kind)
        fix = f"start a manager with {flag}" if flag else f"run a manager that serves the {value!r} executor"
        lines.append(f"{count} job(s) need {kind} {value!r}: {fix}")
    earliest = recovery.awaiting()
    if counts["awaiting"] and earliest is not None:
        wait = max(earliest - ctx.clock.now(), 0.0)
        lines.append(f"{counts['awaiting']} job(s) of a stopped manager await their takeover, the first admitted "
                     f"in {wait:.0f}s: raise --idle-timeout, or see 'httk workflow job why'")
    if counts["stranded"]:
        lines.append(f"{counts['stranded']} job(s) of a stopped manager cannot be taken over from this host: "
                     "'httk workflow job why' names the host or the flag that recovers each")
    if counts["unreadable"]:
        lines.append(f"{counts['unreadable']} job(s) have an unreadable definition: run 'httk workflow workspace fsck'")
    return lines
