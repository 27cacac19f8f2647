"""Two managers running one commit at once change nothing a single one would not (issue 10, the kill soak).

A lease is evidence, not a fence: with ``--lease-seconds 1`` a live owner's
heartbeat can look expired mid-commit, and the manager recovering the job then
runs the same commit while the owner finishes it. The soak saw the loser's
``ENOENT`` (a file the winner had just moved) become ``protocol_error`` or
``transaction_error``, and a join note whose rename lost fail a parent whose
children all succeeded. Here every race is staged deterministically in memory:
:class:`race_support.Turnstile` interleaves two appliers one filesystem call at
a time, over every pair of switch points.
"""

from __future__ import annotations

import itertools
import posixpath

import pytest
from commit_support import ROOT, SETTINGS, add_job, markers_of, outcome, spawn_tree, workspace
from race_support import REST, Turnstile, actor_ports

from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, JoinRecord, Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.domain.model import Failure
from httk.workflow.engine.children import plan_children
from httk.workflow.engine.manager import Manager, ManagerConfig
from httk.workflow.engine.outcome_reader import read_outcome
from httk.workflow.store.store import LostRace
from httk.workflow.store.transactions import apply_transaction
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import FakeProcessControl

# -- the transaction apply ----------------------------------------------------------------------------

OPERATIONS = [
    {"id": "op-0001", "op": "put", "destination": "counter", "source": "files/op-0001"},  # replaces "0"
    {"id": "op-0002", "op": "put", "destination": "tree", "source": "files/op-0002"},  # a new name
    {"id": "op-0003", "op": "remove", "destination": "scratch"},
    {"id": "op-0004", "op": "remove", "destination": "tree"},  # what op-0002 put
    {"id": "op-0005", "op": "put", "destination": "counter", "source": "files/op-0005"},  # over op-0001's
]
STAGED = {"files/op-0001": b"1", "files/op-0002/inner": b"tree", "files/op-0005": b"2"}
#: Sequentially applied: the data, and the trash holding exactly what each operation replaced.
EXPECTED_DATA = {"counter": b"2"}
EXPECTED_TRASH = {"op-0001": b"0", "op-0003": b"scratch", "op-0004/inner": b"tree", "op-0005": b"1"}


def _files(fs, root: str, prefix: str = "") -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for entry in fs.scandir(root):
        name = f"{prefix}{entry.name}"
        out.update(_files(fs, entry.path, f"{name}/") if entry.is_dir else {name: fs.read_bytes(entry.path)})
    return out


def _transaction_bench():
    ports, handle = workspace(data_mode="transactional")
    job = add_job(handle)
    fs = ports.fs
    control = handle.layout.attempt_dir(job.job_id, 1, "a1")
    for relative, data in STAGED.items():
        fs.write_atomic(f"{control}/outcome.ready/transaction/{relative}", data, durable=True)
    data_dir = handle.layout.data_dir(job.job_id)
    fs.write_atomic(f"{data_dir}/current/counter", b"0", durable=True)
    fs.write_atomic(f"{data_dir}/current/scratch", b"scratch", durable=True)
    return ports, handle, job, control


def _apply(ports, handle, job, control, actor: str):
    actor_port, step = actor_ports(ports, actor)
    return step, lambda: apply_transaction(step, handle.layout, job.job_id, control, OPERATIONS, durable=True,
                                           applier=f"m-{actor}.g3")


def _one_applier_calls() -> int:
    ports, handle, job, control = _transaction_bench()
    step, call = _apply(ports, handle, job, control, "a")
    turnstile = Turnstile([("a", REST)])
    step.turnstile = turnstile
    turnstile.run({"a": call})
    return turnstile.calls["a"]


