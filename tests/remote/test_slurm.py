"""``run REMOTE:WS`` through the ssh-slurm template against the real sshd + Slurm of tests/infra.

The remote user is httktest; its workspaces live below ``$CI_WORK_ROOT`` (a directory
it owns), and its httk is the venv the infra script installed from this checkout. The
test process (root) only talks to it through the CLI and the SSH transport, so every
file on the remote side belongs to httktest, as on a real cluster.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from remote_support import kappa_workspace, wait_until, write_payload

from httk.workflow.adapters.batch.slurm import SlurmBatchSystem

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]
DEADLINE = 120.0


@pytest.fixture
def remote_workspace(cli, infra_httk):
    """An initialized workspace on kappa, registered there as ``runs-<hex>``; removed afterwards."""
    with kappa_workspace(cli, infra_httk, "t", "runs") as ws:
        assert ws["initialized"] == f"initialized workspace '{ws['name']}' at {ws['path']}\n"
        yield ws


def submit_job(ws, tmp_path: Path) -> str:
    """Put a payload there over SFTP and submit it with the remote's own httk (as the remote user)."""
    payload = write_payload(tmp_path / "payload")
    ssh, remote_payload = ws["ssh"], f"{ws['base']}/payload"
    assert ssh.run(["mkdir", "-p", remote_payload]).returncode == 0
    for name in ("job.json", "run.py"):
        ssh.put(str(payload / name), f"{remote_payload}/{name}")
    done = ssh.run([ws["infra"]["CI_HTTK_COMMAND"], "workflow", "job", "submit", ws["name"], remote_payload,
                    "--placement", "p"])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_run_submits_a_manager_that_finishes_the_job(cli, remote_workspace, tmp_path):
    ws = remote_workspace
    name = f"kappa:{ws['name']}"
    cli("workspace", "settings", "set", name, "slurm.partition", ws["infra"]["CI_SLURM_PARTITION"])
    cli("workspace", "settings", "set", name, "slurm.time_limit", '"00:10:00"')
    cli("workspace", "settings", "set", name, "slurm.cpus_per_task", "1")
    cli("workspace", "settings", "set", name, "manager.workers", "2")
    key = submit_job(ws, tmp_path)

    started = time.monotonic()
    submitted = cli("run", name, "--idle-timeout", "60").stdout
    match = re.fullmatch(rf"submitted slurm job (\d+) on kappa: a manager for {re.escape(ws['path'])}\n", submitted)
    assert match, submitted
    job_id = match[1]

    seen: set[str] = set()

    def finished():
        entry = cli.json("manager", "status", name, "--job", job_id)["jobs"][job_id]
        seen.add(entry["state"])
        return entry if entry["finished"] else None

    entry = wait_until(finished, DEADLINE, f"slurm job {job_id}")
    elapsed = time.monotonic() - started
    assert entry == {"state": "COMPLETED", "finished": True, "succeeded": True}, (entry, seen)
    assert seen <= {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED"}
    print(f"slurm-submitted manager finished one job {elapsed:.1f} s after 'run'")

    status = cli.json("workspace", "status", name)
    assert status["counts"]["succeeded"] == 1 and status["total"] == 1
    ssh = ws["ssh"]
    job = ssh.run([ws["infra"]["CI_HTTK_COMMAND"], "workflow", "job", "show", ws["name"], key])
    assert '"succeeded"' in job.stdout or "succeeded" in job.stdout
    log = ssh.run(["cat", f"{ws['path']}/.httk-workflow/batch/slurm-{job_id}.out"]).stdout
    assert "workers 2" in log and "1 succeeded" in log
    # The script sbatch read on stdin is kept beside its output, named by the job id.
    script = ssh.run(["cat", f"{ws['path']}/.httk-workflow/batch/slurm-{job_id}.sh"]).stdout
    assert f"#SBATCH --partition={ws['infra']['CI_SLURM_PARTITION']}\n" in script and "workflow run" in script
    # The manager ran as the SSH user, with the directives from the workspace settings.
    shown = ssh.run(["scontrol", "show", "job", job_id]).stdout
    assert f"UserId={ws['infra']['CI_SSH_USER']}(" in shown
    assert "TimeLimit=00:10:00" in shown and f"Partition={ws['infra']['CI_SLURM_PARTITION']}" in shown
    assert "ExitCode=0:0" in shown
    assert "COMPLETED (finished, succeeded)" in cli("manager", "status", name, "--job", job_id).stdout


def test_a_partition_sbatch_refuses_names_the_setting_the_sites_partitions_and_the_fix(cli, remote_workspace):
    ws = remote_workspace
    name = f"kappa:{ws['name']}"
    cli("workspace", "settings", "set", name, "slurm.partition", "nosuchpart")
    refused = cli("run", name, "--idle-timeout", "5", code=2)
    partition = ws["infra"]["CI_SLURM_PARTITION"]
    assert refused.stdout == "" and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: remote kappa: slurm: sbatch failed (exit 1): ")
    assert "slurm.partition names partition nosuchpart, which the scheduler does not list (its partitions: " \
        in refused.stderr and partition in refused.stderr.split("its partitions: ", 1)[1]
    assert refused.stderr.rstrip().endswith(
        f"('httk workflow workspace settings set {name} slurm.partition NAME')"), refused.stderr
    # Nothing was submitted, so no script copy either.
    listing = ws["ssh"].run(["sh", "-c", f"ls -A {ws['path']}/.httk-workflow/batch 2>/dev/null"]).stdout
    assert listing.strip() == ""


def test_squeue_states_of_a_running_and_a_cancelled_manager(cli, remote_workspace):
    ws = remote_workspace
    # --idle: the manager keeps serving the empty workspace until it is cancelled.
    job_id = cli("run", f"kappa:{ws['name']}", "--idle").stdout.split()[3]
    batch = SlurmBatchSystem(ws["ssh"])

    def state_when(predicate):
        status = batch.status([job_id])[job_id]
        return status if predicate(status) else None

    running = wait_until(lambda: state_when(lambda s: s.state == "RUNNING"), DEADLINE, f"slurm job {job_id} running")
    assert not running.finished and running.succeeded is None
    batch.cancel([job_id])
    cancelled = wait_until(lambda: state_when(lambda s: s.finished), DEADLINE, f"slurm job {job_id} ending")
    assert (cancelled.state, cancelled.succeeded) == ("CANCELLED", False)
    # An id squeue has never heard of: squeue exits 1, which is UNKNOWN rather than an error.
    assert batch.status(["999999"])["999999"].state == "UNKNOWN"
