"""Committing an attempt's outcome: children, join notes, and the one transition.

A commit runs while the job's marker is ``committing`` and owned by this
manager, so only one actor commits at a time. Every side effect is idempotent
(children are verified and created by :mod:`.children`, join notes are overwritten with
the same bytes), so a manager that dies mid-commit leaves work that the next
owner redoes to the same result. The decision itself (advance, wait, retry, …)
comes from the domain's budgets. Spec: 001 "What an attempt publishes",
"Spawning children", "Gathering them".
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import codec
from ..domain import budgets
from ..domain.frames import StateFrame
from ..domain.lifecycle import TERMINAL_KINDS, Event, StateKind, drain_release_event, is_terminal
from ..domain.model import Failure
from ..ports import Filesystem, Ids
from ..protocol import PRIVATE_DIR, JobSpec, parse_job_bytes
from .children import PARENT_FILE
from .layout import Layout
from .markers import Marker
from .outcomes import Outcome


@attrs.frozen
class Decision:
    """The transition a commit makes and the frame changes it carries."""

    event: Event
    changes: dict[str, Any]
    summary: str


#: The kinds a join note can name (only a terminal transition writes one).
_TERMINAL_NAMES = frozenset(kind.value for kind in TERMINAL_KINDS)


def released(**changes: Any) -> dict[str, Any]:
    """Frame changes that end an attempt's ownership."""
    return {"owner": None, "process": None, **changes}


def new_activation(frame: StateFrame, ids: Ids, step: str, **changes: Any) -> dict[str, Any]:
    return released(
        step=step,
        activation_id=ids.new_id(),
        activation_ordinal=frame.activation_ordinal + 1,
        attempt_ordinal=0,
        attempt_id=None,
        **changes,
    )


def decide(outcome: Outcome, frame: StateFrame, spec: JobSpec, ids: Ids) -> Decision:
    """What committing ``outcome`` does to a job whose current frame is ``frame``."""
    policy = spec.retry_policy
    counters = budgets.counters_of(frame)
    runner_steps = outcome.runner_steps if outcome.runner_steps is not None else frame.runner_steps
    base: dict[str, Any] = {"runner_steps": runner_steps}
    if outcome.unclean:
        base["unclean_exits"] = frame.unclean_exits + 1
    pause = frame.pause_requested
    action = outcome.action
    if action == "succeed":
        return Decision(Event.COMMIT_SUCCEED, released(failure=None, join=None, reason=None, **base), "succeeded")
    if action == "pause":
        return Decision(Event.COMMIT_PAUSE, released(reason=outcome.reason, pause_requested=False, **base), "paused")
    if action == "wait":
        assert outcome.join is not None
        join = {**outcome.join, "children": _join_children(outcome), "first_unresolved_at": None}
        changes = released(join=join, failure=None, **base)
        return Decision(Event.COMMIT_WAIT, changes, f"waiting on {len(join['children'])} children")
    if action == "advance":
        assert outcome.step is not None
        verdict = budgets.can_advance(policy, counters)
        if not verdict.allowed:
            failure = Failure(verdict.failure_code or "activations_exhausted", verdict.reason)
            return Decision(Event.COMMIT_FAIL, released(failure=failure.to_json(), reason=verdict.reason, **base),
                            verdict.reason)
        changes = new_activation(frame, ids, outcome.step, join=None, failure=None, reason=None, **base)
        if outcome.priority is not None:
            changes["priority"] = outcome.priority
        if pause:
            changes["pause_requested"] = False
            return Decision(Event.COMMIT_PAUSE, changes, f"advanced to {outcome.step!r} and paused as requested")
        return Decision(Event.COMMIT_ADVANCE, changes, f"advanced to {outcome.step!r}")
    explicit = action == "retry"
    failure = outcome.failure
    verdict = budgets.after_attempt(policy, counters, failure=failure, explicit_retry=explicit)
    if verdict.retry:
        last = failure.to_json() if failure is not None else None
        changes = released(failure=last, reason=outcome.reason or verdict.reason, **base)
        if pause:
            changes["pause_requested"] = False
            return Decision(Event.COMMIT_PAUSE, changes, "retry deferred by a pause request")
        return Decision(Event.COMMIT_RETRY, changes, f"retrying: {outcome.reason or verdict.reason}")
    if failure is None:
        failure = Failure(verdict.failure_code or budgets.ATTEMPTS_EXHAUSTED, f"retry refused: {verdict.reason}")
    elif verdict.failure_code:
        failure = attrs.evolve(failure, details={**failure.details, "budget": verdict.reason})
    reason = verdict.reason if verdict.failure_code else None
    return Decision(Event.COMMIT_FAIL, released(failure=failure.to_json(), reason=reason, **base),
                    f"failed: {failure.code}")