def test_two_appliers_of_one_transaction_interleaved_anywhere_apply_it_once():
    calls = _one_applier_calls()
    broken = []
    # "a" makes n calls, "b" m, then "a" runs to its end, then "b": every point where one overtakes the other.
    for first, second in itertools.product(range(0, calls + 1, 1), range(0, calls + 1, 2)):
        ports, handle, job, control = _transaction_bench()
        step_a, call_a = _apply(ports, handle, job, control, "a")
        step_b, call_b = _apply(ports, handle, job, control, "b")
        turnstile = Turnstile([("a", first), ("b", second), ("a", REST), ("b", REST)])
        step_a.turnstile = step_b.turnstile = turnstile
        results = turnstile.run({"a": call_a, "b": call_b})
        data_dir = handle.layout.data_dir(job.job_id)
        got = (
            {name: value for name, value in results.items() if isinstance(value, BaseException)},
            _files(ports.fs, f"{data_dir}/current"),
            _files(ports.fs, f"{data_dir}/trash/{control.rpartition('/')[2]}"),
        )
        if got != ({}, EXPECTED_DATA, EXPECTED_TRASH):
            broken.append(((first, second), got))
    assert broken == [], f"{len(broken)} interleavings broke the transaction, e.g. {broken[:2]}"


# -- children ------------------------------------------------------------------------------------------

KIDS = [(f"k{index}", f"c--cccccccc-0000-4000-8000-00000000000{index}", "kids") for index in range(3)]


def _children_bench():
    ports, handle = workspace()
    parent = add_job(handle)
    control = handle.layout.attempt_dir(parent.job_id, 1, "a1")
    for relative, content in spawn_tree(KIDS, outcome("wait", join={"step": "gathered"})).items():
        data = content if isinstance(content, bytes) else codec.encode(content)
        ports.fs.write_atomic(f"{control}/outcome.ready/{relative}", data, durable=True)
    return ports, handle, parent, control


def _spawner(ports, parent, control, actor: str):
    actor_port, step = actor_ports(ports, actor)
    handle = WorkspaceService(actor_port).open(ROOT)

    def commit_children():
        found = read_outcome(step, control, 0)
        return len(plan_children(handle.store, control, found, parent, attempt_id="a1").create())

    return step, commit_children


def _registrar(ports, actor: str = "r"):
    """A third manager registering whatever ``submitted`` child marker it finds (which frees the g0 name)."""
    actor_port, step = actor_ports(ports, actor)
    store = WorkspaceService(actor_port).open(ROOT).store

    def register():
        for marker in list(store.iter_markers(StateKind.SUBMITTED)):
            if marker.placement == "kids":
                view = store.read_job(marker)
                try:
                    store.transition(marker, view.frame, Event.REGISTER, step="main", activation_id="r",
                                     activation_ordinal=1)
                except LostRace:
                    pass

    return step, register


def _children_calls() -> int:
    ports, handle, parent, control = _children_bench()
    step, call = _spawner(ports, parent, control, "a")
    step.turnstile = turnstile = Turnstile([("a", REST)])
    assert turnstile.run({"a": call}) == {"a": 3}
    return turnstile.calls["a"]


def test_two_appliers_creating_one_outcomes_children_interleaved_anywhere_create_each_once():
    calls = _children_calls()
    broken = []
    # Between "a"'s first n calls and "b"'s first m a third manager registers what it finds, so a
    # marker published by one applier may have left the generation-0 name before the other looks.
    for first, second in itertools.product(range(0, calls + 1, 2), range(0, calls + 1, 9)):
        ports, handle, parent, control = _children_bench()
        step_a, call_a = _spawner(ports, parent, control, "a")
        step_b, call_b = _spawner(ports, parent, control, "b")
        step_r, call_r = _registrar(ports)
        turnstile = Turnstile([("a", first), ("b", second), ("r", REST), ("a", REST), ("b", REST)])
        step_a.turnstile = step_b.turnstile = step_r.turnstile = turnstile
        results = turnstile.run({"a": call_a, "b": call_b, "r": call_r})
        errors = {name: value for name, value in results.items() if isinstance(value, BaseException)}
        made = sorted(len(markers_of(handle, key.rpartition("--")[2])) for _label, key, _at in KIDS)
        placed = [ports.fs.exists(f"{handle.layout.payload(at, key)}/.httk-job/parent.json") for _l, key, at in KIDS]
        left = [entry.name for entry in ports.fs.scandir(f"{control}/outcome.ready/children/jobs")]
        if errors or made != [1, 1, 1] or not all(placed) or left or results.get("a", 0) + results.get("b", 0) != 3:
            broken.append(((first, second), errors, made, placed, left, results))
    assert broken == [], f"{len(broken)} interleavings broke the spawn, e.g. {broken[:2]}"


