"""A manager's own drain stops an attempt: the job is given back uncharged (in memory, fake processes).

The real-process counterpart is tests/managers/test_ops_drain.py; here the cases a
real kernel cannot stage on demand: a process group that survives SIGKILL, a pause
deferred to the stopped attempt, an outcome published just before the exit.
"""

from __future__ import annotations

from httk.workflow import codec
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.engine.draining import KILL_SETTLE_SECONDS
from httk.workflow.testing import FakeProcessControl, memory_manager, memory_workspace


def publish(fs, control, action="succeed"):
    document = {"format": "httk-workflow-outcome", "format_version": 1, "action": action}
    fs.write_atomic(f"{control}/outcome.tmp.1/outcome.json", codec.encode(document), durable=False)
    fs.rename(f"{control}/outcome.tmp.1", f"{control}/outcome.ready", durable=False)
    return 0


def first_sleeps_then_succeeds(fs):
    """The first launch keeps running (until a signal); every later one succeeds at once."""
    launches = []

    def behaviour(launch):
        launches.append(launch)
        if len(launches) == 1:
            return None
        return publish(fs, launch.env["HTTK_WORKFLOW_CONTROL_DIR"])

    return behaviour


class SurvivingGroup(FakeProcessControl):
    """The runner's leader dies of the signal, but a member of its group never goes away."""

    def group_alive(self, pgid: int) -> bool:
        return True


def running_job(workdir_mode="persistent", proc_class=FakeProcessControl):
    ports, handle, _ = memory_workspace(workdir_mode=workdir_mode, maximum_attempts_per_activation=1,
                                        maximum_total_attempts=1)
    fs = ports.fs
    proc = proc_class(ports.clock, first_sleeps_then_succeeds(fs), uid=fs.uid)
    first = memory_manager(handle, process=proc, manager_id="m-a", lease_seconds=100.0)
    first.publish_manifest()
    first.heartbeat(force=True)
    first.tick()
    assert kinds(handle) == {"running": 1}
    return ports, handle, proc, first


def kinds(handle):
    return {kind.value: len(found) for kind in StateKind if (found := list(handle.store.iter_markers(kind)))}


def current(handle, kind):
    [marker] = list(handle.store.iter_markers(kind))
    return marker, handle.store.read_frame(marker)


def control_dirs(ports, handle, marker):
    return sorted(entry.name for entry in ports.fs.scandir(handle.layout.job_attempts(marker.job_id)))


def test_a_drained_attempt_is_released_uncharged_and_runs_again_in_a_fresh_control_dir():
    for mode in ("persistent", "isolated"):
        ports, handle, proc, first = running_job(mode)
        first.request_drain(15)
        assert proc.signals == [(proc.processes[0].identity.pgid, "15")]
        first.tick()
        assert kinds(handle) == {"ready": 1}, mode
        marker, frame = current(handle, StateKind.READY)
        assert frame.event == Event.DRAIN_RELEASE
        # Given back: the one-attempt budget is whole again; the workdir was left mid-way.
        assert (frame.attempt_ordinal, frame.total_attempts, frame.unclean_exits) == (0, 0, 1)
        assert frame.owner is None and frame.process is None and frame.failure is None
        assert "drained: manager m-a" in frame.reason and "signal 15" in frame.reason
        assert "not charged" in frame.reason

        second = memory_manager(handle, process=proc, manager_id="m-b", lease_seconds=100.0)
        assert second.run() == 0
        assert kinds(handle) == {"succeeded": 1}, mode
        marker, frame = current(handle, StateKind.SUCCEEDED)
        assert (frame.attempt_ordinal, frame.total_attempts) == (1, 1)
        # Each attempt has its own control directory, in the order they ran (isolated: its own workdir).
        names = control_dirs(ports, handle, marker)
        assert [name[:5] for name in names] == ["0001-", "0002-"]
        assert names[1].endswith(frame.attempt_id)
        second_launch = proc.processes[1].launch
        assert second_launch.env["HTTK_WORKFLOW_CONTROL_DIR"].endswith(names[1])
        if mode == "isolated":
            assert second_launch.cwd.endswith(f"{names[1]}/workdir")


def test_a_group_that_cannot_be_verified_gone_is_left_to_lease_recovery():
    ports, handle, proc, first = running_job(proc_class=SurvivingGroup)
    started = ports.clock.monotonic()
    first.request_drain(15)
    first.tick()
    # Not given back: a second writer could join the survivor. The job stays as the drain found it.
    assert kinds(handle) == {"running": 1}
    _marker, frame = current(handle, StateKind.RUNNING)
    assert frame.event == Event.LAUNCH and frame.owner.manager_id == "m-a" and frame.total_attempts == 1
    assert ports.clock.monotonic() - started >= KILL_SETTLE_SECONDS
    assert (proc.processes[0].identity.pgid, "9") in proc.signals
    assert first.running == {}


def test_an_outcome_published_before_the_drained_exit_is_committed():
    ports, handle, proc, first = running_job()
    control = proc.processes[0].launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
    first.request_drain(15)
    publish(ports.fs, control)  # the runner's TERM handler published on its way out
    first.tick()
    assert kinds(handle) == {"succeeded": 1}
    _marker, frame = current(handle, StateKind.SUCCEEDED)
    assert frame.event == Event.COMMIT_SUCCEED and frame.total_attempts == 1


def test_a_failure_published_during_the_drain_is_charged_as_today():
    ports, handle, proc, first = running_job()
    control = proc.processes[0].launch.env["HTTK_WORKFLOW_CONTROL_DIR"]
    first.request_drain(15)
    publish(ports.fs, control, action="retry")
    first.tick()
    # The runner's own answer stands: a retry under a one-attempt budget fails the job.
    assert kinds(handle) == {"failed": 1}
    _marker, frame = current(handle, StateKind.FAILED)
    assert frame.failure.code == "attempts_exhausted"


def test_a_pause_deferred_to_the_drained_attempt_takes_effect():
    ports, handle, proc, first = running_job()
    marker, frame = current(handle, StateKind.RUNNING)
    # An operator's pause arrived while the attempt ran (renaming its marker under the manager).
    handle.store.transition(marker, frame, Event.DEFER_PAUSE, pause_requested=True)
    first.request_drain(2)
    first.tick()
    assert kinds(handle) == {"paused": 1}
    _marker, frame = current(handle, StateKind.PAUSED)
    assert frame.event == Event.DRAIN_PAUSE and frame.pause_requested is False
    assert frame.total_attempts == 0 and "signal 2" in frame.reason


def test_an_attempt_that_ended_on_its_own_before_the_signal_is_not_drained():
    ports, handle, proc, first = running_job()
    proc.processes[0].exit(1)  # it failed by itself; the drain signal finds its group gone
    first.request_drain(15)
    first.tick()
    assert kinds(handle) == {"failed": 1}
    _marker, frame = current(handle, StateKind.FAILED)
    assert frame.failure.code == "runner_exit" and frame.total_attempts == 1
