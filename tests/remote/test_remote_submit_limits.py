"""``run REMOTE:WS --managers N``: as many managers as the site admits, and why — through the ``local``
remote, and live against the real Slurm of tests/infra.

The local cluster keeps no accounting (no slurmdbd), so ``sacctmgr`` reports no
association or QOS limit there; the live test drives the partition path instead:
a partition made for the test (``scontrol create``, as root) that is DRAIN, then
too short for the time limit, then DOWN, and deleted afterwards. MaxSubmitJobs
itself is covered on recorded and published output (test_slurm_limits_units.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from remote_support import kappa_workspace, local_remote, wait_local_managers


# -- the local remote: the flag, the output, the refusal here ------------------------------------
@pytest.fixture
def here(cli, tmp_path):
    """A ``local`` remote named ``here`` whose httk is this venv's, with an empty workspace ``runs``."""
    return local_remote(cli, tmp_path, "runs")


def test_managers_n_submits_n_and_says_why_all(cli, here, tmp_path):
    out = cli("run", f"{here}:runs", "--managers", "2", "--idle-timeout", "30").stdout.splitlines()
    path = re.escape(str(tmp_path / "runs"))
    ids = [re.fullmatch(rf"submitted local job ([\d.]+) on here: a manager for {path}", line)[1] for line in out[:2]]
    assert out[2:] == ["submitted 2 of 2 managers: no submit limit reported; local reports no submit limits"]
    wait_local_managers(cli, ids)
    report = cli.json("run", f"{here}:runs", "--managers", "1", "--idle-timeout", "30")
    assert (report["requested"], report["submitted"], report["batch"], report["remote"]) == (1, 1, "local", "here")
    assert report["workspace"] == str(tmp_path / "runs") and len(report["job_ids"]) == 1
    assert report["limits"]["notes"] == ["local reports no submit limits"]
    wait_local_managers(cli, report["job_ids"])
    # --managers and --json shape the submission alone: a manager given them would refuse to start.
    for job_id in ids + report["job_ids"]:
        log = (tmp_path / "runs" / ".httk-workflow" / "batch" / f"local-{job_id.split('.')[0]}.out").read_text()
        assert "workers 1" in log and "error:" not in log, log


@pytest.mark.parametrize("flag", [["--managers", "2"], ["--json"]])
def test_a_local_run_refuses_the_remote_only_flags_and_writes_nothing(cli, tmp_path, flag):
    absent = tmp_path / "absent"
    line = cli.refused("run", str(absent), *flag)
    assert line == (f"error: {flag[0]} is for a workspace on a remote (run REMOTE:WS {flag[0]} ...); a local run "
                    "is one manager in the foreground: start more in other shells")
    assert not absent.exists()
    assert not cli.data_home.exists()  # not even the default workspace or the registry


def test_help_shows_the_managers_example(cli):
    text = cli("run", "--help").stdout
    assert "--managers INTEGER" in text and "httk workflow run kappa:runs --workers 8 --managers 50" in text


# -- live: the real Slurm ------------------------------------------------------------------------
def scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def partition(infra) -> Iterator[str]:
    """A partition of its own on the local node (DRAIN at first), deleted afterwards with its jobs."""
    if shutil.which("scontrol") is None:
        pytest.skip("no scontrol on this machine: the Slurm of tests/infra is not installed here")
    name = f"httk-lim-{uuid.uuid4().hex[:6]}"
    made = scontrol("create", f"PartitionName={name}", f"Nodes={infra['CI_SLURM_NODE']}", "State=DRAIN")
    if made.returncode != 0:
        pytest.skip(f"cannot create a Slurm partition here (needs root): {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["scancel", "-p", name], capture_output=True, timeout=30, check=False)
        scontrol("delete", f"PartitionName={name}")


@pytest.fixture
def kappa_ws(cli, infra_httk) -> Iterator[dict[str, Any]]:
    with kappa_workspace(cli, infra_httk, "t", "lim") as ws:
        yield ws


def queued_on(ssh: Any, partition: str) -> list[str]:
    return ssh.run(["squeue", "-h", "-r", "-p", partition, "-o", "%i %T"]).stdout.splitlines()


@pytest.mark.slurm
@pytest.mark.ssh
def test_partition_state_and_time_limit_bound_what_is_submitted(cli, kappa_ws, partition):
    ws, ssh = kappa_ws, kappa_ws["ssh"]
    cli("workspace", "settings", "set", ws["ref"], "slurm.partition", partition)

    # DRAIN: the scheduler accepts no job there, so nothing is submitted (exit 2, one line).
    line = cli.refused("run", ws["ref"], "--managers", "3")
    assert line == (f"error: remote kappa: slurm: submitted 0 of 3 managers: partition {partition} is DRAIN: it "
                    "accepts no new jobs; choose another partition in the workspace's settings, or wait until it is UP")
    assert queued_on(ssh, partition) == []
    assert ssh.run(["ls", "-A", f"{ws['path']}/.httk-workflow/batch"]).stdout.strip() == ""

    # UP but MaxTime 30 min, and the managers ask for an hour: they would pend for ever.
    assert scontrol("update", f"PartitionName={partition}", "State=UP", "MaxTime=30").returncode == 0
    cli("workspace", "settings", "set", ws["ref"], "slurm.time_limit", '"01:00:00"')
    line = cli.refused("run", ws["ref"], "--managers", "2")
    assert line == (f"error: remote kappa: slurm: submitted 0 of 2 managers: the time limit 01:00:00 exceeds "
                    f"partition {partition}'s MaxTime 00:30:00: the jobs would be queued and never start; lower the "
                    "time limit in the workspace's settings")
    assert queued_on(ssh, partition) == []

    # DOWN with a fitting time limit: both are queued (they wait), and the reason says so.
    assert scontrol("update", f"PartitionName={partition}", "State=DOWN").returncode == 0
    cli("workspace", "settings", "set", ws["ref"], "slurm.time_limit", "10")
    report = json.loads(cli("run", ws["ref"], "--managers", "2", "--json").stdout)
    assert report["submitted"] == 2 and len(report["job_ids"]) == 2
    assert report["reason"] == (
        "no submit limit reported; the site keeps no accounting (sacctmgr: no slurmdbd), so no association or QOS "
        f"limits; partition {partition} is DOWN: the managers wait in the queue until it is up")
    limits = report["limits"]
    assert (limits["partition"], limits["partition_state"], limits["max_wall_seconds"]) == (partition, "DOWN", 1800)
    assert (limits["job_wall_seconds"], limits["max_submit"]) == (600, None)
    queued = queued_on(ssh, partition)
    assert sorted(queued) == sorted(f"{job_id} PENDING" for job_id in report["job_ids"])
    assert ssh.run(["scancel", *report["job_ids"]]).returncode == 0
