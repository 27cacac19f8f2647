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

FRAME_FORMAT = "httk-workflow-state-frame"


@attrs.frozen
class StateFrame:
    """One journalled generation of one job."""

    workspace_id: str
    job_id: str
    job_key: str
    placement: str
    generation: int
    kind: StateKind
    event: str
    previous_record_ref: str | None
    created_at: float
    priority: int
    step: str
    activation_id: str | None = None
    activation_ordinal: int = 0
    attempt_id: str | None = None
    attempt_ordinal: int = 0
    total_attempts: int = 0
    unclean_exits: int = 0
    data_generation: int = 0
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

    def to_json(self) -> dict[str, Any]:
        document = attrs.asdict(self, recurse=False)
        document["kind"] = self.kind.value
        document["runner_steps"] = list(self.runner_steps) if self.runner_steps is not None else None
        document["format"] = FRAME_FORMAT
        document["format_version"] = 1
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> StateFrame:
        """Build a frame from its JSON; raises ``ValueError`` naming the member that is wrong."""
        if document.get("format") != FRAME_FORMAT or document.get("format_version") != 1:
            raise ValueError("state frame @ $.format: not an httk-workflow-state-frame version 1")
        values = {key: value for key, value in document.items() if key not in ("format", "format_version")}
        names = {field.name for field in attrs.fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"state frame @ $.{sorted(unknown)[0]}: unknown member")
        try:
            values["kind"] = StateKind(values["kind"])
            if values.get("runner_steps") is not None:
                values["runner_steps"] = tuple(values["runner_steps"])
            for key in ("generation", "priority", "activation_ordinal", "attempt_ordinal", "total_attempts"):
                if not isinstance(values.get(key, 0), int):
                    raise ValueError(f"state frame @ $.{key}: expected int")
            return cls(**values)
        except KeyError as error:
            raise ValueError(f"state frame @ $.{error.args[0]}: missing member") from None
        except TypeError as error:
            raise ValueError(f"state frame @ $: {error}") from None
