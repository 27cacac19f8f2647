"""SshTransport: the :class:`~httk.workflow.ports.RemoteTransport` of a machine reached over SSH.

The one place a remote command line is composed: ``run(argv)`` quotes the vector
with ``shlex.join`` for the remote login shell (POSIX quoting: sh, bash, zsh).
One ``fabric.Connection`` is opened on first use and reused until ``close()``;
files move over its SFTP session. Host keys are always checked: against
``known_hosts`` when given, else against the user's ``~/.ssh/known_hosts``, and
an unknown or changed key is refused rather than trusted. Every failure to reach
the machine is one :class:`~httk.workflow.ports.TransportError` line that says
what to fix. Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import os
import select
import shlex
import socket
import time
from collections.abc import Sequence
from typing import Any

import paramiko
from fabric import Connection

from ..ports import CommandResult, TransportError

#: Bytes read from a channel at a time.
_CHUNK = 1 << 16
_TIMED_OUT = 124
_TIMEOUT_WRAPPER = 't=$1; shift; if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$t" "$@"; fi; exec "$@"'


class SshTransport:
    """Commands and files on one SSH host, over one reused connection."""

    def __init__(
        self,
        host: str,
        *,
        port: int = 22,
        user: str | None = None,
        key_filename: str | None = None,
        known_hosts: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        if not host:
            raise TransportError("ssh: no host configured")
        self.host = host
        self.port = int(port)
        self.user = user or None
        self.key_filename = os.path.expanduser(key_filename) if key_filename else None
        self.known_hosts = os.path.expanduser(known_hosts) if known_hosts else None
        self.connect_timeout = connect_timeout
        self._connection: Connection | None = None

    @property
    def where(self) -> str:
        """``user@host:port`` as the messages name it."""
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"SshTransport({self.where})"

    # -- connection -----------------------------------------------------------------------------
    def _connect(self) -> Connection:
        if self._connection is not None and self._connection.is_connected:
            return self._connection
        connect_kwargs: dict[str, Any] = {}
        if self.key_filename:
            # Only the configured key: agent and default keys could log in as someone else.
            connect_kwargs = {"key_filename": self.key_filename, "look_for_keys": False, "allow_agent": False}
        connection = Connection(
            self.host,
            user=self.user,
            port=self.port,
            connect_timeout=max(1, round(self.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        client = connection.client
        try:
            if self.known_hosts:
                client.load_host_keys(self.known_hosts)
            else:
                client.load_system_host_keys()
        except OSError as error:
            hosts = self.known_hosts or "~/.ssh/known_hosts"
            raise TransportError(f"ssh {self.where}: cannot read {hosts}: {error.strerror}") from None
        # Fabric trusts unknown hosts (AutoAddPolicy); a workspace's data deserves a checked key.
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            connection.open()
        except paramiko.BadHostKeyException:
            raise TransportError(
                f"ssh {self.where}: the host key does not match {self._hosts_file()}; "
                "if the host was reinstalled, remove its old entry"
            ) from None
        except paramiko.AuthenticationException as error:
            key = f" with key {self.key_filename}" if self.key_filename else ""
            raise TransportError(f"ssh {self.where}: authentication failed{key} ({_text(error)})") from None
        except paramiko.SSHException as error:
            if "known_hosts" in str(error):
                raise TransportError(
                    f"ssh {self.where}: host key unknown (not in {self._hosts_file()}); connect once with "
                    f"'ssh -p {self.port} {self.host}' to accept it, or set known_hosts"
                ) from None
            raise TransportError(f"ssh {self.where}: {_text(error)}") from None
        except socket.gaierror as error:
            raise TransportError(f"ssh {self.where}: cannot resolve host ({error.strerror})") from None
        except TimeoutError:
            raise TransportError(f"ssh {self.where}: no answer within {self.connect_timeout:g} s") from None
        except OSError as error:
            # Also paramiko's NoValidConnectionsError (connection refused) and an unreadable key file.
            raise TransportError(f"ssh {self.where}: cannot connect ({_text(error)})") from None
        self._connection = connection
        return connection

    def _hosts_file(self) -> str:
        return self.known_hosts or "~/.ssh/known_hosts"

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- commands -------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` in the remote login shell; ``input`` (else nothing) is its stdin, then EOF.

        A paramiko channel is used directly rather than ``Connection.run``: invoke mirrors a
        non-terminal stdin one byte per 10 ms, which makes sending a batch script take seconds.
        """
        if not argv:
            raise TransportError(f"ssh {self.where}: empty command")
        if timeout is not None:
            # Closing the channel does not signal a command without a pty: the remote side enforces
            # the timeout itself (coreutils timeout where it exists), so a timed-out call stops there too.
            argv = ["sh", "-c", _TIMEOUT_WRAPPER, "httk-timeout", f"{timeout:g}", *argv]
        command = shlex.join(argv)
        program = argv[5] if timeout is not None else argv[0]
        transport = self._connect().transport
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            channel = transport.open_session(timeout=self.connect_timeout)
            channel.exec_command(command)
            if input:
                channel.sendall(input.encode("utf-8"))
            channel.shutdown_write()
            stdout, stderr = self._collect(channel, deadline + 1.0 if deadline else None, program, timeout)
            returncode = channel.recv_exit_status()
            channel.close()
            if timeout is not None and returncode == _TIMED_OUT:
                raise TransportError(f"ssh {self.where}: {program} did not finish within {timeout:g} s")
        except paramiko.SSHException as error:
            self.close()
            raise TransportError(f"ssh {self.where}: {program}: {_text(error)}") from None
        except OSError as error:
            self.close()
            raise TransportError(f"ssh {self.where}: {program}: connection lost ({_text(error)})") from None
        return CommandResult(returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def _collect(
        self, channel: paramiko.Channel, deadline: float | None, program: str, timeout: float | None
    ) -> tuple[bytes, bytes]:
        """Read stdout and stderr together until the command exits and both streams end."""
        stdout, stderr = bytearray(), bytearray()
        while True:
            while channel.recv_ready():
                stdout += channel.recv(_CHUNK)
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(_CHUNK)
            if channel.exit_status_ready() and channel.eof_received:
                if not channel.recv_ready() and not channel.recv_stderr_ready():
                    return bytes(stdout), bytes(stderr)
            if deadline is not None and time.monotonic() > deadline:
                channel.close()
                raise TransportError(f"ssh {self.where}: {program} did not finish within {timeout:g} s")
            # The channel's descriptor turns readable on data, on EOF and on close.
            select.select([channel], [], [], 0.2)

    # -- files ----------------------------------------------------------------------------------
    def put(self, local: str, remote: str) -> None:
        """Copy one local file there over SFTP (a relative ``remote`` is below the login directory)."""
        try:
            self._connect().put(local, remote=remote)
        except (OSError, paramiko.SSHException) as error:
            raise TransportError(f"ssh {self.where}: cannot put {local} to {remote}: {_text(error)}") from None

    def get(self, remote: str, local: str) -> None:
        """Copy one file from there over SFTP."""
        try:
            self._connect().get(remote, local=local)
        except (OSError, paramiko.SSHException) as error:
            raise TransportError(f"ssh {self.where}: cannot get {remote} to {local}: {_text(error)}") from None


def _text(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f": {error.filename}" if error.filename else "")
    return " ".join(str(error).split()) or type(error).__name__
