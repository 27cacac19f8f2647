"""Forwarded job commands against the real sshd + Slurm of tests/infra (user httktest on 127.0.0.1).

Each command must log in once: the container's ssh transports are counted through
their public ``opened`` attribute. The remote side's httk is the infra venv, installed
from this checkout (a StaleInstallWarning says when it is not).
"""

from __future__ import annotations

import json
import time

import pytest
from dependency_injector import providers
from remote_support import kappa_workspace, ssh_transport, wait_until, write_payload

from httk.workflow.adapters.plugins import TRANSPORTS, EntryPointCatalog
from httk.workflow.adapters.transport_ssh import SshTransport

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]
DEADLINE = 120.0


@pytest.fixture
def logins(cli):
    """The SSH transports the CLI makes, for counting connections per command."""
    made: list[SshTransport] = []

    class Counted(SshTransport):
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            made.append(self)

    cli.container.plugins.override(providers.Object(EntryPointCatalog(given={TRANSPORTS: {"ssh": Counted}})))
    yield made
    cli.container.plugins.reset_override()


def one_login(made: list[SshTransport]) -> None:
    """The command just run opened exactly one SSH connection; start counting afresh."""
    assert [each.opened for each in made] == [1]
    made.clear()


@pytest.fixture
def kappa_ws(cli, infra_httk, logins):
    """A workspace on kappa, registered there as ``runs-<hex>``; removed afterwards."""
    with kappa_workspace(cli, infra_httk, "f", "runs") as ws:
        logins.clear()
        yield ws


def test_submit_list_run_and_collect_each_over_one_connection(cli, kappa_ws, logins, tmp_path, monkeypatch):
    ws = kappa_ws
    name = f"kappa:{ws['name']}"
    for setting, value in (("slurm.partition", ws["infra"]["CI_SLURM_PARTITION"]),
                           ("slurm.time_limit", '"00:10:00"'), ("slurm.cpus_per_task", "1")):
        cli("workspace", "settings", "set", name, setting, value)
    logins.clear()
    write_payload(tmp_path / "payload")
    (tmp_path / "payload" / "extra").mkdir()
    (tmp_path / "payload" / "extra" / "notes.txt").write_text("sent over sftp\n")
    monkeypatch.chdir(tmp_path)

    submitted = json.loads(cli("job", "submit", name, "payload", "--placement", "p", "--json").stdout)
    one_login(logins)
    key = submitted["job_key"]
    assert submitted["payload"].startswith(ws["path"] + "/p/")
    copied = ws["ssh"].run(["cat", f"{submitted['payload']}/extra/notes.txt"])
    assert copied.stdout == "sent over sftp\n"
    left = ws["ssh"].run(["sh", "-c", 'ls -A "$1"', "sh", f"{ws['path']}/.httk-workflow/tmp"])
    assert "httk-upload." not in left.stdout

    listed = json.loads(cli("job", "list", name, "--json").stdout)
    one_login(logins)
    assert [(job["job_key"], job["kind"]) for job in listed] == [(key, "submitted")]

    cli("run", name, "--idle-timeout", "60")
    one_login(logins)

    def succeeded():
        kind = json.loads(cli("job", "show", name, key, "--json").stdout)["kind"]
        one_login(logins)
        return kind if kind in ("succeeded", "failed") else None

    assert wait_until(succeeded, DEADLINE, f"job {key} on kappa finishing") == "succeeded"
    [collected] = [json.loads(line) for line in cli("collect", name).stdout.splitlines()]
    one_login(logins)
    assert (collected["job_key"], collected["kind"]) == (key, "succeeded")
    [raw] = [json.loads(line) for line in cli("collect", name, "--raw").stdout.splitlines()]
    assert key in raw["marker"] and raw["kind"] == "succeeded"
    log = cli("job", "log", name, key).stdout.splitlines()
    assert "-> succeeded" in log[-1]


