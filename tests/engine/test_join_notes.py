"""A damaged join note is read as no note: the waiting pass and ``job why`` classify, never crash.

A child's terminal note (``control/joins/<parent>/<child>.json``) is written by the
child's manager; one whose ``kind`` names no terminal kind (a hand edit, a torn
disk) is skipped like an unparseable one, so the child counts as still active.
"""

from __future__ import annotations

from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, JoinRecord, StateFrame
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.engine.commit import read_notes
from httk.workflow.engine.waiting import ACTIVE_CHILD, child_kinds
from httk.workflow.store.layout import Layout
from httk.workflow.testing import InMemoryFilesystem

PARENT = "00000000-0000-4000-8000-00000000000a"
CHILDREN = {label: f"00000000-0000-4000-8000-00000000000{n}" for n, label in enumerate("abc", start=1)}


def _waiting_frame() -> StateFrame:
    children = tuple(ChildRef(label=label, job_id=job_id, job_key=job_id, placement="kids")
                     for label, job_id in CHILDREN.items())
    return StateFrame(workspace_id="w", job_id=PARENT, job_key=PARENT, placement="p", generation=3,
                      kind=StateKind.WAITING, event="commit_wait", previous_record_ref=None, created_at=0.0,
                      priority=0, step="main", join=JoinRecord(step="after", when="all_terminal", children=children))


def test_a_note_naming_no_terminal_kind_counts_as_no_note():
    fs, layout = InMemoryFilesystem(), Layout.at("/ws")
    notes = f"{layout.control}/joins/{PARENT}"
    for label, kind in (("a", "succeeded"), ("b", "bogus"), ("c", "running")):
        fs.write_atomic(f"{notes}/{CHILDREN[label]}.json", codec.encode({"kind": kind}), durable=False)
        fs.makedirs(layout.payload("kids", CHILDREN[label]))
    fs.write_atomic(f"{notes}/{CHILDREN['a']}x.json", codec.encode({"no": "kind"}), durable=False)
    assert set(read_notes(fs, layout, PARENT)) == {CHILDREN["a"]}
    assert child_kinds(fs, layout, _waiting_frame()) == {"a": StateKind.SUCCEEDED, "b": ACTIVE_CHILD, "c": ACTIVE_CHILD}
