"""The ``children`` of context.json after a join: each child's real state kind and canonical failure.

Spec 001 "What an attempt reads": every child carries its ``kind`` and "its published
failure as the canonical Failure", and ``codes = [child.failure.code for child in
a.children.failed]`` must work; spec 002 row ``ChildResult``: "its state". A join
satisfied early leaves children that are not terminal: their kind is the kind of
their marker when the context is built (never a made-up ``active``), and a cancelled
child's failure is the cancellation's, not ``None``.
"""

from __future__ import annotations

from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, JoinRecord, StateFrame
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import Failure, JobKey
from httk.workflow.engine.commit import CANCELLED_CODE, note_for_parent
from httk.workflow.engine.waiting import UNRESOLVABLE_CHILD, children_context
from httk.workflow.runtime import AttemptContext, Children
from httk.workflow.store.layout import Layout
from httk.workflow.store.markers import Marker
from httk.workflow.testing import InMemoryFilesystem

PARENT = "00000000-0000-4000-8000-00000000000a"
CONTEXT_HEAD = {"format": "httk-workflow-attempt-context", "format_version": 1, "job_id": PARENT,
                "attempt_id": "x", "step": "after", "durable": False}
IDS = {label: f"00000000-0000-4000-8000-00000000000{n}" for n, label in enumerate("abcde", start=1)}


def _key(label: str) -> str:
    return str(JobKey(job_id=IDS[label], tag=label))


def _frame(labels: str) -> StateFrame:
    children = tuple(ChildRef(label=label, job_id=IDS[label], job_key=_key(label), placement="kids")
                     for label in labels)
    join = JoinRecord(step="after", when="any_succeeded", children=children, resolved="satisfied")
    return StateFrame(workspace_id="w", job_id=PARENT, job_key=PARENT, placement="p", generation=4,
                      kind=StateKind.READY, event="join_satisfied", previous_record_ref=None, created_at=0.0,
                      priority=0, step="after", join=join)


def _marker(label: str, kind: StateKind, generation: int = 3) -> Marker:
    return Marker(kind, "kids", JobKey(job_id=IDS[label], tag=label), 0, generation, "r1")


def _place(fs: InMemoryFilesystem, layout: Layout, marker: Marker) -> None:
    fs.write_atomic(f"{layout.kind_dir(marker.kind)}/kids/{marker.name}", b"", durable=False)


def _child(fs: InMemoryFilesystem, layout: Layout, label: str) -> None:
    """The child's payload, linked to the parent as the spawning commit links it."""
    payload = layout.payload("kids", _key(label))
    fs.write_atomic(f"{payload}/.httk-job/parent.json", codec.encode({"job_id": PARENT, "label": label}),
                    durable=False)


def _by_label(fs: InMemoryFilesystem, layout: Layout, labels: str) -> dict[str, dict]:
    return {child["label"]: child for child in children_context(fs, layout, _frame(labels))}


def test_a_child_still_active_after_an_early_join_has_its_markers_kind():
    fs, layout = InMemoryFilesystem(), Layout.at("/ws")
    for label in "abcd":
        _child(fs, layout, label)
    succeeded = _marker("a", StateKind.SUCCEEDED, 5)
    note_for_parent(fs, layout, _marker("a", StateKind.RUNNING, 4), succeeded, None, durable=False, workdir=None)
    _place(fs, layout, succeeded)
    _place(fs, layout, _marker("b", StateKind.RUNNING, 4))
    _place(fs, layout, _marker("c", StateKind.READY, 1))
    # A marker seen twice mid-rename: the higher generation is the child's current state.
    _place(fs, layout, _marker("d", StateKind.READY, 2))
    _place(fs, layout, _marker("d", StateKind.WAITING, 7))
    children = _by_label(fs, layout, "abcde")
    kinds = {label: child["kind"] for label, child in children.items()}
    assert kinds == {"a": "succeeded", "b": "running", "c": "ready", "d": "waiting", "e": UNRESOLVABLE_CHILD}
    assert children["b"]["failure"] is None
    # What the runner reads is the same: typed children with their state.
    document = {**CONTEXT_HEAD, "children": list(children.values())}
    context = AttemptContext.from_json(document)
    assert [child.kind for child in context.children] == ["succeeded", "running", "ready", "waiting", "unresolvable"]


def test_the_kind_is_read_when_the_context_is_built_not_remembered():
    fs, layout = InMemoryFilesystem(), Layout.at("/ws")
    _child(fs, layout, "b")
    ready = _marker("b", StateKind.READY, 1)
    _place(fs, layout, ready)
    assert _by_label(fs, layout, "b")["b"]["kind"] == "ready"
    fs.remove(f"{layout.kind_dir(StateKind.READY)}/kids/{ready.name}")
    _place(fs, layout, _marker("b", StateKind.RUNNING, 2))
    assert _by_label(fs, layout, "b")["b"]["kind"] == "running"


def test_a_cancelled_child_carries_the_canonical_cancellation_failure():
    fs, layout = InMemoryFilesystem(), Layout.at("/ws")
    _child(fs, layout, "a")
    # The frame may still hold an earlier attempt's failure: it is not why the child ended.
    stale = Failure("runner_error", "the step raised", {}, True)
    cancelled = _marker("a", StateKind.CANCELLED, 6)
    written = note_for_parent(fs, layout, _marker("a", StateKind.WAITING, 5), cancelled, stale,
                              durable=False, workdir=None)
    assert written is not None and written.note["failure"]["code"] == CANCELLED_CODE
    _place(fs, layout, cancelled)
    document = {**CONTEXT_HEAD, "children": children_context(fs, layout, _frame("a"))}
    children = AttemptContext.from_json(document).children
    failed = Children(children).failed
    assert [child.failure.code for child in failed] == [CANCELLED_CODE]  # the idiom of spec 001
    assert failed[0].failure.retryable is False and failed[0].failure.message


def test_a_cancelled_childs_note_written_before_the_fix_reads_with_the_canonical_failure():
    fs, layout = InMemoryFilesystem(), Layout.at("/ws")
    _child(fs, layout, "a")
    note = {"kind": "cancelled", "failure": None, "job_id": IDS["a"], "job_key": _key("a"), "label": "a",
            "placement": "kids", "data": None, "workdir": None}
    fs.write_atomic(f"{layout.control}/joins/{PARENT}/{IDS['a']}.json", codec.encode(note), durable=False)
    [child] = children_context(fs, layout, _frame("a"))
    assert child["kind"] == "cancelled" and child["failure"]["code"] == CANCELLED_CODE
