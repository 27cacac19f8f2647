"""The state frame: one complete snapshot of a job's state at one generation.

A marker names exactly one frame; the frame, not a chain of deltas, carries
everything a reader needs (step, counters, join, failure, owner), so reading a
job costs one frame. Its structured members are the frozen records below; their
attribute names are the JSON keys on disk (``codec.frame_to_json``), and a member
marked ``OMIT_WHEN_NONE`` is not written at all while it is ``None``.
Spec: 000 "Checking and repairing", "Inspecting jobs";
docs/workflow_filesystem_api.md "Journal".
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .lifecycle import StateKind

# OMIT_WHEN_NONE lives in .model so the runner side can read it without importing the frames.
from .model import OMIT_WHEN_NONE, Failure


def _omitted_when_absent() -> Any:
    return attrs.field(default=None, metadata={OMIT_WHEN_NONE: True})


def _count(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    # Every budget and every reader counts with these: a frame claiming a negative count is damage, not a job.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


@attrs.frozen
class ChildRef:
    """One child a join waits for: its label on the spawning attempt and where the child lives."""

    label: str
    job_id: str
    job_key: str
    placement: str


@attrs.frozen
class JoinRecord:
    """The join a waiting job recorded at its commit (``$.join``).

    The condition is not checked here: a join recorded by an older version may be
    invalid, and the waiting pass refuses it by name rather than the frame being damage.
    """

    step: str
    when: str = "all_succeeded"
    count: int | None = None
    on_impossible: str | None = None
    children: tuple[ChildRef, ...] = ()
    #: The first instant a child was seen unresolvable (the grace survives a restart); ``None`` until then.
    first_unresolved_at: float | None = None
    #: How the join ended (a ``JoinAction`` value) once it started the next activation; omitted when absent.
    resolved: str | None = _omitted_when_absent()


@attrs.frozen
class Owner:
    """The manager that owns a job under its lease (``$.owner``)."""

    manager_id: str
    host: str
    lease_seconds: float
    claimed_at: float


@attrs.frozen
class ProcessRecord:
    """The launched attempt's process identity and control directory (``$.process``)."""

    host: str
    pid: int
    start_ticks: int | None
    pgid: int
    control: str


@attrs.frozen
class StoppedGroup:
    """How a taking-over manager stopped a published attempt's process group before committing it."""

    pgid: int
    method: str
    verified: str
    seconds: float


@attrs.frozen
class TakeoverEvidence:
    """What a takeover decided from (the verdict's evidence) and who took over, when (``$.takeover``)."""

    rule: str
    kind: str
    workdir_mode: str
    #: ``None`` when the owner never heartbeat or stopped (JSON has no infinity).
    heartbeat_age: float | None
    lease_seconds: float
    grace_factor: float
    recorded_host: str
    this_host: str
    process_alive: bool | None
    outcome_published: bool
    unsafe_persistent: bool
    unsafe_isolated: bool
    by: str
    at: float
    previous_owner: str | None
    owner_stopped: bool
    #: Set by the rules that wait out the takeover grace; omitted when absent.
    grace_seconds: float | None = _omitted_when_absent()
    #: Set by the rules that wait out the takeover grace; omitted when absent.
    grace_remaining: float | None = _omitted_when_absent()
    #: Set when the group of a published attempt was stopped first; omitted when absent.
    stopped_group: StoppedGroup | None = _omitted_when_absent()


#: Frame members that attribute one transition (who asked, why, which request): never carried forward.
PER_TRANSITION = ("operator", "operator_key", "reason", "request_id")
#: Notes that describe one transition (a transfer's detach or import, a verified cancellation).
PER_TRANSITION_NOTES = ("transfer", "cancellation")


@attrs.frozen
class StateFrame:
    """One journalled generation of one job; its generation and counters are never negative."""

    #: The journal document's ``format`` and ``format_version`` (``codec.frame_to_json`` writes them).
    FORMAT_NAME: ClassVar[str] = "httk-workflow-state-frame"
    FORMAT_VERSION: ClassVar[int] = 1

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
    join: JoinRecord | None = None
    failure: Failure | None = None
    owner: Owner | None = None
    process: ProcessRecord | None = None
    takeover: TakeoverEvidence | None = None
    operator: str | None = None
    operator_key: str | None = None
    reason: str | None = None
    request_id: str | None = None
    notes: dict[str, Any] = attrs.field(factory=dict)

    def evolve(self, **changes: Any) -> StateFrame:
        return attrs.evolve(self, **changes)

    def successor(self, **changes: Any) -> StateFrame:
        """The next transition's frame: the job's state carried forward, its attribution not.

        Step, counters, budgets, join, owner and process are the job's state and carry on
        until a transition changes them; who asked for a transition and why
        (:data:`PER_TRANSITION`) and the notes that describe one transition
        (:data:`PER_TRANSITION_NOTES`) belong to the frame that recorded them, so a later
        frame names them only when its own transition ``changes`` them — except while a
        requested pause or cancellation is pending, which the frames up to the one that
        completes it attribute to the request.
        """
        reset: dict[str, Any] = {}
        if not (self.pause_requested or self.kind == StateKind.CANCELLING):
            # A pause or a cancellation still under way is the asker's procedure: every frame until
            # it completes, the completing one included, names who asked and why.
            reset = {name: None for name in PER_TRANSITION}
        reset["notes"] = {key: value for key, value in self.notes.items() if key not in PER_TRANSITION_NOTES}
        return attrs.evolve(self, **{**reset, **changes})

    @property
    def owner_id(self) -> str | None:
        """The id of the manager that owns the job, ``None`` when none does."""
        return self.owner.manager_id if self.owner is not None else None
