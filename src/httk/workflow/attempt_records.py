"""What a manager and one attempt exchange: ``context.json`` and ``outcome.ready/``.

The manager writes ``context.json`` (:class:`ContextDocument`; a step reads it as
:class:`~httk.workflow.runtime.AttemptContext`); the runner publishes
``outcome.ready/`` — ``outcome.json`` (:class:`OutcomeDocument`),
``children/spawn.json`` (:class:`SpawnDocument`) and ``transaction/manifest.json``
(:class:`TransactionDocument`) — which the manager reads in
:mod:`.engine.outcome_reader`, or ``error.json`` (:class:`RunnerErrorDocument`) when a
handler died; a runner keeps its workdir batches in ``ops.json``
(:class:`WorkdirBatchDocument`) and describes itself with :class:`RunnerDescription`.
Each record's format is defined once here and is written and checked by
:mod:`.codec`; an unknown member is refused everywhere.
Spec: 001 "What an attempt reads", "What an attempt publishes";
docs/workflow_filesystem_api.md "The outcome", "context.json".
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import attrs

from . import codec
from .domain.model import (
    OMIT_WHEN_NONE,
    Failure,
    JobKey,
    check_join_condition,
    check_placement,
    check_priority,
    check_step,
    check_tag,
)
from .protocol import document_record, one_of


def _label(value: str) -> None:
    check_tag(value, "label")


# --------------------------------------------------------------------------- outcome.ready/

OUTCOME_ACTIONS = ("advance", "wait", "succeed", "fail", "retry", "pause")


@document_record
class JoinDocument:
    """An outcome's ``join``: the step to resume and which spawned children it waits for.

    The condition is the SDK's own rule (:func:`~.domain.model.check_join_condition`); the
    children it covers are checked against the spawn by the reader.
    """

    step: Annotated[str, check_step]
    when: str = "all_succeeded"
    count: int | None = None
    on_impossible: Annotated[str, check_step] | None = None
    children: tuple[str, ...] | None = None

    def __attrs_post_init__(self) -> None:
        try:
            check_join_condition(self.when, self.count)
        except ValueError as error:
            raise codec.Problem(str(error)) from None
        children = self.children or ()
        if len(set(children)) != len(children):
            raise codec.Problem("a label is listed twice", "children")


@document_record
class OutcomeDocument:
    """``outcome.ready/outcome.json`` (``httk-workflow-outcome`` v1): one attempt's ending.

    Each action needs its member: ``advance`` a ``next_step``, ``wait`` a ``join``, ``fail``
    a ``failure``; members of another action are checked and otherwise not used.
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-outcome", 1)

    action: Annotated[str, one_of(OUTCOME_ACTIONS)]
    attempt_id: str | None = None
    step: str | None = None
    runner_steps: tuple[str, ...] | None = None
    next_step: Annotated[str, check_step] | None = None
    priority: Annotated[int, check_priority] | None = None
    join: JoinDocument | None = None
    failure: Failure | None = None
    reason: str | None = None

    def __attrs_post_init__(self) -> None:
        needed = {"advance": ("next_step", self.next_step), "wait": ("join", self.join),
                  "fail": ("failure", self.failure)}.get(self.action)
        if needed is not None and needed[1] is None:
            raise codec.Problem(f"required by the action {self.action!r}", needed[0])


@document_record
class SpawnEntry:
    """One child of ``children/spawn.json``: its label, identity, placement and payload below ``children/``."""

    label: Annotated[str, _label]
    job_id: str
    job_key: Annotated[str, JobKey.parse]
    placement: Annotated[str, check_placement]
    payload: str

    def __attrs_post_init__(self) -> None:
        key = JobKey.parse(self.job_key)
        if self.job_id != key.job_id:
            raise codec.Problem("does not match the uuid of job_key", "job_id")
        if self.payload != f"jobs/{self.job_key}":
            raise codec.Problem(f"expected jobs/{self.job_key}", "payload")


@document_record
class SpawnDocument:
    """``children/spawn.json`` (``httk-workflow-spawn`` v1): the children an outcome creates, labels unique."""

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-spawn", 1)

    children: tuple[SpawnEntry, ...]

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for index, child in enumerate(self.children):
            if child.label in seen:
                raise codec.Problem(f"duplicate label {child.label!r}", f"children[{index}].label")
            seen.add(child.label)


@document_record
class TransactionOperation:
    """One data operation: a ``put`` of ``source`` (``files/<id>``) or a ``remove`` (``missing_ok``).

    Only its members are fixed here; their values are the commit's to check against the
    staged files (:func:`.store.transactions.validate`), which fails a bad one with
    ``transaction_error`` rather than ``protocol_error``.
    """

    id: Any
    op: Any
    destination: Any
    #: Each is written only by the operation it belongs to (a put has no ``missing_ok``).
    source: Any = attrs.field(default=None, metadata={OMIT_WHEN_NONE: True})
    missing_ok: Any = attrs.field(default=None, metadata={OMIT_WHEN_NONE: True})


