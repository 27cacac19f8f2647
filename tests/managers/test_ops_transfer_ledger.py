"""The transfer ledger and bundle on the in-memory filesystem: a crash at every mutating operation.

Two workspaces share one :class:`InMemoryFilesystem`; a transfer between them is
crashed (power loss: only what was fsynced survives) at every primitive it
performs, then the same transfer is run again with ``--resume``'s semantics.
Afterwards every job is in exactly one workspace, in the kind it had, never in
none and never in both, and the transfer's ledger is final.
"""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, JoinRecord
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations import inspection
from httk.workflow.operations.fsck import Fsck
from httk.workflow.operations.gc import GarbageCollector
from httk.workflow.operations.submission import submit
from httk.workflow.operations.transfer import SourceSide, TransferError
from httk.workflow.operations.transfer_flow import LocalEndpoint, Transfer, Unreachable
from httk.workflow.operations.transfer_import import DestinationSide
from httk.workflow.protocol import JobSpec
from httk.workflow.store.policy import PolicyError
from httk.workflow.store.runners import publish_runner
from httk.workflow.store.transfer_ledger import Ledger, LedgerError
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import SimulatedCrash, memory_ports

A, B = "/ws/a", "/ws/b"
WORKFLOW = {"format": "httk-workflow-workflow", "format_version": 1, "name": "demo",
            "settings": {"demo.command": {"required": True}, "demo.extra": {}}}


def endpoint(handle, label):
    return LocalEndpoint(SourceSide(handle, label), DestinationSide(handle, label), handle.fs, label)


def world(durable=True):
    """Two workspaces; in ``a`` a paused job with a workspace runner and a cancelled job with data and a link."""
    ports = memory_ports()
    fs = ports.fs
    service = WorkspaceService(ports)
    a, b = service.init(A, durable=durable), service.init(B, durable=durable)
    fs.write_atomic("/src/flow/run.sh", b"#!/bin/sh\n", durable=True)
    fs.write_atomic("/src/flow/workflow.json", codec.encode(WORKFLOW), durable=True)
    reference = publish_runner(fs, a.layout, "/src/flow", "flows/demo")
    jobs = {}
    spec = JobSpec(name="one", workflow="demo", runner_path=reference["path"], runner_source="workspace",
                   runner_sha256=reference["sha256"], tag="one", inputs={"x": 1})
    fs.write_atomic("/src/p1/job.json", spec.to_bytes(), durable=True)
    jobs["one"] = submit(a, "/src/p1", "p/1").marker
    spec = JobSpec(name="two", workflow="w", runner_path="run.sh", tag="two", data_mode="transactional")
    fs.write_atomic("/src/p2/job.json", spec.to_bytes(), durable=True)
    fs.write_atomic("/src/p2/run.sh", b"#!/bin/sh\n", durable=True)
    jobs["two"] = submit(a, "/src/p2", "p/2").marker
    store = a.store
    marker = jobs["one"]
    marker, frame = store.transition(marker, store.read_job(marker).frame, Event.REGISTER)
    jobs["one"], _ = store.transition(marker, frame, Event.OPERATOR_PAUSE, reason="look")
    marker = jobs["two"]
    marker, frame = store.transition(marker, store.read_job(marker).frame, Event.REGISTER)
    jobs["two"], _ = store.transition(marker, frame, Event.OPERATOR_CANCEL)
    two = marker.job_id
    fs.write_atomic(f"{a.layout.data_dir(two)}/current/result.txt", b"42\n", durable=True)
    fs.write_atomic(f"{a.layout.persistent_workdir(two)}/out.txt", b"output\n", durable=True)
    fs.symlink("out.txt", f"{a.layout.persistent_workdir(two)}/latest")
    fs.write_atomic(f"{a.layout.attempt_dir(two, 1, 'x')}/stderr.log", b"oops\n", durable=True)
    fs.sync_tree("/")
    return ports, a, b, {name: marker.job_id for name, marker in jobs.items()}


def reopen(ports):
    service = WorkspaceService(ports)
    return service.open(A), service.open(B)


def where(a, b, job_id):
    """Every marker of ``job_id`` in either workspace, as (workspace, kind)."""
    found = []
    for label, handle in (("a", a), ("b", b)):
        for kind in StateKind:
            found += [(label, kind.value) for marker in handle.store.iter_markers(kind) if marker.job_id == job_id]
    return found


def run(a, b, **options):
    return Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(**options)


