"""The transports on a missing program, a timeout and tricky words; a composed script through sbatch.

The SSH and Slurm tests use tests/infra/start-slurm-ssh.sh and skip without its env file.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from remote_support import ssh_transport

from httk.workflow.adapters.batch.slurm import SlurmBatchSystem
from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.ports import TransportError

TRICKY = ["a b", "x\ny", "$(touch INJECTED)", "`touch INJECTED`", "it's", '"', "\\", "-n", "~", "*", "\t", "", "ü"]


# -- LocalTransport -----------------------------------------------------------------------------
def test_local_missing_program_is_127_and_not_executable_is_126(tmp_path: Path) -> None:
    transport = LocalTransport()
    result = transport.run(["no-such-program-r3"])
    assert (result.returncode, result.stderr) == (127, "no-such-program-r3: command not found\n")
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")
    assert transport.run([str(plain)]).returncode == 126


def test_local_words_reach_the_program_unchanged(tmp_path: Path) -> None:
    result = LocalTransport(cwd=str(tmp_path)).run(["printf", "[%s]", *TRICKY])
    assert result.stdout == "".join(f"[{word}]" for word in TRICKY)
    assert not (tmp_path / "INJECTED").exists()


def test_local_timeout_is_one_line_and_stops_the_command(tmp_path: Path) -> None:
    mark = tmp_path / "late"
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"^local: sh did not finish within 0.3 s$"):
        LocalTransport().run(["sh", "-c", f"sleep 1; touch '{mark}'"], timeout=0.3)
    assert time.monotonic() - start < 1
    time.sleep(1.2)
    assert not mark.exists()


def test_local_missing_cwd_is_not_reported_as_missing_program(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="working directory .* does not exist"):
        LocalTransport(cwd=str(tmp_path / "absent")).run(["true"])


# -- SshTransport (the ``ssh`` fixture of tests/remote/conftest.py) ----------------------------
@pytest.mark.ssh
def test_ssh_words_with_newlines_and_substitutions_reach_the_program_unchanged(ssh) -> None:  # noqa: ANN001
    workdir = f"/tmp/httk-r3-{uuid.uuid4().hex[:8]}"
    ssh.run(["mkdir", "-p", workdir])
    try:
        result = ssh.run(["sh", "-c", 'cd "$1" && shift && printf "[%s]" "$@"', "sh", workdir, *TRICKY])
        assert result.returncode == 0, result.stderr
        assert result.stdout == "".join(f"[{word}]" for word in TRICKY)
        assert ssh.run(["test", "-e", f"{workdir}/INJECTED"]).returncode == 1
    finally:
        ssh.run(["rm", "-rf", "--", workdir])


@pytest.mark.ssh
def test_ssh_missing_program_is_127_and_connection_survives(ssh) -> None:  # noqa: ANN001
    result = ssh.run(["no-such-program-r3", "x y"])
    assert result.returncode == 127
    assert ssh.run(["echo", "ok"]).stdout == "ok\n"


@pytest.mark.ssh
def test_ssh_timeout_is_one_line_within_the_deadline(ssh) -> None:  # noqa: ANN001
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"^ssh \S+: sleep did not finish within 0.3 s$"):
        ssh.run(["sleep", "3"], timeout=0.3)
    assert time.monotonic() - start < 1.5


@pytest.mark.ssh
def test_ssh_timed_out_command_is_stopped(ssh) -> None:  # noqa: ANN001
    mark = f"/tmp/httk-r3-late-{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(TransportError):
            ssh.run(["sh", "-c", f"sleep 1; touch {mark}"], timeout=0.3)
        time.sleep(1.5)
        assert ssh.run(["test", "-e", mark]).returncode == 1
    finally:
        ssh.run(["rm", "-f", mark])


@pytest.mark.ssh
def test_ssh_auth_failure_names_key_path_but_never_its_contents(infra: dict[str, str], tmp_path: Path) -> None:
    key = tmp_path / "not-a-key"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETMATERIAL\n-----END OPENSSH PRIVATE KEY-----\n")
    transport = ssh_transport(infra, key_filename=str(key))
    with pytest.raises(TransportError) as caught:
        transport.run(["true"])
    assert "SECRETMATERIAL" not in str(caught.value)
    assert "\n" not in str(caught.value)
    assert "SECRETMATERIAL" not in repr(transport)


# -- Slurm: a composed script through the real sbatch ------------------------------------------
@pytest.mark.slurm
@pytest.mark.ssh
def test_composed_script_with_spaces_and_quotes_in_path_runs_under_slurm(ssh, infra: dict[str, str]) -> None:  # noqa: ANN001
    base = f"{infra['CI_WORK_ROOT']}/r3 it's $(x) {uuid.uuid4().hex[:6]}"
    workdir = f"{base}/.httk-workflow/batch"
    batch = SlurmBatchSystem(ssh, timeout=30)
    settings = {"slurm.partition": infra["CI_SLURM_PARTITION"], "slurm.time_limit": 1}
    script = batch.compose_script(base, settings, ["--drain-timeout", "a b"], ["printf", "[%s]"], workers=2)
    try:
        job_id = batch.submit(script, workdir=workdir)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not batch.status([job_id])[job_id].finished:
            time.sleep(0.2)
        status = batch.status([job_id])[job_id]
        assert status.state in ("COMPLETED", "UNKNOWN"), status
        out = ssh.run(["cat", "--", f"{workdir}/slurm-{job_id}.out"])
        assert out.stdout == "".join(f"[{w}]" for w in
                                     ["workflow", "run", base, "--workers", "2", "--drain-timeout", "a b"])
    finally:
        ssh.run(["rm", "-rf", "--", base])
