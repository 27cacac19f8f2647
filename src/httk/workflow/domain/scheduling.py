"""Pure pieces of a scheduling tick: claim filters, best-within-window order, slow-pass levels.

Owns what a manager may claim (pool, capabilities, executor, placement prefix),
which directories a prefix-restricted walk descends into, the order in which it
claims from one bounded window, and how loudly a slow pass is logged. Invariant:
the same inputs give the same order on every manager, so a tick is reproducible
and equal priorities never reorder at random. (The round robin over placement
roots is the discovery cursor's: it is state, kept in memory by the service.)
Spec: 000 "Run" (pools, long scans), "Scheduling".
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import attrs

# The placement rules live in .placement (the store's walks import them without these records);
# re-exported here for the engine and operations modules that import them from scheduling.
from .placement import components as _components
from .placement import may_contain_matches as may_contain_matches
from .placement import placement_matches as placement_matches

#: A pass that takes this share of the lease is logged at the given level.
PASS_WARNING_FRACTION = 0.5
PASS_ERROR_FRACTION = 0.9


@attrs.frozen
class Offer:
    """What one manager serves, as published in its manifest."""

    pools: frozenset[str] = attrs.field(converter=frozenset)
    capabilities: frozenset[str] = attrs.field(converter=frozenset)
    executors: frozenset[str] = attrs.field(converter=frozenset)
    placement_prefixes: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class Requirements:
    """What one job needs from a manager, from its ``job.json`` and placement."""

    pool: str
    capabilities: frozenset[str] = attrs.field(converter=frozenset)
    executor: str
    placement: str


@attrs.frozen
class Mismatch:
    """One reason a manager cannot claim a job, with the change that would clear it."""

    #: ``executor``, ``pool``, ``capability`` or ``placement_prefix``.
    kind: str
    value: str
    advice: str


def mismatches(offer: Offer, req: Requirements) -> tuple[Mismatch, ...]:
    """Every reason ``offer`` cannot claim ``req``; empty means claimable.

    Order: executor, pool, capabilities (sorted), placement prefix — the order ``job why`` lists them.
    """
    found: list[Mismatch] = []
    if req.executor not in offer.executors:
        found.append(
            Mismatch(
                "executor",
                req.executor,
                f"this manager does not run the {req.executor!r} executor; start a manager that serves it",
            )
        )
    if req.pool not in offer.pools:
        found.append(Mismatch("pool", req.pool, f"start a manager with --pool {req.pool}"))
    for capability in sorted(req.capabilities - offer.capabilities):
        found.append(Mismatch("capability", capability, f"start a manager with --capability {capability}"))
    if not placement_matches(req.placement, offer.placement_prefixes):
        root = _components(req.placement)[0] if _components(req.placement) else req.placement
        found.append(
            Mismatch(
                "placement_prefix",
                req.placement,
                f"add --placement-prefix {root} or drop the --placement-prefix options "
                f"(this manager scans only {', '.join(offer.placement_prefixes)})",
            )
        )
    return tuple(found)


@attrs.frozen
class Candidate:
    """A claimable job found in the window: its priority, a stable tie-break key, and the caller's item."""

    priority: int
    order_key: str
    item: object = attrs.field(default=None, eq=False)


def best_within_window(candidates: Iterable[Candidate], slots: int) -> list[Candidate]:
    """At most ``slots`` candidates, highest priority first, equal priorities by ascending ``order_key``."""
    if slots <= 0:
        return []
    # nsmallest is documented as sorted(...)[:n], so equal keys keep their input order.
    return heapq.nsmallest(slots, candidates, key=lambda c: (-c.priority, c.order_key))


def pass_duration_level(duration: float, lease_seconds: float) -> str | None:
    """``"error"`` for a pass of at least 0.9 lease, ``"warning"`` for at least 0.5, else ``None``."""
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be > 0, got {lease_seconds!r}")
    if duration >= PASS_ERROR_FRACTION * lease_seconds:
        return "error"
    if duration >= PASS_WARNING_FRACTION * lease_seconds:
        return "warning"
    return None