def decide_drained(frame: StateFrame, reason: str) -> Decision:
    """What giving back a job does when its own manager terminated the attempt while draining.

    Only for an attempt verified gone without publishing an outcome. The attempt is
    not charged (the domain's :func:`~httk.workflow.domain.budgets.uncharged`), but it
    did leave its workdir mid-way, so it counts as an unclean exit for the next one.
    """
    counters = budgets.uncharged(budgets.counters_of(frame))
    event = drain_release_event(frame.pause_requested)
    changes = released(
        attempt_ordinal=counters.attempts_in_activation,
        total_attempts=counters.total_attempts,
        unclean_exits=frame.unclean_exits + 1,
        reason=reason,
    )
    if event == Event.DRAIN_PAUSE:
        changes["pause_requested"] = False
        return Decision(event, changes, "stopped by the drain and paused as requested")
    return Decision(event, changes, "stopped by the drain; ready again, not charged")


def _join_children(outcome: Outcome) -> list[dict[str, Any]]:
    assert outcome.join is not None
    by_label = {child["label"]: child for child in outcome.spawned}
    labels = outcome.join["children"] or [child["label"] for child in outcome.spawned]
    return [
        {
            "label": label,
            "job_id": by_label[label]["job_id"],
            "job_key": by_label[label]["job_key"],
            "placement": by_label[label]["placement"],
        }
        for label in labels
    ]


def note_for_parent(
    fs: Filesystem,
    layout: Layout,
    marker: Marker,
    kind: StateKind,
    failure: dict[str, Any] | None,
    *,
    durable: bool,
    workdir: str | None,
) -> None:
    """Tell a waiting parent that this child reached a terminal kind (before the rename makes it so).

    Parents read these notes instead of opening the terminal trees, so a gather
    costs one directory listing however large the workspace history is.
    """
    if not is_terminal(kind):
        return
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        link = codec.decode_object(fs.read_document(f"{payload}/{PRIVATE_DIR}/{PARENT_FILE}"), "parent.json")
    except (OSError, codec.DocumentError):  # absent, malformed, or not a small regular file
        return
    parent_id = link.get("job_id")
    if not isinstance(parent_id, str):
        return
    try:
        data_mode = parse_job_bytes(fs.read_document(f"{payload}/job.json"), "job.json").data_mode
    except (OSError, codec.DocumentError):
        data_mode = "none"
    note = {
        "data": f"{layout.data_dir(marker.job_id)}/current" if data_mode == "transactional" else None,
        "kind": kind.value,
        "failure": failure,
        "job_id": marker.job_id,
        "job_key": str(marker.key),
        "placement": marker.placement,
        "label": link.get("label"),
        "workdir": workdir,
    }
    fs.write_atomic(f"{layout.control}/joins/{parent_id}/{marker.job_id}.json", codec.encode(note), durable=durable)


def clear_note(fs: Filesystem, layout: Layout, marker: Marker) -> None:
    """A job leaving a terminal kind (operator continue) is no longer terminal for its parent."""
    payload = layout.payload(marker.placement, str(marker.key))
    try:
        link = codec.decode_object(fs.read_document(f"{payload}/{PRIVATE_DIR}/{PARENT_FILE}"), "parent.json")
    except (OSError, codec.DocumentError):
        return
    try:
        fs.remove(f"{layout.control}/joins/{link.get('job_id')}/{marker.job_id}.json")
    except FileNotFoundError:
        pass


def read_notes(fs: Filesystem, layout: Layout, parent_id: str) -> dict[str, dict[str, Any]]:
    """The terminal notes of a parent's children, by child job id.

    Only :func:`note_for_parent` writes them, always naming a terminal kind: a note
    that is unreadable or names none is damage, read as no note (the child counts
    as still active), so no reader of the notes can trip over it.
    """
    notes: dict[str, dict[str, Any]] = {}
    for entry in fs.scandir(f"{layout.control}/joins/{parent_id}"):
        if not entry.name.endswith(".json"):
            continue
        try:
            note = codec.decode_object(fs.read_document(entry.path), entry.path)
        except (OSError, codec.DocumentError):
            continue
        if note.get("kind") in _TERMINAL_NAMES:
            notes[entry.name[:-5]] = note
    return notes
