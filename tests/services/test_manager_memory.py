"""A whole manager in memory: in-memory filesystem, fake clock, fake process control.

No process is started and no time passes for real, so lease arithmetic is exact.
"""

from __future__ import annotations

import pytest
from svc_support import ROOT

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.protocol import JobSpec
from httk.workflow.services.attempts import LaunchSettings
from httk.workflow.services.manager import Manager, ManagerConfig
from httk.workflow.services.submission import submit
from httk.workflow.services.workspaces import WorkspaceService
from httk.workflow.testing import FakeProcessControl, memory_ports

SETTINGS = LaunchSettings(python="/usr/bin/python3", shell_lib="/lib/httk-workflow.sh", base_env={"PATH": "/bin"})


def publish(fs, launch, action="succeed"):
    control = launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
    document = {"format": "httk-workflow-outcome", "format_version": 1, "action": action}
    fs.write_atomic(f"{control}/outcome.tmp.1/outcome.json", codec.encode(document), durable=False)
    fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=False)
    return 0


def workspace(workdir_mode="persistent", jobs=1):
    ports = memory_ports()
    handle = WorkspaceService(ports).init(ROOT)
    fs = ports.fs
    fs.makedirs("/src/p")
    spec = JobSpec(name="j", workflow="w", runner_path="run.sh", workdir_mode=workdir_mode)
    fs.write_atomic("/src/p/job.json", spec.to_bytes(), durable=False)
    fs.write_atomic("/src/p/run.sh", b"#!/bin/sh\n", durable=False)
    markers = [submit(handle, "/src/p", "p").marker for _ in range(jobs)]
    return ports, handle, markers


def manager(handle, proc, name, **config):
    return Manager(handle, proc, SETTINGS, ManagerConfig(**config), manager_id=name, out=lambda line: None)


def kinds(handle):
    return {kind.value: len(list(handle.store.iter_markers(kind))) for kind in StateKind
            if list(handle.store.iter_markers(kind))}


def test_jobs_run_to_success_without_a_process_or_a_clock():
    ports, handle, _ = workspace(jobs=5)
    proc = FakeProcessControl(ports.clock, lambda launch: publish(ports.fs, launch), uid=ports.fs.uid)
    assert manager(handle, proc, "m-a", workers=2).run() == 0
    assert kinds(handle) == {"succeeded": 5}
    assert len(proc.processes) == 5 and all(process.released for process in proc.processes)
    launch = proc.processes[0].launch
    assert launch.argv[0] == "/bin/sh" or launch.argv[-1].endswith("/runner/run.sh")
    assert launch.env["HTTK_WORKFLOW_STEP"] == "main" and launch.env["PATH"] == "/bin"


def start_running(workdir_mode):
    ports, handle, [marker] = workspace(workdir_mode)
    proc = FakeProcessControl(ports.clock, lambda launch: None, uid=ports.fs.uid)
    first = manager(handle, proc, "m-a", lease_seconds=100.0)
    first._publish_manifest()
    first.heartbeat(force=True)
    first.tick()
    assert kinds(handle) == {"running": 1}
    return ports, handle, proc


def last_frame(handle, kind):
    [marker] = list(handle.store.iter_markers(kind))
    return handle.store.read_frame(marker)


def test_persistent_attempt_alive_on_this_host_is_adopted_then_relaunched_when_gone():
    ports, handle, proc = start_running("persistent")
    ports.clock.advance(100.0)
    second = manager(handle, proc, "m-b", lease_seconds=100.0)
    second.tick()  # lease exactly at its limit: still live
    assert kinds(handle) == {"running": 1}
    ports.clock.advance(1.0)
    second.tick()  # expired, but the process provably lives here: left alone
    assert kinds(handle) == {"running": 1} and len(proc.processes) == 1
    proc.processes[0].exit(-9)
    second.tick()
    frame = last_frame(handle, StateKind.RUNNING)  # relaunched as a new attempt
    assert frame.attempt_ordinal == 2 and len(proc.processes) == 2
    log = [handle.store.reader.read(ref) for ref in _refs(handle, frame)]
    takeover = next(entry["takeover"] for entry in log if entry["event"] == "publish")
    assert takeover["rule"] == "process_gone" and takeover["heartbeat_age"] == pytest.approx(101.0)
    assert takeover["by"] == "m-b" and takeover["previous_owner"] == "m-a"


def test_isolated_attempt_on_another_host_waits_out_the_grace_factor():
    ports, handle, proc = start_running("isolated")
    elsewhere = FakeProcessControl(ports.clock, lambda launch: None, host="otherhost", uid=ports.fs.uid)
    second = manager(handle, elsewhere, "m-b", lease_seconds=100.0, takeover_grace_factor=2.0)
    ports.clock.advance(199.0)
    second.tick()
    assert kinds(handle) == {"running": 1}
    ports.clock.advance(1.0)
    second.tick()
    assert "running" in kinds(handle) and len(elsewhere.processes) == 1
    frame = last_frame(handle, StateKind.RUNNING)
    assert frame.attempt_ordinal == 2


def test_persistent_attempt_on_another_host_is_never_taken_over():
    ports, handle, proc = start_running("persistent")
    elsewhere = FakeProcessControl(ports.clock, lambda launch: None, host="otherhost", uid=ports.fs.uid)
    second = manager(handle, elsewhere, "m-b", lease_seconds=100.0)
    ports.clock.advance(10_000.0)
    second.tick()
    assert kinds(handle) == {"running": 1} and elsewhere.processes == []
    unsafe = manager(handle, elsewhere, "m-c", lease_seconds=100.0, unsafe_persistent_takeover=True)
    unsafe.tick()
    assert len(elsewhere.processes) == 1


def _refs(handle, frame):
    """Record references of a job's history, newest first, starting at ``frame``'s predecessor."""
    refs = []
    ref = frame.previous_record_ref
    while ref:
        refs.append(ref)
        ref = handle.store.reader.read(ref).get("previous_record_ref")
    return refs
