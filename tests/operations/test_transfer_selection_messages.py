"""What ``transfer`` says when its selection is empty, a side is lost, or it repeats: in memory, no processes.

Two workspaces share one :class:`InMemoryFilesystem`; the summary line is the CLI's
(:func:`httk.workflow.cli.transfer_cmds.summary`) over the flow's report. A lost side
is an endpoint whose call raises :class:`Unreachable`, as a dropped connection does.
"""

from __future__ import annotations

import re

import pytest

from httk.workflow.cli.transfer_cmds import summary
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations.submission import submit
from httk.workflow.operations.transfer import SourceSide, TransferError
from httk.workflow.operations.transfer_flow import LocalEndpoint, Transfer, Unreachable
from httk.workflow.operations.transfer_import import DestinationSide
from httk.workflow.protocol import JobSpec
from httk.workflow.store.workspaces import WorkspaceService
from httk.workflow.testing import memory_ports


def endpoint(handle, label: str) -> LocalEndpoint:
    return LocalEndpoint(SourceSide(handle, label), DestinationSide(handle, label), handle.fs, label)


class Lost(LocalEndpoint):
    """An endpoint lost at ``op``: before it is served, or (``after``) once it was served and the answer is lost."""

    def __init__(self, inner: LocalEndpoint, op: str, *, after: bool = False) -> None:
        super().__init__(inner.sides["source"], inner.sides["destination"], inner.fs, inner.label)
        self.op, self.after = op, after

    def call(self, role, op, request):
        if op != self.op:
            return super().call(role, op, request)
        if self.after:
            super().call(role, op, request)
        raise Unreachable(role, f"remote {self.label}: connection lost")


@pytest.fixture
def pair():
    """Workspaces ``a`` (two cancelled jobs, si1 and si2, below ``camp/``) and an empty ``b``."""
    ports = memory_ports()
    service = WorkspaceService(ports)
    a, b = service.init("/ws/a", durable=False), service.init("/ws/b", durable=False)
    for tag in ("si1", "si2"):
        spec = JobSpec(name=tag, workflow="w", runner_path="run.sh", tag=tag)
        ports.fs.write_atomic(f"/src/{tag}/job.json", spec.to_bytes(), durable=False)
        ports.fs.write_atomic(f"/src/{tag}/run.sh", b"#!/bin/sh\n", durable=False)
        marker = submit(a, f"/src/{tag}", f"camp/{tag}").marker
        marker, frame = a.store.transition(marker, a.store.read_job(marker).frame, Event.REGISTER)
        a.store.transition(marker, frame, Event.OPERATOR_CANCEL)
    return a, b


def kinds(handle) -> dict[str, str]:
    return {str(marker.key.tag): kind.value for kind in StateKind for marker in handle.store.iter_markers(kind)}


def ledgers(handle) -> list[str]:
    directory = f"{handle.layout.control}/transfers"
    return sorted(entry.name for entry in handle.fs.scandir(directory)) if handle.fs.exists(directory) else []


def test_a_placement_no_job_is_below_says_so_and_names_the_nearest(pair):
    a, b = pair
    report = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(placement="cmap")
    assert report["transfers"] == [] and report["placement"] == {"placement": "cmap", "nearest": "camp"}
    assert summary(report) == ("nothing to transfer from a to b: no job is at or below placement 'cmap' in a "
                               "(did you mean 'camp'?)")
    far = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(placement="zzz/q")
    assert summary(far) == "nothing to transfer from a to b: no job is at or below placement 'zzz/q' in a"
    # A placement that has jobs, none of them selected, is not that: the plain line.
    busy = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(placement="camp", kinds=["paused"])
    assert busy["placement"] is None and summary(busy) == "nothing to transfer from a to b"
    assert kinds(a) == {"si1": "cancelled", "si2": "cancelled"} and ledgers(a) == []


def test_an_unreachable_destination_is_one_warning_and_refuses_only_what_must_reach_it(pair):
    """Spec 000: an unreachable destination gets one immediate warning and is only a strict-mode failure of
    the environment check; a job to move there is refused, nothing selected is nothing to do."""
    a, b = pair
    for options, refusal in (({"placement": "cmap"}, None), ({"resume_only": True}, None),
                             ({"jobs": ["si1"]}, "remote b: connection lost"),
                             ({"strict": True}, "--strict-environment needs its settings: nothing moved")):
        warnings: list[str] = []
        flow = Transfer(endpoint(a, "a"), Lost(endpoint(b, "b"), "probe"), a.ports.ids, warn=warnings.append)
        if refusal is None:
            assert flow.run(**options)["transfers"] == [], options
        else:
            with pytest.raises(TransferError, match=re.escape(refusal)):
                flow.run(**options)
        assert warnings[:1] == ["b is unreachable (remote b: connection lost): its environment was not checked"]
    assert kinds(a) == {"si1": "cancelled", "si2": "cancelled"} and ledgers(a) == [] and kinds(b) == {}


def test_repeating_a_transfer_for_one_of_its_jobs_counts_that_job(pair):
    a, b = pair
    first = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(jobs=["si1", "si2"])
    [moved] = first["transfers"]
    again = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(jobs=["si1"])
    assert summary(again) == f"1 job already transferred from a to b by {moved['transfer_id']}; nothing to do"
    both = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(jobs=["si1", "si2"])
    assert summary(both) == f"2 jobs already transferred from a to b by {moved['transfer_id']}; nothing to do"


def test_a_source_lost_at_the_plan_says_the_plan_may_be_recorded_and_how_it_finishes(pair):
    a, b = pair
    flow = Transfer(Lost(endpoint(a, "a"), "plan", after=True), endpoint(b, "b"), a.ports.ids)
    with pytest.raises(TransferError) as refused:
        flow.run(jobs=["si1"])
    [transfer_id] = ledgers(a)
    assert str(refused.value) == (f"remote a: connection lost; no job moved, but transfer {transfer_id} (1 job) "
                                  "may be recorded at a as planned: 'httk workflow transfer a b --resume' (or the "
                                  "next transfer between them) finishes it and moves them")
    assert kinds(a) == {"si1": "cancelled", "si2": "cancelled"} and kinds(b) == {}
    # What the message promises: the resume finishes that transfer, and the job moves.
    [outcome] = Transfer(endpoint(a, "a"), endpoint(b, "b"), a.ports.ids).run(resume_only=True)["transfers"]
    assert outcome["transfer_id"] == transfer_id and outcome["state"] == "retired"
    assert kinds(a) == {"si2": "cancelled"} and kinds(b) == {"si1": "cancelled"}
