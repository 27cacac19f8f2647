"""Every way an SSH remote can fail is one line naming the remote and the fix, never a paramiko traceback.

The endpoints are tiny TCP servers on 127.0.0.1 (no infrastructure needed): one that
answers like a web server, one that accepts and closes, one that accepts and stays
silent, and a port where nothing listens. The authentication failure needs the sshd
of tests/infra and skips without it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from remote_support import HTTK

from httk.workflow.adapters.transport_ssh import SshTransport
from httk.workflow.ports import TransportError


class Endpoint:
    """A TCP server on 127.0.0.1 that treats every connection with ``handle``."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.handle = handle
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                self.handle(connection)

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


def http_banner(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")


def close_at_once(connection: socket.socket) -> None:
    pass


def silent(connection: socket.socket) -> None:
    connection.recv(1024)  # the client's own banner; then say nothing until it gives up
    connection.recv(1024)


def fake_ssh(connection: socket.socket) -> None:
    connection.sendall(b"SSH-2.0-fake\r\n" + b"\x00" * 64)
    connection.recv(1024)


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


@pytest.fixture
def endpoint() -> Iterator[Callable[[Callable[[socket.socket], None]], Endpoint]]:
    started: list[Endpoint] = []

    def start(handle: Callable[[socket.socket], None]) -> Endpoint:
        started.append(Endpoint(handle))
        return started[-1]

    yield start
    for each in started:
        each.close()


@pytest.mark.parametrize(
    ("handle", "expected"),
    [
        (http_banner, r"port \d+ answered but is not an SSH server \(it closed the connection without an SSH greet"),
        (close_at_once, r"port \d+ answered but is not an SSH server"),
        (silent, r"port \d+ accepted the connection but sent no SSH greeting within 1 s: it is not an SSH server"),
    ],
    ids=["http-banner", "accept-and-close", "silent"],
)
def test_an_endpoint_that_is_not_ssh_is_named_as_such(endpoint, handle, expected: str) -> None:
    server = endpoint(handle)
    transport = SshTransport("127.0.0.1", port=server.port, user="x", connect_timeout=1.0)
    with pytest.raises(TransportError, match=expected) as caught:
        transport.run(["true"])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"ssh x@127.0.0.1:{server.port}: ")
    assert message.endswith("check the remote's host and port settings")


def test_an_endpoint_that_greets_but_breaks_the_handshake_is_named(endpoint) -> None:
    server = endpoint(fake_ssh)
    with pytest.raises(TransportError) as caught:
        SshTransport("127.0.0.1", port=server.port, connect_timeout=1.0).run(["true"])
    assert str(caught.value).startswith(f"ssh 127.0.0.1:{server.port}: the SSH handshake with 'SSH-2.0-fake' failed (")
    assert "\n" not in str(caught.value)


def test_a_port_with_nothing_listening_says_connection_refused() -> None:
    port = free_port()
    with pytest.raises(TransportError) as caught:
        SshTransport("127.0.0.1", port=port, connect_timeout=1.0).run(["true"])
    assert str(caught.value) == (
        f"ssh 127.0.0.1:{port}: cannot connect to port {port} (Connection refused); "
        "check the remote's host and port settings, and that sshd runs there"
    )