def test_a_transfer_moves_every_tree_the_history_and_the_runner():
    ports, a, b, jobs = world()
    report = run(a, b, jobs=["one", "two"])
    [outcome] = report["transfers"]
    assert outcome["state"] == "retired" and sorted(outcome["jobs"]) == sorted(
        str(inspection.resolve_job(b, name).key) for name in ("one", "two"))
    assert where(a, b, jobs["one"]) == [("b", "paused")]
    assert where(a, b, jobs["two"]) == [("b", "cancelled")]
    fs = ports.fs
    two = jobs["two"]
    assert fs.read_bytes(f"{b.layout.data_dir(two)}/current/result.txt") == b"42\n"
    assert fs.readlink(f"{b.layout.persistent_workdir(two)}/latest") == "out.txt"
    assert fs.read_bytes(f"{b.layout.attempt_dir(two, 1, 'x')}/stderr.log") == b"oops\n"
    for tree in (a.layout.data_dir(two), a.layout.persistent_workdir(two), a.layout.job_attempts(two)):
        assert fs.lstat(tree) is None
    # The runner was installed at the destination, name and object, with the pinned digest.
    spec = b.store.read_spec(inspection.resolve_job(b, "one"))
    assert fs.exists(f"{b.layout.runners}/objects/{spec.runner_sha256}/demo/workflow.json")
    assert codec.decode_object(fs.read_bytes(f"{b.layout.runners}/names/flows/demo.json"), "x")["sha256"] == \
        spec.runner_sha256
    # `job log` at the destination shows the whole life: submit, register, pause, detach, import.
    log = inspection.job_log(b, inspection.resolve_job(b, "one"))
    assert [entry["event"] for entry in log] == ["submit", "register", "operator_pause", "transfer_detach",
                                                 "transfer_import"]
    assert [entry["generation"] for entry in log] == [0, 1, 2, 3, 4]
    assert log[-1]["kind"] == "paused" and log[-2]["kind"] == "transferring"
    assert log[2]["notes"]["imported"]["workspace_id"] == a.workspace_id
    # The environment check resolved the job's declared settings at the destination.
    statuses = {entry["setting"]: entry["status"] for entry in report["environment"]}
    assert statuses == {"demo.command": "warning", "demo.extra": "unset"}
    # The source keeps an intact acknowledged bundle and the retired markers in its ledger.
    [(transfer_id, role)] = [(entry.name, "source") for entry in fs.scandir(f"{a.layout.control}/transfers")]
    ledger = Ledger(fs, a.layout, transfer_id, role, durable=True, clock=ports.clock)
    assert [step["step"] for step in ledger.steps()] == ["planned", "detached", "bundled", "sent", "acknowledged",
                                                         "retired"]
    assert fs.exists(f"{ledger.bundle_dir}/manifest.json")
    assert len(list(fs.scandir(f"{ledger.directory}/retired"))) == 2


def test_the_default_selection_is_every_stopped_job():
    ports, a, b, jobs = world()
    report = run(a, b)
    assert where(a, b, jobs["one"]) == [("b", "paused")] and where(a, b, jobs["two"]) == [("b", "cancelled")]
    assert report["transfers"][0]["state"] == "retired"
    # Nothing left to move: a second run is a no-op.
    assert run(a, b)["transfers"] == []


def test_a_job_that_never_runs_again_is_not_environment_checked():
    """Bringing a succeeded or cancelled job home warns about nothing, even under --strict-environment."""
    ports, a, b, jobs = world()
    store = a.store
    marker = inspection.resolve_job(a, "one")
    store.transition(marker, store.read_job(marker).frame, Event.OPERATOR_CANCEL)
    warned = []
    report = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids, warn=warned.append).run(
        jobs=["one"], strict=True)
    assert report["transfers"][0]["state"] == "retired" and where(a, b, jobs["one"]) == [("b", "cancelled")]
    assert report["environment"] == [] and warned == []


def test_ledger_steps_are_ordered_and_fenced():
    ports = memory_ports()
    handle = WorkspaceService(ports).init(A)
    ledger = Ledger(ports.fs, handle.layout, "t-0123456789ab", "source", durable=True, clock=ports.clock)
    ledger.create({})
    with pytest.raises(LedgerError, match="detached before planned"):
        ledger.record("detached")
    ledger.record("planned")
    # Slot 4 holds sent or rolled_back, whichever came first.
    assert ledger.record("rolled_back", {"reason": "r"}, slot=4)["step"] == "rolled_back"
    assert ledger.record("sent", slot=4)["step"] == "rolled_back"
    assert ledger.state()["step"] == "rolled_back" and not ledger.state()["final"]
    assert ledger.record("rolled_back", slot=6)["step"] == "rolled_back"
    assert ledger.state()["final"]