# -- a live owner overtaken mid-commit -------------------------------------------------------------------

PARENT_ID = "pppppppp-0000-4000-8000-000000000001"
PUTS = 6


def _manifest(count: int) -> dict:
    operations = [{"id": f"op-{index:04d}", "op": "put", "destination": f"out/{index}",
                   "source": f"files/op-{index:04d}"} for index in range(1, count + 1)]
    return {"format": "httk-workflow-transaction", "format_version": 1, "operations": operations}


def _tree(count: int = PUTS) -> dict:
    return {"outcome.json": outcome(), "transaction/manifest.json": _manifest(count),
            **{f"transaction/files/op-{index:04d}": f"{index}".encode() for index in range(1, count + 1)}}


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


def _two_managers():
    """A spawned child job (it has a parent record, so its terminal transitions write join notes) and two
    managers with 1 s leases: the owner ``m-a`` reaches the filesystem through a hookable :class:`StepFs`."""
    ports, handle = workspace(data_mode="transactional")
    job = add_job(handle)
    fs = ports.fs
    link = {"job_id": PARENT_ID, "job_key": f"p--{PARENT_ID}", "placement": "p", "label": "k0", "attempt_id": "x"}
    fs.write_atomic(f"{handle.store.payload_dir(job)}/.httk-job/parent.json", codec.encode(link), durable=True)
    owner_ports, owner_fs = actor_ports(ports, "a")
    publish = _publisher(fs)
    managers = []
    for name, manager_ports in (("m-a", owner_ports), ("m-b", ports)):
        proc = FakeProcessControl(ports.clock, publish, uid=fs.uid)
        managers.append(Manager(WorkspaceService(manager_ports).open(ROOT), proc, SETTINGS,
                                ManagerConfig(lease_seconds=1.0), manager_id=name, out=lambda line: None))
    return ports, handle, job, owner_fs, managers


def _publisher(fs):
    def behaviour(launch) -> int:
        control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
        for relative, content in _tree().items():
            data = content if isinstance(content, bytes) else codec.encode(content)
            fs.write_atomic(f"{control}/outcome.tmp.1/{relative}", data, durable=False)
        fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=True)
        return 0

    return behaviour


def _committing(handle):
    [marker] = list(handle.store.iter_markers(StateKind.COMMITTING))
    return marker


def _journal_size(handle, manager) -> int:
    directory = f"{handle.layout.journal}/{manager.store.writer.writer_id}"
    return sum(handle.fs.lstat(entry.path).size for entry in handle.fs.scandir(directory))


def _chain(handle, job_id):
    [marker] = markers_of(handle, job_id)
    frames, ref = [], marker.ref
    while ref and ref != "init":
        frames.append(handle.store.reader.read(ref))
        ref = frames[-1].get("previous_record_ref")
    return marker, frames


def _overtaken(fault: OSError | None):
    """Run the owner; at its first private copy, the other manager takes the commit over and finishes it
    (then, with ``fault``, the owner's copy fails). What the owner does next is the test."""
    ports, handle, job, owner_fs, (owner, recoverer) = _two_managers()
    seen = {}

    def hook(name, args):
        if name == "copy_tree" and "op-0001" in posixpath.basename(args[1]) and not seen:
            seen["journal"] = _journal_size(handle, owner)
            ports.clock.advance(5.0)  # the owner looks expired (it is not)
            assert recoverer.recovery.consider(_committing(handle))
            seen["note"] = ports.fs.read_bytes(f"{handle.layout.control}/joins/{PARENT_ID}/{job.job_id}.json")
            if fault is not None:
                raise fault

    owner_fs.hook = hook
    assert owner.run() == 0
    assert seen, "the takeover never happened"
    return ports, handle, job, owner, seen


