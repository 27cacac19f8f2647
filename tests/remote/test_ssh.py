"""SshTransport and ``remote check`` against the real sshd of tests/infra (127.0.0.1, key-only user httktest)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from remote_support import configure_kappa, ssh_transport

from httk.workflow.ports import TransportError

pytestmark = pytest.mark.ssh


def test_run_quotes_every_word_and_passes_stdin_and_exit_status(ssh, infra):
    tricky = ["a b", "it's", '"q"', "$HOME", "`id`", "; rm -rf ~", "*", "", "ü"]
    result = ssh.run(["sh", "-c", 'for a do printf "[%s]" "$a"; done; cat; id -un >&2; exit 7', "sh", *tricky],
                     input="from stdin\n")
    assert result.returncode == 7
    assert result.stdout == "".join(f"[{word}]" for word in tricky) + "from stdin\n"
    assert result.stderr == f"{infra['CI_SSH_USER']}\n"
    assert ssh.run(["cat"]).stdout == ""  # stdin is closed, not inherited
    big = "x" * 300_000
    assert ssh.run(["wc", "-c"], input=big).stdout.strip() == str(len(big))
    assert ssh.run(["no-such-program-here"]).returncode == 127


def test_the_connection_is_reused_and_survives_a_timeout(ssh):
    ssh.run(["true"])
    opened = ssh.opened
    with pytest.raises(TransportError, match="sleep did not finish within 0.3 s"):
        ssh.run(["sleep", "5"], timeout=0.3)
    assert ssh.run(["echo", "again"]).stdout == "again\n"
    assert ssh.opened == opened == 1


def test_put_and_get_over_sftp(ssh, tmp_path, infra):
    remote = f"{infra['CI_WORK_ROOT']}/put-{uuid.uuid4().hex}.txt"
    source = tmp_path / "source.txt"
    source.write_text("over sftp\n")
    try:
        ssh.put(str(source), remote)
        assert ssh.run(["cat", remote]).stdout == "over sftp\n"
        ssh.get(remote, str(tmp_path / "back.txt"))
        assert (tmp_path / "back.txt").read_text() == "over sftp\n"
    finally:
        ssh.run(["rm", "-f", remote])
    with pytest.raises(TransportError, match="cannot get"):
        ssh.get(remote, str(tmp_path / "absent.txt"))


#: In a process of its own (a hang must not hang pytest): Ctrl-C during an SFTP copy, then a command.
INTERRUPTED_COPY = """
import _thread, os, sys, threading
sys.path.insert(0, sys.argv[1])
from remote_support import load_infra, ssh_transport
infra = load_infra(fresh_httk=False)
ssh = ssh_transport(infra)
ssh.run(["true"])
big = os.path.join(sys.argv[2], "big.bin")
with open(big, "wb") as out:
    out.write(os.urandom(128 * 1024 * 1024))
for copy in (lambda: ssh.put(big, sys.argv[3]), lambda: ssh.get(sys.argv[3], big + ".back")):
    threading.Timer(0.3, _thread.interrupt_main).start()
    try:
        copy()
        print("copied before the interrupt")
    except KeyboardInterrupt:
        print("interrupted")
    if not os.path.exists(big + ".back"):
        ssh.run(["dd", "if=/dev/zero", "of=" + sys.argv[3], "bs=1M", "count=128"])
print(ssh.run(["echo", "again"]).stdout.strip())
ssh.close()
"""


def test_an_interrupted_copy_ends_at_once_and_the_transport_reconnects(infra, tmp_path):
    """Ctrl-C inside paramiko's pipelined SFTP writes used to leave it waiting for ever for a reply."""
    remote = f"{infra['CI_WORK_ROOT']}/interrupted-{uuid.uuid4().hex}.bin"
    support = str(Path(__file__).parent)
    try:
        done = subprocess.run([sys.executable, "-c", INTERRUPTED_COPY, support, str(tmp_path), remote],
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        cleanup = ssh_transport(infra)
        cleanup.run(["rm", "-f", remote])
        cleanup.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted", "interrupted", "again"], done.stdout


def test_connection_failures_are_one_line_saying_what_to_fix(infra, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(TransportError, match=r"host key unknown \(not in .*known_hosts\); connect once"):
        ssh_transport(infra, known_hosts=str(empty)).run(["true"])
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with pytest.raises(TransportError, match=r"authentication failed for httktest with key .*stranger_key .*check"):
        ssh_transport(infra, key_filename=str(stranger)).run(["true"])
    with pytest.raises(TransportError, match=r"cannot connect to port 1 \(Connection refused\)"):
        ssh_transport(infra, port=1).run(["true"])
    with pytest.raises(TransportError, match=r"cannot read the key .*no-key \(No such file or directory\); check"):
        ssh_transport(infra, key_filename=str(tmp_path / "no-key")).run(["true"])


def test_remote_check_over_ssh(cli, infra_httk):
    infra = infra_httk
    configure_kappa(cli, infra)
    report = cli.json("remote", "check", "kappa")
    assert report["ok"] is True, report
    assert report["report"]["batch"]["commands"]["sbatch"]
    assert report["report"]["workspace_root"]["path"] == infra["CI_WORK_ROOT"]
    cli("remote", "configure", "kappa", "--set", "httk_command=httk-not-installed", "--set", "workspace_root=/")
    failed = cli("remote", "check", "kappa", code=1)
    assert failed.stderr == "remote kappa: failed checks: httk, workspace_root\n"
    cli("remote", "configure", "kappa", "--set", "port=1")
    unreachable = cli("remote", "check", "kappa", code=1)
    assert "FAILED   connect         ssh httktest@127.0.0.1:1: cannot connect" in unreachable.stdout


def test_init_over_ssh_puts_a_relative_path_below_workspace_root(cli, infra_httk):
    infra = infra_httk
    configure_kappa(cli, infra)  # workspace_root = CI_WORK_ROOT
    name = f"walk-{uuid.uuid4().hex[:12]}"
    home = ssh_transport(infra)
    try:
        made = cli.json("workspace", "init", f"kappa:{name}")
        assert made["path"] == f"{infra['CI_WORK_ROOT']}/{name}"
        on_disk = home.run(["sh", "-c", 'test -f "$1/.httk-workflow/format.json" && echo root; '
                                        'test -e "$HOME/$2" && echo login', "sh", made["path"], name])
        assert on_disk.stdout == "root\n"
    finally:
        home.run([infra["CI_HTTK_COMMAND"], "workflow", "workspace", "forget", name])
        home.run(["rm", "-rf", "--", f"{infra['CI_WORK_ROOT']}/{name}"])
        home.close()
