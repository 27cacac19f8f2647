"""A spawn can never name an existing job (issue 10, "Runner-published identifiers are untrusted").

The runner names its children's job ids. A child whose name is taken — by a
second parent spawning the same id, by a retried attempt spawning its
predecessor's child again, by another job's marker or directories, or twice in
one outcome — fails the spawning outcome with ``protocol_error`` naming the job,
and nothing is created for it. A replay of the same outcome after a crash is
never mistaken for a clash, and a clash that appears mid-commit leaves no
payload of the refused outcome behind, whatever the crash point.
"""

from __future__ import annotations

import posixpath

from commit_support import (
    CHILD,
    CHILD_ID,
    OTHER,
    OTHER_ID,
    ROOT,
    add_job,
    crash_and_recover,
    fsck_problems,
    manager,
    markers_of,
    outcome,
    protocol_failure,
    publisher,
    race_id_reservation,
    run_spawner,
    spawn_tree,
    spawning,
    workspace,
)

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.submission import submit


def _frame(handle, job_id):
    [marker] = markers_of(handle, job_id)
    return marker, handle.store.read_frame(marker)


def _control(handle, job_id):
    [entry] = list(handle.fs.scandir(handle.layout.job_attempts(job_id)))
    return entry.path


def test_a_second_parent_spawning_an_existing_child_fails_and_creates_nothing():
    ports, handle = workspace()
    first = add_job(handle)
    parents = {first.job_id}
    behaviour = publisher(ports.fs, spawning(parents, [("c", CHILD, "kids")]))
    manager(handle, ports, behaviour).run()
    [child] = markers_of(handle, CHILD_ID)
    assert child.kind == StateKind.SUCCEEDED

    second = add_job(handle)
    parents.add(second.job_id)
    manager(handle, ports, behaviour, "m-b").run()
    message = protocol_failure(handle, second.job_id)
    assert f"job {CHILD} at kids already exists" in message
    assert f"spawned by job {first.key}" in message
    # Still exactly one job, run once, and its parent is the first spawner.
    assert markers_of(handle, CHILD_ID) == [child]
    assert handle.store.read_frame(child).total_attempts == 1
    link = codec.decode_object(ports.fs.read_bytes(f"{ROOT}/kids/{CHILD}/.httk-job/parent.json"), "parent.json")
    assert link["job_id"] == first.job_id
    # The refused outcome keeps its payload: nothing of it was moved into the workspace.
    assert ports.fs.exists(f"{_control(handle, second.job_id)}/outcome.ready/children/jobs/{CHILD}/job.json")
    assert fsck_problems(handle) == []


def test_a_later_attempt_spawning_its_predecessors_child_again_is_a_clash():
    ports, handle = workspace()
    parent = add_job(handle)

    def tree(launch):
        if launch.env["HTTK_WORKFLOW_JOB_ID"] != parent.job_id:
            return None
        step = launch.env["HTTK_WORKFLOW_STEP"]
        final = outcome("advance", next_step="again") if step == "main" else outcome()
        return spawn_tree([("c", CHILD, "kids")], final)

    manager(handle, ports, publisher(ports.fs, tree)).run()
    message = protocol_failure(handle, parent.job_id)
    assert f"job {CHILD} at kids already exists (spawned by job {parent.key}, attempt " in message
    assert len(markers_of(handle, CHILD_ID)) == 1


def test_a_child_id_with_a_marker_at_the_placement_is_a_clash():
    ports, handle = workspace()
    existing = add_job(handle, "kids", job_id=CHILD_ID)  # the same id under another key (no tag)
    parent = add_job(handle)
    run_spawner(handle, ports, parent)
    message = protocol_failure(handle, parent.job_id)
    assert f"job id {CHILD_ID} ({CHILD} at kids) names an existing job" in message
    assert [marker.key for marker in markers_of(handle, CHILD_ID)] == [existing.key]
    assert not ports.fs.exists(f"{ROOT}/kids/{CHILD}")


def test_a_child_id_of_a_job_elsewhere_that_has_run_is_a_clash():
    ports, handle = workspace()
    existing = add_job(handle, "elsewhere", job_id=CHILD_ID)
    manager(handle, ports, publisher(ports.fs, lambda launch: None)).run()
    parent = add_job(handle)
    run_spawner(handle, ports, parent, name="m-b")
    message = protocol_failure(handle, parent.job_id)
    assert f"{handle.layout.job_attempts(CHILD_ID)} exists" in message
    assert [marker.key for marker in markers_of(handle, CHILD_ID)] == [existing.key]
    assert not ports.fs.exists(f"{ROOT}/kids")