@pytest.mark.parametrize("fault", [None, OSError(5, "Input/output error")], ids=["clean", "apply_error"])
def test_an_owner_overtaken_mid_commit_leaves_the_commit_to_the_manager_that_fenced_it(fault, caplog):
    caplog.set_level("INFO", logger="httk.workflow.manager")
    ports, handle, job, owner, seen = _overtaken(fault)
    marker, frames = _chain(handle, job.job_id)
    assert marker.kind == StateKind.SUCCEEDED
    assert [frame["kind"] for frame in frames if frame["kind"] in ("succeeded", "failed")] == ["succeeded"]
    assert not any(frame.get("failure") for frame in frames)
    data = handle.layout.data_dir(job.job_id)
    assert _files(ports.fs, f"{data}/current/out") == {str(index): str(index).encode() for index in range(1, 7)}
    assert not ports.fs.exists(f"{data}/trash")  # nothing was replaced, so nothing was trashed
    # The owner stopped at its next step: no frame of its own after the takeover, no note over the winner's.
    assert _journal_size(handle, owner) == seen["journal"]
    note = codec.decode_object(ports.fs.read_bytes(f"{handle.layout.control}/joins/{PARENT_ID}/{job.job_id}.json"),
                               "note")
    assert (note["kind"], note["marker"]) == ("succeeded", marker.relative_path())
    assert "job %s: another manager took the commit over; leaving it to that one" in [
        record.msg for record in caplog.records]


def test_a_long_commit_keeps_its_owner_alive_for_the_other_managers():
    ports, handle, job, owner_fs, (owner, recoverer) = _two_managers()
    verdicts = []

    def hook(name, args):
        if name == "copy_tree" and "op-" in posixpath.basename(args[1]):
            ports.clock.advance(0.3)  # each copy takes 0.3 s: the commit outlasts the 1 s lease
            verdicts.append(recoverer.recovery.judge(handle.store.read_job(_committing(handle))).rule)

    owner_fs.hook = hook
    assert owner.run() == 0
    assert verdicts == ["lease_live"] * PUTS
    assert _chain(handle, job.job_id)[0].kind == StateKind.SUCCEEDED


# -- join notes ------------------------------------------------------------------------------------------


def _to_committing(handle, marker, attempt: str = "a1"):
    """Drive a submitted or ready job to ``committing`` with raw store transitions (no runner)."""
    frame = handle.store.read_job(marker).frame
    owner = Owner(manager_id="m-gone", host="fakehost", lease_seconds=1.0, claimed_at=0.0)
    steps = ((Event.REGISTER, {"step": "main", "activation_id": "v1", "activation_ordinal": 1}),
             (Event.CLAIM, {"owner": owner, "attempt_id": attempt, "attempt_ordinal": 1, "total_attempts": 1}),
             (Event.LAUNCH, {}), (Event.PUBLISH, {}))
    for event, changes in steps[marker.kind == StateKind.READY:]:
        marker, frame = handle.store.transition(marker, frame, event, **changes)
    return marker, frame


def _child_of(handle, parent, label: str, job_id: str):
    child = add_job(handle, "kids", job_id=job_id)
    link = {"job_id": parent.job_id, "job_key": str(parent.key), "placement": parent.placement, "label": label,
            "attempt_id": "a1"}
    handle.fs.write_atomic(f"{handle.store.payload_dir(child)}/.httk-job/parent.json", codec.encode(link),
                           durable=True)
    return child


def _note(handle, parent_id, child_id):
    path = f"{handle.layout.control}/joins/{parent_id}/{child_id}.json"
    return codec.decode_object(handle.fs.read_bytes(path), path) if handle.fs.exists(path) else None


FAILURE = Failure("runner_error", "boom")


def _finishing_managers(ports):
    out = []
    for actor in ("a", "b"):
        actor_port, step = actor_ports(ports, actor)
        manager = Manager(WorkspaceService(actor_port).open(ROOT), FakeProcessControl(ports.clock, lambda launch: 0),
                          SETTINGS, ManagerConfig(lease_seconds=1.0), manager_id=f"m-{actor}", out=lambda line: None)
        out.append((manager, step))
    return out