def test_a_clash_at_the_destination_is_refused_before_anything_moves():
    ports, a, b, jobs = world()
    ports.fs.makedirs(f"{B}/p/2/{inspection.resolve_job(a, 'two').key}")
    before = snapshot(ports.fs)
    with pytest.raises(TransferError, match=r"already exists \(a name clash with job two--.*nothing moved"):
        run(a, b, jobs=["two"])
    assert snapshot(ports.fs) == before


def test_a_refusal_at_import_rolls_the_transfer_back():
    """The destination learns of the clash only when it imports: the source takes its job back."""
    ports, a, b, jobs = world()
    key = inspection.resolve_job(a, "two").key
    original = DestinationSide.job_problems
    calls = []

    def late_clash(self, batch, bundle=None):
        calls.append(len(batch))
        if len([count for count in calls if count]) > 1:  # the probe passed; the clash appears before the import
            ports.fs.makedirs(f"{B}/p/2/{key}")
        return original(self, batch, bundle)

    DestinationSide.job_problems = late_clash
    try:
        report = run(a, b, jobs=["two"])
    finally:
        DestinationSide.job_problems = original
    [outcome] = report["transfers"]
    assert outcome["state"] == "rolled_back" and "name clash" in outcome["reason"]
    assert where(a, b, jobs["two"]) == [("a", "cancelled")]
    log = inspection.job_log(a, inspection.resolve_job(a, "two"))
    assert [entry["event"] for entry in log][-2:] == ["transfer_detach", "transfer_rollback"]
    assert not ports.fs.exists(f"{B}/.httk-workflow/state/cancelled/p/2")


def snapshot(fs, root="/ws"):
    out = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        for entry in fs.scandir(directory):
            if entry.is_dir and not entry.is_symlink:
                out[entry.path] = "dir"
                pending.append(entry.path)
            elif entry.is_symlink:
                out[entry.path] = "-> " + fs.readlink(entry.path)
            else:
                out[entry.path] = fs.read_bytes(entry.path)
    return out


@pytest.mark.parametrize("durable", [True])
def test_a_crash_at_every_operation_leaves_each_job_in_exactly_one_workspace(durable):
    points = 0
    outcomes = set()
    while True:
        ports, a, b, jobs = world(durable)
        ports.fs.arm_crash(points)
        try:
            run(a, b, jobs=["one", "two"])
        except SimulatedCrash:
            ports.fs.crash()
            a, b = reopen(ports)
            # Whatever the crash left, every job is somewhere (detached jobs count at the source).
            for job_id in jobs.values():
                assert where(a, b, job_id), (points, job_id)
            report = run(a, b, resume_only=True)
            for outcome in report["transfers"]:
                assert outcome["state"] in ("retired", "rolled_back"), (points, outcome)
            for name, kind in (("one", "paused"), ("two", "cancelled")):
                found = where(a, b, jobs[name])
                assert len(found) == 1 and found[0][1] == kind, (points, name, found)
                outcomes.add(found[0][0])
            assert SourceSide(a, "a").pending() == [], points  # nothing left unfinished
            # Neither side calls anything damaged: the job that left, and the history it took, are accounted for.
            for handle in (a, b):
                problems = Fsck(handle).run()["problems"]
                assert problems == [], (points, problems)
            points += 1
            continue
        break
    assert points > 60, points  # the loop really crashed inside every step
    assert outcomes == {"a", "b"}  # a crash before the plan leaves the jobs home; every later one completes


def test_gc_collects_settled_ledgers_under_transfer_days_and_keeps_unfinished_ones():
    ports, a, b, jobs = world()
    run(a, b, jobs=["one"])  # retired at a, acknowledged at b
    # A second transfer stopped right after its plan (as if killed): unfinished, so its ledger is kept.
    source = SourceSide(a, "a")
    selection = source.select(jobs=["two"])
    source.plan("t-00000000beef", selection["jobs"], {"label": "b", "workspace_id": b.workspace_id})
    for handle in (a, b):
        handle.set_policy("retention.transfer_days", 1)
    assert [item["category"] for item in GarbageCollector(a).run()["removed"]] == []  # not old enough yet
    ports.clock.advance(2 * 86400)
    removed = {item["path"] for item in GarbageCollector(a).run()["removed"] if item["category"] == "transfer"}
    kept = {entry.path for entry in ports.fs.scandir(f"{A}/.httk-workflow/transfers")}
    assert len(removed) == 1 and not removed & kept
    assert kept == {f"{A}/.httk-workflow/transfers/t-00000000beef"}
    assert [item["category"] for item in GarbageCollector(b).run()["removed"]] == ["transfer"]
    # The job that left is still not "missing" once its ledgers are gone; the one that stays is untouched.
    assert Fsck(a).run()["problems"] == [] and Fsck(b).run()["problems"] == []
    assert where(a, b, jobs["one"]) == [("b", "paused")] and where(a, b, jobs["two"]) == [("a", "cancelled")]