def test_one_job_id_spawned_twice_in_one_outcome_creates_neither():
    ports, handle = workspace()
    parent = add_job(handle)
    children = [("a", f"a--{CHILD_ID}", "kids"), ("b", f"b--{CHILD_ID}", "kids")]
    run_spawner(handle, ports, parent, children)
    assert f"job id {CHILD_ID} is spawned twice" in protocol_failure(handle, parent.job_id)
    assert markers_of(handle, CHILD_ID) == []
    assert not ports.fs.exists(f"{ROOT}/kids")


def _sweep(run_once, check, limit=600):
    """Crash at every operation after the first publication until a run completes; ``check`` each end state."""
    failures, point = [], 0
    while point < limit:
        state, crashed = run_once(point)
        try:
            check(*state)
        except AssertionError as error:
            failures.append((point, str(error)[:300]))
        if not crashed:
            break
        point += 1
    assert point > 20, "the sweep never crashed inside the commit"
    assert point < limit, "the sweep never reached a crash-free run"
    return failures


def _of(job_id):
    """Arms the crash at ``job_id``'s first publication (the parent's, not a child's)."""
    return lambda launch: launch.env["HTTK_WORKFLOW_JOB_ID"] == job_id


def test_a_replayed_spawn_is_never_taken_for_a_clash_whatever_the_crash_point():
    children = [("a", f"a--{CHILD_ID}", "kids"), ("b", OTHER, "kids")]

    def run_once(point):
        ports, handle = workspace()
        parent = add_job(handle)

        def tree(launch):
            if launch.env["HTTK_WORKFLOW_JOB_ID"] != parent.job_id:
                return None
            if launch.env["HTTK_WORKFLOW_STEP"] == "after":
                return {"outcome.json": outcome()}
            return spawn_tree(children, outcome("wait", join={"step": "after", "children": []}))

        fresh, crashed = crash_and_recover(ports, handle, publisher(ports.fs, tree), point, _of(parent.job_id))
        return (ports, fresh, parent.job_id), crashed

    def check(ports, handle, parent_id):
        marker, frame = _frame(handle, parent_id)
        assert marker.kind == StateKind.SUCCEEDED, (marker.kind, frame.failure)
        assert frame.step == "after"
        for job_id in (CHILD_ID, OTHER_ID):
            [child] = markers_of(handle, job_id)
            assert child.kind == StateKind.SUCCEEDED
        assert sorted(entry.name for entry in ports.fs.scandir(f"{ROOT}/kids")) == sorted([f"a--{CHILD_ID}", OTHER])
        assert fsck_problems(handle) == []

    assert _sweep(run_once, check) == []


def test_a_clash_arising_mid_commit_leaves_no_payload_of_the_refused_outcome_whatever_the_crash_point():
    """Another job takes child b's id between the plan and b's reservation (the race the exclusive create fences)."""
    children = [("a", CHILD, "kids"), ("b", OTHER, "kids")]

    def run_once(point):
        ports, handle = workspace()
        parent = add_job(handle)
        race_id_reservation(handle, OTHER_ID, lambda: submit(handle, "/src/p", "kids", tag="b", job_id=OTHER_ID))
        tree = spawning({parent.job_id}, children)
        fresh, crashed = crash_and_recover(ports, handle, publisher(ports.fs, tree), point, _of(parent.job_id))
        return (ports, fresh, parent.job_id), crashed

    ends = []

    def check(ports, handle, parent_id):
        marker, _frame_now = _frame(handle, parent_id)
        ends.append(marker.kind)
        if marker.kind == StateKind.SUCCEEDED:
            # The crash undid the competing submission before it was durable: no clash was left to find,
            # and both children were created from this outcome, once each.
            for job_id, key in ((CHILD_ID, CHILD), (OTHER_ID, OTHER)):
                [child] = markers_of(handle, job_id)
                link = codec.decode_object(ports.fs.read_bytes(f"{ROOT}/kids/{key}/.httk-job/parent.json"), "p")
                assert link["job_id"] == parent_id
            return
        message = protocol_failure(handle, parent_id)
        assert OTHER in message, message
        assert markers_of(handle, CHILD_ID) == []
        assert not ports.fs.exists(f"{ROOT}/kids/{CHILD}")
        # Child a's payload is back in the refused outcome, complete.
        ready = f"{_control(handle, parent_id)}/outcome.ready"
        assert ports.fs.exists(f"{ready}/children/jobs/{CHILD}/job.json")
        # The competing job is untouched by the refusal (its own submission may have been cut by the crash).
        others = markers_of(handle, OTHER_ID)
        assert len(others) <= 1
        if others:
            assert posixpath.basename(handle.store.payload_dir(others[0])) == OTHER

    assert _sweep(run_once, check) == []
    assert ends[-1] == StateKind.FAILED  # without a crash the race is always refused
    assert ends.count(StateKind.FAILED) > len(ends) // 2