@pytest.mark.parametrize("other", [Event.COMMIT_SUCCEED, Event.COMMIT_RETRY])
def test_two_managers_finishing_one_child_leave_the_note_of_the_rename_that_won(other):
    def bench():
        ports, handle = workspace()
        parent = add_job(handle)
        child = _child_of(handle, parent, "k0", "cccccccc-0000-4000-8000-000000000009")
        return ports, handle, parent, *_to_committing(handle, child)

    def finishing(manager, marker, frame, event):
        changes = {"failure": FAILURE if event == Event.COMMIT_FAIL else None, "owner": None}
        return lambda: manager.ctx.finish(marker, frame, event, changes)

    ports, handle, parent, marker, frame = bench()
    [(probe, probe_fs), _] = _finishing_managers(ports)
    probe_fs.turnstile = counter = Turnstile([("a", REST)])
    counter.run({"a": finishing(probe, marker, frame, Event.COMMIT_FAIL)})
    calls, broken = counter.calls["a"], []
    for first, second in itertools.product(range(calls + 1), range(calls + 1)):
        ports, handle, parent, marker, frame = bench()
        (failing, fs_a), (other_manager, fs_b) = _finishing_managers(ports)
        turnstile = Turnstile([("a", first), ("b", second), ("a", REST), ("b", REST)])
        fs_a.turnstile = fs_b.turnstile = turnstile
        results = turnstile.run({"a": finishing(failing, marker, frame, Event.COMMIT_FAIL),
                                 "b": finishing(other_manager, marker, frame, other)})
        [winner] = [value[0] for value in results.values() if value is not None]
        note = _note(handle, parent.job_id, marker.job_id)
        expected = (winner.kind.value, winner.relative_path()) if winner.kind.value in ("failed", "succeeded") else None
        if (note and (note["kind"], note.get("marker"))) != expected:
            broken.append(((first, second), winner.kind.value, note))
    assert broken == [], f"{len(broken)} interleavings left a note that is not the winner's, e.g. {broken[:2]}"


class _Killed(Exception):
    """The manager died here (its process, not the filesystem: what it wrote stays)."""


def test_a_note_whose_rename_never_came_does_not_fail_the_parent():
    """A manager killed between a child's note and its rename: the next owner retries the child instead."""
    ports, handle = workspace()
    parent = add_job(handle)
    kids = [_child_of(handle, parent, f"k{index}", f"cccccccc-0000-4000-8000-00000000000{index}")
            for index in range(3)]
    join = JoinRecord(step="gathered", children=tuple(
        ChildRef(label=f"k{index}", job_id=kid.job_id, job_key=str(kid.key), placement="kids")
        for index, kid in enumerate(kids)))
    waiting, waiting_frame = _to_committing(handle, parent, "pa")
    waiting, waiting_frame = handle.store.transition(waiting, waiting_frame, Event.COMMIT_WAIT, owner=None,
                                                     join=join)
    (dying, dying_fs), (survivor, _fs) = _finishing_managers(ports)
    for kid in kids[:2]:
        survivor.ctx.finish(*_to_committing(handle, kid), Event.COMMIT_SUCCEED, {"owner": None})
    last, last_frame = _to_committing(handle, kids[2])

    def die_at_the_rename(name, args):
        if name == "rename" and args[0] == handle.store.marker_path(last):
            raise _Killed

    dying_fs.hook = die_at_the_rename
    with pytest.raises(_Killed):
        dying.ctx.finish(last, last_frame, Event.COMMIT_FAIL, {"failure": FAILURE, "owner": None})
    assert _note(handle, parent.job_id, last.job_id)["kind"] == "failed"  # written, its rename never came
    # The next owner takes the child over (a new generation of committing) and retries it.
    takeover = {"owner": survivor.ctx.owner_record()}
    last, last_frame = survivor.ctx.finish(last, last_frame, Event.LEASE_RECOVERY, takeover)
    survivor.ctx.finish(last, last_frame, Event.COMMIT_RETRY, {"owner": None})
    assert not survivor.waiting.evaluate(waiting)  # still waiting on k2, which is ready again
    assert [marker.kind for marker in markers_of(handle, parent.job_id)] == [StateKind.WAITING]
    assert _note(handle, parent.job_id, last.job_id) is None  # the stale note is gone
    # k2 then succeeds: the join is satisfied and the parent moves on.
    [ready] = markers_of(handle, last.job_id)
    survivor.ctx.finish(*_to_committing(handle, ready, "a2"), Event.COMMIT_SUCCEED, {"owner": None})
    assert survivor.waiting.evaluate(waiting)
    assert [marker.kind for marker in markers_of(handle, parent.job_id)] == [StateKind.READY]
