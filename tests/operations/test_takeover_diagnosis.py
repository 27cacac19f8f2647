"""``job why`` and the manager decide an owned job from one observation and one verdict (issue 9).

Each case leaves a job behind a dead manager, asks ``job why`` (with the live
manager of this host published, as ``workspace managers`` shows it), then lets
that manager tick: whatever ``job why`` said it would do — recover by a named
rule, wait, or leave it blocked — is exactly what it does. The old diagnosis
built its own observation and ignored the grace factor, the unsafe flags and a
published outcome; each of those is a case here.
"""

from __future__ import annotations

from typing import Any

import pytest

from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations import diagnosis, inspection
from httk.workflow.testing import memory_manager, memory_workspace, outcome_document, scripted_runner, write_tree
from memory_support import kinds

LEASE = 10.0
HERE, THERE = "node-here", "node-there"


def _left_behind(workdir_mode: str, host: str, *, published: bool = False):
    """A running job whose manager (on ``host``) died with its attempt still alive there."""
    ports, handle, [marker] = memory_workspace(workdir_mode=workdir_mode)
    # The runner never exits by itself.
    owner = memory_manager(handle, lambda launch: None, manager_id="m-dead", host=host, lease_seconds=LEASE)
    owner.publish_manifest()
    owner.heartbeat(force=True)
    for _ in range(5):
        owner.tick()
    [running] = list(handle.store.iter_markers(StateKind.RUNNING))
    if published:
        control = handle.store.read_frame(running).process.control
        write_tree(ports.fs, f"{control}/outcome.ready", {"outcome.json": outcome_document()})
    return ports, handle, owner.proc, running


def _takeover_rules(handle, marker) -> list[str]:
    current = inspection.resolve_job(handle, marker.job_id)
    return [entry["takeover"]["rule"] for entry in inspection.job_log(handle, current)
            if entry.get("event") in ("publish", "lease_recovery") and (entry.get("takeover") or {}).get("by")]


CASES: list[tuple[str, dict[str, Any], float, dict[str, Any], str]] = [
    # id, how the job was left, seconds of silence, the live manager's options, what both must say
    # The runner still runs after publishing: its group is stopped first, then the outcome committed.
    ("published-outcome", {"workdir_mode": "persistent", "host": HERE, "published": True}, 30.0, {},
     "recovers it (outcome_published_stop)"),
    ("unsafe-persistent", {"workdir_mode": "persistent", "host": THERE}, 30.0,
     {"unsafe_persistent_takeover": True}, "recovers it (unsafe_persistent_takeover)"),
    ("persistent-elsewhere", {"workdir_mode": "persistent", "host": THERE}, 30.0, {}, "blocked"),
    ("grace-factor", {"workdir_mode": "isolated", "host": THERE}, 30.0, {"takeover_grace_factor": 5.0},
     "recovers it in 20s (heartbeat_silent)"),
    ("default-grace", {"workdir_mode": "isolated", "host": THERE}, 30.0, {}, "recovers it (heartbeat_silent)"),
    ("unsafe-isolated", {"workdir_mode": "isolated", "host": THERE}, 15.0, {"unsafe_isolated_takeover": True},
     "recovers it (unsafe_isolated_takeover)"),
    ("adopted-here", {"workdir_mode": "persistent", "host": HERE}, 30.0, {}, "adopts the live attempt"),
]


@pytest.mark.parametrize(("left", "silence", "options", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_job_why_says_what_the_manager_then_does(left: dict[str, Any], silence: float, options: dict[str, Any],
                                                 said: str) -> None:
    ports, handle, dead_proc, marker = _left_behind(**left)
    ports.clock.advance(silence)
    # The manager of this host: the same fake host as the runner's when the attempt ran here.
    if left["host"] == HERE:
        dead_proc.behaviour = scripted_runner(ports.fs)
        here = memory_manager(handle, process=dead_proc, manager_id="m-here", lease_seconds=LEASE, **options)
    else:
        here = memory_manager(handle, manager_id="m-here", host=HERE, lease_seconds=LEASE, **options)
    proc = here.proc
    here.publish_manifest()
    here.heartbeat(force=True)

    report = diagnosis.why(handle, marker, proc)
    assert said in report["summary"], report
    assert any(line.startswith("manager m-here on this host: ") for line in report["lines"]), report

    here.tick()
    if left.get("published"):
        here.tick()  # the first tick stopped the group; the next one sees it gone and commits
    rules = _takeover_rules(handle, marker)
    if "recovers it (" in said:
        assert rules == [said.split("(")[1].rstrip(")")]
    else:
        assert rules == [] and kinds(handle) == {"running": 1}


def test_job_why_without_a_live_manager_here_speaks_for_one_started_with_the_defaults() -> None:
    _ports, handle, proc, marker = _left_behind("isolated", HERE)
    report = diagnosis.why(handle, marker, proc)
    # The owner's lease is still live by the clock; a manager started here would wait for it.
    assert report["summary"] == "running under the live lease of manager m-dead"
    [line] = [line for line in report["lines"] if line.startswith("a manager started on this host")]
    assert "a takeover (process_alive) is admitted in 10.0 s" in line