def cli_env(tmp_path: Path) -> dict[str, str]:
    """Private homes: the registry, the remotes and fabric's ~/.ssh/config all live below tmp_path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("XDG_", "HTTK_"))}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"))
    return env


def httk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # A real process: paramiko's transport thread logs after the call returns, which an
    # in-process runner would not see on its stderr.
    return subprocess.run([HTTK, "workflow", *args], env=env, capture_output=True, text=True, timeout=60)


def add_ssh_remote(env: dict[str, str], tmp_path: Path, *settings: str) -> None:
    assert httk(env, "remote", "add", "kappa", "--template", "ssh-slurm").returncode == 0
    configure = [f"--set={setting}" for setting in settings]
    done = httk(env, "remote", "configure", "kappa", "--set=connect_timeout=2", *configure)
    assert done.returncode == 0, done.stderr


def disk(tmp_path: Path) -> list[str]:
    return sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))


@pytest.mark.parametrize("command", [("workspace", "status", "kappa:runs"), ("run", "kappa:runs")])
def test_cli_remote_failures_are_one_line_naming_the_remote_and_exit_2(endpoint, tmp_path, command) -> None:
    env = cli_env(tmp_path)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    server = endpoint(http_banner)
    add_ssh_remote(env, tmp_path, "host=127.0.0.1", f"port={server.port}", "username=x",
                   f"known_hosts={known_hosts}")
    before = disk(tmp_path)
    result = httk(env, *command)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: remote kappa: ssh x@127.0.0.1:{server.port}: port {server.port} answered but is not an SSH "
        "server (it closed the connection without an SSH greeting); check the remote's host and port settings\n"
    )
    assert disk(tmp_path) == before


def test_cli_nothing_listening_is_one_line(tmp_path) -> None:
    env = cli_env(tmp_path)
    port = free_port()
    add_ssh_remote(env, tmp_path, "host=127.0.0.1", f"port={port}")
    before = disk(tmp_path)
    result = httk(env, "workspace", "status", "kappa:runs")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: remote kappa: ssh 127.0.0.1:{port}: cannot connect to port {port} "
                                    "(Connection refused)")
    assert disk(tmp_path) == before


@pytest.mark.ssh
def test_cli_wrong_username_names_the_remote_and_what_to_check(infra, tmp_path) -> None:
    env = cli_env(tmp_path)
    add_ssh_remote(env, tmp_path, f"host={infra['CI_SSH_HOST']}", f"port={infra['CI_SSH_PORT']}",
                   "username=no-such-user", f"key_filename={infra['CI_SSH_KEY']}",
                   f"known_hosts={infra['CI_SSH_KNOWN_HOSTS']}")
    before = disk(tmp_path)
    result = httk(env, "workspace", "status", "kappa:runs")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(
        f"error: remote kappa: ssh no-such-user@{infra['CI_SSH_HOST']}:{infra['CI_SSH_PORT']}: authentication "
        f"failed for no-such-user with key {infra['CI_SSH_KEY']}"
    )
    assert result.stderr.rstrip().endswith(
        "check username and key_filename (the public key must be in that user's authorized_keys)"
    )
    assert disk(tmp_path) == before


@pytest.mark.parametrize("content", [b"127.0.0.1 ssh-ed25519 AAAA!!!notbase64=\n", b"\xff\xfe\n"],
                         ids=["bad-base64", "not-utf8"])
def test_an_undecodable_known_hosts_file_is_one_line(tmp_path, content: bytes) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_bytes(content)
    with pytest.raises(TransportError) as caught:
        SshTransport("127.0.0.1", port=free_port(), known_hosts=str(known_hosts), connect_timeout=1.0).run(["true"])
    assert str(caught.value).endswith(f"{known_hosts} is not a known_hosts file (a line does not decode); "
                                      "check known_hosts")


@pytest.mark.ssh
def test_a_key_file_that_is_not_a_key_is_one_line(infra, tmp_path) -> None:
    garbage = tmp_path / "not_a_key"
    garbage.write_text("garbage\n")
    transport = SshTransport(infra["CI_SSH_HOST"], port=int(infra["CI_SSH_PORT"]), user=infra["CI_SSH_USER"],
                             key_filename=str(garbage), known_hosts=infra["CI_SSH_KNOWN_HOSTS"], connect_timeout=5.0)
    with pytest.raises(TransportError) as caught:
        transport.run(["true"])
    assert f"cannot log in with key {garbage} (" in str(caught.value)
    assert str(caught.value).endswith("check username and key_filename")