def test_transfer_days_is_a_validated_policy_key():
    ports = memory_ports()
    handle = WorkspaceService(ports).init(A)
    assert handle.set_policy("retention.transfer_days", 7)["retention"] == {"transfer_days": 7}
    with pytest.raises(PolicyError, match="retention.transfer_days: expected a number of days >= 0"):
        handle.set_policy("retention.transfer_days", -1)


def test_a_waiting_parent_travels_with_its_children_and_their_notes_follow():
    ports, a, b, _jobs = world()
    fs, store = ports.fs, a.store
    specs = {}
    for name in ("parent", "child"):
        spec = JobSpec(name=name, workflow="w", runner_path="run.sh", tag=name)
        fs.write_atomic(f"/src/{name}/job.json", spec.to_bytes(), durable=True)
        fs.write_atomic(f"/src/{name}/run.sh", b"#!/bin/sh\n", durable=True)
        specs[name] = submit(a, f"/src/{name}", f"fam/{name}").marker
    child = specs["child"]
    child, frame = store.transition(child, store.read_job(child).frame, Event.REGISTER)
    child, _ = store.transition(child, frame, Event.OPERATOR_CANCEL)
    marker = specs["parent"]
    join = JoinRecord(step="after", when="all_finished",
                      children=(ChildRef("c", child.job_id, str(child.key), child.placement),))
    for event in (Event.REGISTER, Event.CLAIM, Event.LAUNCH, Event.PUBLISH):
        marker, frame = store.transition(marker, store.read_job(marker).frame, event)
    store.transition(marker, frame, Event.COMMIT_WAIT, join=join)
    note = {"kind": "cancelled", "failure": None, "job_id": child.job_id, "job_key": str(child.key),
            "placement": child.placement, "label": "c", "workdir": a.layout.persistent_workdir(child.job_id),
            "data": None}
    fs.write_atomic(f"{a.layout.control}/joins/{marker.job_id}/{child.job_id}.json", codec.encode(note),
                    durable=True)
    # Alone, the waiting parent is refused: its children would stay behind.
    with pytest.raises(TransferError, match=r"is waiting on its children child--.*add --job for each"):
        run(a, b, jobs=["parent"])
    run(a, b, jobs=["parent", "child"])
    assert where(a, b, marker.job_id) == [("b", "waiting")] and where(a, b, child.job_id) == [("b", "cancelled")]
    moved = codec.decode_object(fs.read_bytes(f"{b.layout.control}/joins/{marker.job_id}/{child.job_id}.json"), "n")
    assert moved["workdir"] == b.layout.persistent_workdir(child.job_id)


class Flaky(LocalEndpoint):
    """A local destination that is lost when ``op`` is called (as a dropped connection is)."""

    def __init__(self, inner, op):
        super().__init__(inner.sides["source"], inner.sides["destination"], inner.fs, inner.label)
        self.op = op

    def call(self, role, op, request):
        if op == self.op:
            raise Unreachable(role, "remote b: connection lost")
        return super().call(role, op, request)


def test_a_destination_lost_before_the_bundle_was_sent_rolls_back_and_after_it_holds():
    ports, a, b, jobs = world()
    lost = Transfer(endpoint(a, "a"), Flaky(endpoint(b, "b"), "receive"), a.ports.ids).run(jobs=["one"])
    [outcome] = lost["transfers"]
    assert outcome["state"] == "rolled_back" and "connection lost" in outcome["reason"]
    assert "nothing moved" in outcome["reason"] and where(a, b, jobs["one"]) == [("a", "paused")]
    # Lost while importing: the destination may have decided, so the transfer is held, never rolled back.
    held = Transfer(endpoint(a, "a"), Flaky(endpoint(b, "b"), "import"), a.ports.ids).run(jobs=["one"])
    [outcome] = held["transfers"]
    assert outcome["state"] == "held" and "is held at step sent" in outcome["reason"]
    assert where(a, b, jobs["one"]) == [("a", "transferring")]
    # The next run with the destination back finishes it.
    [outcome] = run(a, b, resume_only=True)["transfers"]
    assert outcome["state"] == "retired" and outcome["resumed"]
    assert where(a, b, jobs["one"]) == [("b", "paused")]