def test_refusals_and_damage_keep_the_remote_exit_status(cli, kappa_ws, logins, tmp_path):
    ws = kappa_ws
    name = f"kappa:{ws['name']}"
    why = cli("job", "why", name, "no-such-job", code=2)
    one_login(logins)
    assert why.stdout == "" and why.stderr.startswith("error: ") and len(why.stderr.splitlines()) == 1
    assert cli("workspace", "fsck", name).stdout.endswith("; clean\n")
    # Every word reaches the remote httk as typed: quoted once, by the transport.
    tricky = "it's $HOME; `id` $(touch INJECTED) \"q\" *"
    cli("workspace", "settings", "set", name, "note.text", tricky)
    assert json.loads(cli("workspace", "settings", "show", name, "--json").stdout)["note.text"] == tricky
    assert ws["ssh"].run(["sh", "-c", "ls INJECTED 2>/dev/null; true"]).stdout == ""
    logins.clear()
    # An unreadable job.json, written there: fsck and job show exit 1 here too.
    key = cli("job", "submit", name, str(write_payload(tmp_path / "payload")), "--placement", "p").stdout.strip()
    damaged = ws["ssh"].run(["sh", "-c", 'printf "{not json" > "$1"', "sh", f"{ws['path']}/p/{key}/job.json"])
    assert damaged.returncode == 0
    logins.clear()
    report = json.loads(cli("workspace", "fsck", name, "--json", code=1).stdout)
    one_login(logins)
    assert report["left_for_operator"] == 1
    cli("job", "show", name, key, code=1)


def test_three_settings_and_ssh_config_are_enough(cli, kappa_ws, tmp_path):
    """host (an alias of ~/.ssh/config), username and check_connectivity; httk found in ~/.local/bin."""
    ws, infra = kappa_ws, kappa_ws["infra"]
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        "Host kappa-alias\n"
        f"  HostName {infra['CI_SSH_HOST']}\n  Port {infra['CI_SSH_PORT']}\n  IdentityFile {infra['CI_SSH_KEY']}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {infra['CI_SSH_KNOWN_HOSTS']}\n"
    )
    cli.env["HOME"] = str(home)
    ssh = ws["ssh"]
    linked = ssh.run(["sh", "-c", 'test -e "$HOME/.local/bin/httk" || { mkdir -p "$HOME/.local/bin" && '
                      'ln -s "$1" "$HOME/.local/bin/httk" && echo made; }', "sh", infra["CI_HTTK_COMMAND"]])
    try:
        cli("remote", "add", "alias", "--template", "ssh-slurm")
        cli("remote", "configure", "alias", "--set", "host=kappa-alias", "--set", f"username={infra['CI_SSH_USER']}",
            "--set", "check_connectivity=yes")
        text = cli("remote", "check", "alias", ws["name"]).stdout
        assert f"ok       connect         {infra['CI_SSH_USER']}@kappa-alias:{infra['CI_SSH_PORT']} " in text
        assert f"ok       workspace       {ws['name']} at {ws['path']} writable, " in text
        assert "/.local/bin/httk version " in text
        names = {row["name"] for row in json.loads(cli("workspace", "list", "alias:", "--json").stdout)}
        assert ws["name"] in names
        assert cli("job", "list", f"alias:{ws['name']}").stdout == "no jobs\n"
    finally:
        if linked.stdout == "made\n":
            ssh.run(["sh", "-c", 'rm -f "$HOME/.local/bin/httk"'])


def test_ssh_stream_hands_output_on_as_it_comes_and_keeps_our_own_errors(infra):
    ssh = ssh_transport(infra)
    try:
        seen: list[tuple[float, bytes]] = []
        errors: list[bytes] = []
        started = time.monotonic()
        code = ssh.stream(["sh", "-c", "echo first; sleep 1; echo second; echo oops >&2; exit 4"],
                          out=lambda data: seen.append((time.monotonic() - started, data)), err=errors.append)
        assert code == 4 and b"".join(data for _, data in seen) == b"first\nsecond\n" and errors == [b"oops\n"]
        assert seen[0][1] == b"first\n" and seen[0][0] < 0.9

        def closed(data: bytes) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        with pytest.raises(BrokenPipeError):
            ssh.stream(["sh", "-c", "echo one; sleep 5"], out=closed, err=closed)
        assert ssh.run(["echo", "again"]).stdout == "again\n"
        assert ssh.opened == 1  # the same connection: only the stopped command's channel was closed
    finally:
        ssh.close()
