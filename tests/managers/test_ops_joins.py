"""Unresolvable join children and the join grace (spec 000 "Unresolvable join children").

A parent waiting on a child that cannot be resolved in this workspace records
the instant a manager first saw that in its state frame; after
``--join-grace-seconds`` it fails with ``dependency_failure``, and a manager
restart in between does not reset the instant.
"""

from __future__ import annotations

import json
import shutil
import time


def _waiting_parent(ops):
    """A parent waiting on a child that no manager of ``--placement-prefix p`` will ever run."""
    parent = ops.spawning_parent(child_exit=1)
    ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "waiting"
    [child] = ops.frame(parent).join.children
    assert ops.kind(child.job_id) == "submitted"
    return parent, child


def _join_notes(ops, parent):
    return [entry for entry in ops.log(parent) if entry["event"] == "join_note"]


def test_a_child_whose_payload_vanished_fails_the_parent_after_the_grace(ops):
    parent, child = _waiting_parent(ops)
    # Nothing is unresolved while the child's payload exists.
    ops.run("--placement-prefix", "p")
    assert ops.frame(parent).join.first_unresolved_at is None and _join_notes(ops, parent) == []

    shutil.rmtree(ops.handle.layout.payload(child.placement, child.job_key))
    before = time.time()
    first = ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "waiting"
    [note] = _join_notes(ops, parent)
    instant = note["join"]["first_unresolved_at"]
    assert before - 1 <= instant <= time.time()
    assert "cannot be resolved" in first.stderr  # the warning reaches the console
    assert " 1 waiting on children" in first.stdout.splitlines()[-1]

    # A restart does not reset the instant: no new note, the same recorded time.
    ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "waiting"
    assert len(_join_notes(ops, parent)) == 1
    assert ops.frame(parent).join.first_unresolved_at == instant

    # The grace is measured from that first instant, so a later manager with a short grace fails the parent.
    ops.wait_until(lambda: time.time() - instant > 1.2, 5, "the grace to pass")
    ops.run("--placement-prefix", "p", "--join-grace-seconds", "1")
    assert ops.kind(parent) == "failed"
    frame = ops.frame(parent)
    assert frame.event == "join_unresolvable"
    assert frame.failure.code == "dependency_failure"
    assert frame.failure.details["unresolved"] == ["c1"]
    assert frame.join.first_unresolved_at == instant


def test_the_grace_is_not_restarted_by_a_generous_manager_in_between(ops):
    parent, child = _waiting_parent(ops)
    shutil.rmtree(ops.handle.layout.payload(child.placement, child.job_key))
    ops.run("--placement-prefix", "p", "--join-grace-seconds", "3600")
    instant = ops.frame(parent).join.first_unresolved_at
    assert instant is not None
    # Still inside a 30 s grace measured from the first instant: the parent keeps waiting.
    ops.run("--placement-prefix", "p", "--join-grace-seconds", "30")
    assert ops.kind(parent) == "waiting"
    assert ops.frame(parent).join.first_unresolved_at == instant



def test_pausing_a_waiting_parent_and_continuing_it_keeps_its_children(ops):
    parent, child = _waiting_parent(ops)
    ops.request(parent, "pause")
    ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "paused"

    ops.request(parent, "continue")
    ops.run("--placement-prefix", "p")
    # The parent resumes waiting on the child it already has; its spawning step does not run again.
    assert ops.kind(parent) == "waiting"
    frame = ops.frame(parent)
    assert [entry.job_id for entry in frame.join.children] == [child.job_id]
    assert frame.total_attempts == 1
    jobs = json.loads(ops.httk("job", "list", str(ops.root), "--json").stdout)
    assert len(jobs) == 2, [job["job_key"] for job in jobs]


def test_job_why_on_a_waiting_parent_says_what_the_waiting_pass_will_do(ops):
    """One children classification and one join decision: a join already decided is not "waiting" in job why."""
    parent, child = _waiting_parent(ops)
    why = json.loads(ops.httk("job", "why", str(ops.root), parent, "--json").stdout)
    assert why["summary"] == "waiting on 1 active child(ren)"
    assert f"child c1 ({child.job_key}): submitted" in why["lines"]  # its state kind, not "active"

    # The child fails under a manager that serves only its subtree; the parent's manager has not looked yet.
    ops.run("--placement-prefix", "elsewhere")
    assert ops.kind(child.job_id) == "failed" and ops.kind(parent) == "waiting"
    why = json.loads(ops.httk("job", "why", str(ops.root), parent, "--json").stdout)
    assert why["summary"].startswith("the next manager resolves the join: join all_succeeded can no longer be "
                                     "satisfied (0/1 children succeeded)"), why
    assert f"child c1 ({child.job_key}): failed" in why["lines"]

    ops.run("--placement-prefix", "p")
    assert ops.kind(parent) == "failed"  # what job why said
