"""``run REMOTE:WS`` when a manager of the workspace is already queued or running: one note, and still submitted.

Through the ``local`` remote: its batch job ids are pids, and the workspace's batch
directory names them (``local-PID.out``), so a live process stands in for a manager
submitted before.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from remote_support import local_remote, wait_local_managers, wait_until


@pytest.fixture
def here(cli, tmp_path):
    """A ``local`` remote named ``here`` whose httk is this venv's, with an empty workspace ``runs``."""
    return local_remote(cli, tmp_path, "runs")


def test_a_second_run_names_the_queued_manager_and_how_to_cancel_it_and_submits_anyway(cli, here, tmp_path):
    quiet = cli("run", f"{here}:runs", "--idle-timeout", "1")
    assert quiet.stderr == ""  # nothing recorded yet: nothing to say
    first = re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", quiet.stdout)[1]
    wait_local_managers(cli, [first])  # an exited manager is not named
    again = cli("run", f"{here}:runs", "--idle-timeout", "1")
    assert again.stderr == ""
    wait_local_managers(cli, [re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", again.stdout)[1]])
    stand_in = subprocess.Popen(["sleep", "60"])  # a manager submitted before, still running
    try:
        (tmp_path / "runs" / ".httk-workflow" / "batch" / f"local-{stand_in.pid}.out").write_text("")
        result = cli("run", f"{here}:runs", "--idle-timeout", "1")
        assert result.stderr == (
            f"note: {here}:runs is already served by local job {stand_in.pid} (RUNNING); submitting another all the "
            f"same (many managers may serve one workspace); to cancel: 'kill -TERM {stand_in.pid}' on here\n")
        second = re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", result.stdout)[1]
        report = json.loads(cli("run", f"{here}:runs", "--idle-timeout", "1", "--json").stdout)
        assert report["submitted"] == 1
        named = {entry["id"]: entry for entry in report["already_serving"]}
        assert named[str(stand_in.pid)] == {"source": "batch", "id": str(stand_in.pid), "state": "RUNNING",
                                            "cancel": f"kill -TERM {stand_in.pid}", "where": "here"}
    finally:
        stand_in.kill()
        stand_in.wait()
    for job_id in (second, *report["job_ids"]):
        wait_local_managers(cli, [job_id])


def test_a_live_local_manager_is_named_once_and_its_kill_drains_it(cli, here, tmp_path):
    serving = cli("run", f"{here}:runs", "--idle")  # serves until signalled
    job_id = re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", serving.stdout)[1]
    pid = job_id.split(".")[0]

    def registered():
        live = [m for m in cli.json("workspace", "managers", f"{here}:runs") if m["live"]]
        return live or None

    try:
        [manager] = wait_until(registered, 120, "the manager registering")
        assert str(manager["pid"]) == pid  # the job id is the manager's pid: one manager, named once
        report = json.loads(cli("run", f"{here}:runs", "--idle-timeout", "1", "--json").stdout)
        # The batch directory names it by its job id, PID.START (local-PID.START.sh); the registry by its
        # manager id: named once.
        named = [entry for entry in report["already_serving"] if entry["id"] in (job_id, manager["manager_id"])]
        assert named == [{"source": "batch", "id": job_id, "state": "RUNNING", "cancel": f"kill -TERM {pid}",
                          "where": "here"}]
    finally:
        subprocess.run(["kill", "-TERM", pid], check=False)
    wait_local_managers(cli, [job_id, *report["job_ids"]])
