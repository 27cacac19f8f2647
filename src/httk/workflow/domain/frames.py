"""The state frame: one complete snapshot of a job's state at one generation.

A marker names exactly one frame; the frame, not a chain of deltas, carries
everything a reader needs (step, counters, join, failure, owner), so reading a
job costs one frame. Spec: 000 "Checking and repairing", "Inspecting jobs";
docs/workflow_filesystem_api.md "Journal".
"""

from __future__ import annotations

from typing import Any

import attrs

from .lifecycle import StateKind


def _count(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    # Every budget and every reader counts with these: a frame claiming a negative count is damage, not a job.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


@attrs.frozen
class StateFrame:
    """One journalled generation of one job; its generation and counters are never negative."""

    workspace_id: str
    job_id: str
    job_key: str
    placement: str
    generation: int = attrs.field(validator=_count)
    kind: StateKind
    event: str
    previous_record_ref: str | None
    created_at: float
    priority: int
    step: str
    activation_id: str | None = None
    activation_ordinal: int = attrs.field(default=0, validator=_count)
    attempt_id: str | None = None
    attempt_ordinal: int = attrs.field(default=0, validator=_count)
    total_attempts: int = attrs.field(default=0, validator=_count)
    unclean_exits: int = attrs.field(default=0, validator=_count)
    data_generation: int = attrs.field(default=0, validator=_count)
    runner_steps: tuple[str, ...] | None = None
    pause_requested: bool = False
    join: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    owner: dict[str, Any] | None = None
    process: dict[str, Any] | None = None
    takeover: dict[str, Any] | None = None
    operator: str | None = None
    operator_key: str | None = None
    reason: str | None = None
    request_id: str | None = None
    notes: dict[str, Any] = attrs.field(factory=dict)

    def evolve(self, **changes: Any) -> StateFrame:
        return attrs.evolve(self, **changes)
