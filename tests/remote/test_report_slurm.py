"""``workspace report kappa:WS`` against the real sshd + Slurm of tests/infra: the batch jobs and their states.

The remote's httk builds the document (one ``report --json`` over SSH), Slurm is asked
about the manager jobs whose ``slurm-ID.out`` files the workspace's batch directory
holds, and the page is drawn here.
"""

from __future__ import annotations

import json
import re

import pytest
from remote_support import wait_until
from test_slurm import DEADLINE, remote_workspace, submit_job  # noqa: F401 - remote_workspace is a fixture

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


def test_a_slurm_remote_report_lists_its_manager_jobs(cli, remote_workspace, tmp_path):  # noqa: F811
    ws = remote_workspace
    name = f"kappa:{ws['name']}"
    cli("workspace", "settings", "set", name, "slurm.partition", ws["infra"]["CI_SLURM_PARTITION"])
    cli("workspace", "settings", "set", name, "slurm.time_limit", '"00:10:00"')
    cli("workspace", "settings", "set", name, "slurm.cpus_per_task", "1")
    submit_job(ws, tmp_path)
    submitted = cli("run", name, "--idle-timeout", "60").stdout
    job_id = re.fullmatch(r"submitted slurm job (\d+) on kappa: .*\n", submitted)[1]

    def finished():
        entry = cli.json("manager", "status", name, "--job", job_id)["jobs"][job_id]
        return entry if entry["finished"] else None

    wait_until(finished, DEADLINE, f"slurm job {job_id}")
    out = tmp_path / "report"
    done = cli("workspace", "report", name, "--out", str(out))
    assert done.stdout.startswith(f"report of {ws['name']} to {out}/index.html: 1 jobs (succeeded 1)")
    document = json.loads((out / "report.json").read_text())
    assert document["batch"] == {"remote": "kappa", "batch_system": "slurm", "note": None,
                                 "jobs": [{"job_id": job_id, "state": "COMPLETED", "finished": True}]}
    assert document["workspace"]["path"] == ws["path"] and document["counts"]["succeeded"] == 1
    page = (out / "index.html").read_text()
    assert f"<td>{job_id}</td><td>COMPLETED</td>" in page and "slurm on kappa" in page
    # The remote built the document and wrote nothing there.
    assert ws["ssh"].run(["test", "-e", f"{ws['path']}/.httk-workflow/report"]).returncode == 1