@document_record
class TransactionDocument:
    """``transaction/manifest.json`` (``httk-workflow-transaction`` v1): the outcome's data operations."""

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-transaction", 1)

    operations: tuple[TransactionOperation, ...]


# --------------------------------------------------------------------------- --describe


@document_record
class RunnerDescription:
    """What a runner prints for ``--describe`` (``httk-workflow-runner-description`` v1): its workflow and steps.

    Written by ``Runner.description`` (and so by the Bash SDK, byte for byte); read by
    ``workflow show`` (:func:`.operations.workflows.describe`).
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-runner-description", 1)

    workflow: str
    steps: tuple[str, ...]


# --------------------------------------------------------------------------- context.json


@document_record
class ContextChild:
    """One child of the join that started this activation, as ``context.json`` lists it."""

    label: str
    job_id: str
    job_key: str
    kind: str
    payload: str
    failure: Failure | None = None
    workdir: str | None = None
    data: str | None = None


@document_record
class ContextDocument:
    """``context.json`` (``httk-workflow-attempt-context`` v1): the manager-written identity of one attempt.

    The manager writes every member; a reader needs only the identity (``job_id``,
    ``attempt_id``, ``step``). :class:`~.runtime.AttemptContext` is what a step reads.
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-attempt-context", 1)

    job_id: str
    attempt_id: str
    step: Annotated[str, check_step]
    durable: bool = True
    workspace: str | None = None
    workspace_id: str | None = None
    job_key: str | None = None
    placement: str | None = None
    activation_id: str | None = None
    activation_ordinal: int | None = None
    attempt_ordinal: int | None = None
    total_attempts: int | None = None
    payload: str | None = None
    workdir: str | None = None
    data: str | None = None
    control: str | None = None
    workdir_mode: str | None = None
    data_mode: str | None = None
    manager_id: str | None = None
    host: str | None = None
    created_at: float | None = None
    runner: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    restart: dict[str, Any] | None = None
    children: tuple[ContextChild, ...] | None = None


# --------------------------------------------------------------------------- error.json, workdir batches

#: A member that only one SDK writes (or only some operations carry) is written only when set.
_WHEN_SET: dict[str, Any] = {OMIT_WHEN_NONE: True}


@document_record
class RunnerErrorDocument:
    """``error.json`` (``httk-workflow-runner-error`` v1): the breadcrumb of a handler that raised or died.

    ``traceback`` is the Python SDK's; ``file``, ``line`` and ``command`` are the Bash SDK's
    (the line a handler died on, when Bash knows it). The manager turns it into a
    ``runner_error`` failure (:mod:`.engine.outcome_reader`); ``job why`` quotes it.
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-runner-error", 1)

    exception: str
    message: str
    step: str | None = None
    traceback: str | None = attrs.field(default=None, metadata=_WHEN_SET)
    file: str | None = attrs.field(default=None, metadata=_WHEN_SET)
    line: int | None = attrs.field(default=None, metadata=_WHEN_SET)
    command: str | None = attrs.field(default=None, metadata=_WHEN_SET)

    @property
    def summary(self) -> str:
        """``Exception: message``, as a failure message and ``job why`` quote it."""
        return f"{self.exception}: {self.message}".strip()


WORKDIR_OPERATIONS = {"write": ("staged",), "remove": (), "rename": ("destination",)}


@document_record
class WorkdirOperation:
    """One staged workdir change: ``write`` (``staged`` to ``path``), ``remove``, or ``rename`` to ``destination``.

    The paths are checked (relative, inside the workdir) when the batch is applied.
    """

    op: Annotated[str, one_of(tuple(WORKDIR_OPERATIONS))]
    path: str
    staged: str | None = attrs.field(default=None, metadata=_WHEN_SET)
    destination: str | None = attrs.field(default=None, metadata=_WHEN_SET)

    def __attrs_post_init__(self) -> None:
        for member in WORKDIR_OPERATIONS[self.op]:
            if getattr(self, member) is None:
                raise codec.Problem(f"required by the op {self.op!r}", member)


@document_record
class WorkdirBatchDocument:
    """``.httk-runner/workdir-ready/<id>/ops.json`` (``httk-workflow-workdir-batch`` v1): one sealed batch.

    Written by ``Attempt.workdir_batch()`` and applied in order, from its ``progress.json``, by the same
    runner or the next attempt in the workdir (:func:`.outcome.apply_sealed_batch`).
    """

    FORMAT: ClassVar[codec.Format] = codec.Format("httk-workflow-workdir-batch", 1)

    id: str
    operations: tuple[WorkdirOperation, ...]
