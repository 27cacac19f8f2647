"""SshTransport: the :class:`~httk.workflow.ports.RemoteTransport` of a machine reached over SSH.

The one place a remote command line is composed: ``run(argv)`` and
``stream(argv)`` quote the vector with ``shlex.join`` for the remote login shell
(POSIX quoting: sh, bash, zsh). One ``fabric.Connection`` is opened on first use
and reused for every command and file until ``close()`` (files move over its SFTP
session), so one CLI command is one SSH login: a site with two-factor login
prompts once. ``~/.ssh/config`` is honoured (fabric's ``load_ssh_configs``):
``HostName``, ``Port``, ``User``, ``IdentityFile``, ``IdentitiesOnly``,
``UserKnownHostsFile``, ``ProxyJump`` and ``ConnectTimeout`` apply wherever the
remote's own settings leave them unset. Host keys are always checked: against
``known_hosts`` when given, else the config's ``UserKnownHostsFile``, else the
user's ``~/.ssh/known_hosts``, and an unknown or changed key is refused rather
than trusted. Every failure to reach
the machine is one :class:`~httk.workflow.ports.TransportError` line that says
what to fix: the families paramiko raises (``SSHException`` and its authentication
and host-key kinds, socket errors, ``EOFError``, timeouts) are told apart by how far
the handshake got, so an endpoint that answers but is not SSH says so. Paramiko's
own transport thread logs those failures with tracebacks; its logger gets a null
handler so they never reach the terminal. Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import paramiko
from fabric import Connection

from ..ports import CommandResult, OutputSink, TransportError

#: Bytes read from a channel at a time.
_CHUNK = 1 << 16
_TIMED_OUT = 124
_TIMEOUT_WRAPPER = 't=$1; shift; if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$t" "$@"; fi; exec "$@"'
#: Everything paramiko and the socket layer raise when a connection cannot be made or is lost.
_FAILURES = (paramiko.SSHException, EOFError, OSError)
_AGAIN = "run the command again; if it keeps failing, see 'httk workflow remote check'"
#: Seconds an interrupted copy's worker is given to end once its connection is closed under it.
_INTERRUPT_GRACE = 5.0

# Without a handler of its own, paramiko's thread tracebacks reach stderr through logging's last
# resort; the failure they describe is already raised here as one TransportError line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SshTransport:
    """Commands and files on one SSH host, over one reused connection."""

    #: The transport's name: its entry point's name and the first half of a template name.
    name: ClassVar[str] = "ssh"
    #: The target, opening a template's description ("A machine reached over SSH; a manager runs as ...").
    description: ClassVar[str] = "A machine reached over SSH"
    #: The remote settings this transport adds to a template (the SettingSpec schema of operations/remotes).
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "host": {"type": "string", "required": True,
                 "description": "The SSH host name or address (an alias of ~/.ssh/config works)."},
        # No default: unset means the host's Port in ~/.ssh/config, else 22.
        "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                 "description": "The SSH port (unset: the host's Port in ~/.ssh/config, else 22)."},
        "username": {"type": "string",
                     "description": "The login name on the host (default: ~/.ssh/config, else the local user name)."},
        "key_filename": {"type": "string", "description": (
            "A private key file; when set, only this key (and the host's IdentityFile in ~/.ssh/config) is "
            "offered (no agent, no default keys).")},
        "known_hosts": {"type": "string", "description": (
            "A known_hosts file checked strictly (default: the host's UserKnownHostsFile in ~/.ssh/config, "
            "else ~/.ssh/known_hosts, also strictly).")},
        "connect_timeout": {"type": "number", "default": 10, "minimum": 1,
                            "description": "Seconds to wait for the SSH connection."},
    }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SshTransport:
        """The transport of a remote with these settings (the template's defaults overlaid with its own)."""
        return cls(
            settings["host"],
            port=settings.get("port"),
            user=settings.get("username"),
            key_filename=settings.get("key_filename"),
            known_hosts=settings.get("known_hosts"),
            connect_timeout=float(settings.get("connect_timeout", 10)),
        )

    def __init__(
        self,
        host: str,
        *,
        port: int | None = None,
        user: str | None = None,
        key_filename: str | None = None,
        known_hosts: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        if not host:
            raise TransportError("ssh: no host configured")
        self.host = host
        self.user = user or None
        self.key_filename = os.path.expanduser(key_filename) if key_filename else None
        self.known_hosts = os.path.expanduser(known_hosts) if known_hosts else None
        self.connect_timeout = connect_timeout
        #: How many SSH connections this transport has opened: one per CLI command.
        self.opened = 0
        self._connection: Connection | None = None
        # Reading ~/.ssh/config once here (fabric does it when a Connection is made; nothing is
        # contacted) gives the messages the port, user and keys that will really be used.
        self.ssh_config: dict[str, Any] = dict(Connection(host, user=self.user, port=port or None).ssh_config)
        self.port = int(port) if port else int(self.ssh_config.get("port", 22))
        self._login = self.user or self.ssh_config.get("user")
        configured_keys = [os.path.expanduser(key) for key in self.ssh_config.get("identityfile", [])]
        self._keys = [key for key in (self.key_filename, *configured_keys) if key]
        # Only the named keys when the remote names one or the config says IdentitiesOnly: agent and
        # default keys could log in as someone else.
        self._only_named_keys = bool(self.key_filename) or self.ssh_config.get("identitiesonly") == "yes"
        # A UserKnownHostsFile that does not exist is empty to ssh too; the known_hosts setting must exist.
        self._hosts_files = [self.known_hosts] if self.known_hosts else [
            path for path in map(os.path.expanduser, str(self.ssh_config.get("userknownhostsfile", "")).split())
            if os.path.exists(path)
        ]

    @property
    def where(self) -> str:
        """``user@host:port`` as the messages name it (from the settings, else ``~/.ssh/config``)."""
        user = f"{self._login}@" if self._login else ""
        return f"{user}{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"SshTransport({self.where})"

    # -- connection -----------------------------------------------------------------------------
    def _connect(self) -> Connection:
        if self._connection is not None and self._connection.is_connected:
            return self._connection
        # banner_timeout too: an endpoint that accepts and never speaks would otherwise hold us 15 s.
        connect_kwargs: dict[str, Any] = {"banner_timeout": self.connect_timeout}
        if self.key_filename:
            connect_kwargs["key_filename"] = self.key_filename  # fabric adds the config's IdentityFile
        if self._only_named_keys:
            connect_kwargs.update(look_for_keys=False, allow_agent=False)
        connection = Connection(
            self.host,
            user=self.user,
            port=self.port,
            connect_timeout=max(1, round(self.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        client = connection.client
        try:
            if self._hosts_files:
                for path in self._hosts_files:
                    client.load_host_keys(path)
            else:
                client.load_system_host_keys()
        except OSError as error:
            raise TransportError(
                f"ssh {self.where}: cannot read {self._hosts_file()} ({_text(error)}); check known_hosts"
            ) from None
        except (paramiko.hostkeys.InvalidHostKey, UnicodeDecodeError):
            # A line paramiko cannot decode: refusing it beats guessing which keys the file meant.
            raise TransportError(
                f"ssh {self.where}: {self._hosts_file()} is not a known_hosts file (a line does not decode); "
                "check known_hosts"
            ) from None
        # Fabric trusts unknown hosts (AutoAddPolicy); a workspace's data deserves a checked key.
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            connection.open()
        except _FAILURES as error:
            # Read the handshake's progress before closing: it tells "not SSH" from "SSH, but refused".
            message = self._connect_failure(error, client.get_transport())
            _quietly_close(connection)
            raise TransportError(f"ssh {self.where}: {message}") from None
        self._connection = connection
        self.opened += 1
        return connection

    def _connect_failure(self, error: BaseException, transport: paramiko.Transport | None) -> str:
        """What went wrong while connecting, and what to change, as one clause."""
        check = "check the remote's host and port settings"
        if isinstance(error, paramiko.BadHostKeyException):
            hosts = self._hosts_file()
            return f"the host key does not match {hosts}; if the host was reinstalled, remove its old entry"
        if isinstance(error, paramiko.AuthenticationException):
            user = self._login or "the default user"
            return (f"authentication failed for {user}{self._with_keys()} ({_text(error)}); check username and "
                    "key_filename (the public key must be in that user's authorized_keys)")
        if isinstance(error, socket.gaierror):
            return f"cannot resolve host {self.host!r} ({error.strerror}); check the host setting"
        if isinstance(error, OSError) and error.filename and error.filename in self._keys:
            return f"cannot read the key {error.filename} ({error.strerror}); check key_filename and ~/.ssh/config"
        if transport is None or isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
            # The TCP connection itself failed: nothing of SSH was spoken.
            if isinstance(error, TimeoutError):  # socket.timeout is an alias of it
                return f"no answer within {self.connect_timeout:g} s; {check}, firewalls, or raise connect_timeout"
            if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
                # One error per address tried; their reasons ("Connection refused") say more than the summary.
                reasons = sorted({_text(each) for each in error.errors.values()})
                return f"cannot connect to port {self.port} ({'; '.join(reasons)}); {check}, and that sshd runs there"
            return f"cannot connect ({_text(error)}); {check}, and that sshd runs there"
        if not transport.remote_version:
            # Silent: either still waiting when connect gave up, or paramiko's banner read timed out.
            if transport.is_alive() or _caused_by(error, TimeoutError):
                return (f"port {self.port} accepted the connection but sent no SSH greeting within "
                        f"{self.connect_timeout:g} s: it is not an SSH server; {check}")
            return (f"port {self.port} answered but is not an SSH server (it closed the connection without an "
                    f"SSH greeting); {check}")
        if not transport.initial_kex_done:
            # The greeting is the far side's text: one line, and short.
            greeting = " ".join(str(transport.remote_version).split())[:80]
            return (f"the SSH handshake with {greeting!r} failed ({_text(error)}); {check}, "
                    "and that the server accepts modern key exchange")
        if isinstance(error, paramiko.SSHException) and "known_hosts" in str(error):
            return (f"host key unknown (not in {self._hosts_file()}); connect once with "
                    f"'ssh -p {self.port} {self.host}' to accept it, or set known_hosts")
        if not transport.is_authenticated():
            # Paramiko reports an unusable key file (not a key, an unsupported type) as a plain SSHException.
            return f"cannot log in{self._with_keys()} ({_text(error)}); check username and key_filename"
        return f"{_text(error)}; see 'httk workflow remote check' for what to fix"

    def _with_keys(self) -> str:
        return f" with key {', '.join(self._keys)}" if self._keys else ""

    def _hosts_file(self) -> str:
        return self.known_hosts or " ".join(self._hosts_files) or "~/.ssh/known_hosts"

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        if self._connection is not None:
            _quietly_close(self._connection)
            self._connection = None

    # -- commands -------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` in the remote login shell; ``input`` (else nothing) is its stdin, then EOF."""
        stdout, stderr = bytearray(), bytearray()
        returncode = self._execute(argv, input, timeout, stdout.extend, stderr.extend)
        return CommandResult(returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def stream(self, argv: Sequence[str], *, out: OutputSink, err: OutputSink, timeout: float | None = None) -> int:
        """Run ``argv`` with an empty stdin, handing its output to ``out``/``err`` as it arrives."""
        return self._execute(argv, None, timeout, out, err)

    def _execute(
        self,
        argv: Sequence[str],
        input: str | None,
        timeout: float | None,
        out: OutputSink,
        err: OutputSink,
    ) -> int:
        """One command on a new channel of the reused connection; its exit status.

        A paramiko channel is used directly rather than ``Connection.run``: invoke mirrors a
        non-terminal stdin one byte per 10 ms, which makes sending a batch script take seconds.
        """
        if not argv:
            raise TransportError(f"ssh {self.where}: empty command")
        program = argv[0]
        if timeout is not None:
            # Closing the channel does not signal a command without a pty: the remote side enforces
            # the timeout itself (coreutils timeout where it exists), so a timed-out call stops there too.
            argv = ["sh", "-c", _TIMEOUT_WRAPPER, "httk-timeout", f"{timeout:g}", *argv]
        command = shlex.join(argv)
        transport = self._connect().transport
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            channel = transport.open_session(timeout=self.connect_timeout)
            channel.exec_command(command)
            if input:
                channel.sendall(input.encode("utf-8"))
            channel.shutdown_write()
            self._relay(channel, deadline + 1.0 if deadline else None, program, timeout, out, err)
            returncode = channel.recv_exit_status()
            channel.close()
            if timeout is not None and returncode == _TIMED_OUT:
                raise TransportError(f"ssh {self.where}: {program} did not finish within {timeout:g} s")
        except _SinkFailed as failed:
            # Our side stopped reading (a closed pipe): its own error, not a lost connection. The command
            # there loses its output channel (SIGPIPE on its next write); the connection stays, so a
            # cleanup afterwards needs no second login.
            channel.close()
            raise failed.error from None
        except _FAILURES as error:
            self.close()
            raise TransportError(f"ssh {self.where}: {program}: connection lost ({_text(error)}); {_AGAIN}") from None
        return returncode

    def _relay(
        self,
        channel: paramiko.Channel,
        deadline: float | None,
        program: str,
        timeout: float | None,
        out: OutputSink,
        err: OutputSink,
    ) -> None:
        """Hand stdout and stderr on as they arrive, until the command exits and both streams end."""
        while True:
            while channel.recv_ready():
                _hand(out, channel.recv(_CHUNK))
            while channel.recv_stderr_ready():
                _hand(err, channel.recv_stderr(_CHUNK))
            if channel.exit_status_ready() and channel.eof_received:
                if not channel.recv_ready() and not channel.recv_stderr_ready():
                    return
            if deadline is not None and time.monotonic() > deadline:
                channel.close()
                raise TransportError(f"ssh {self.where}: {program} did not finish within {timeout:g} s")
            # The channel's descriptor turns readable on data, on EOF and on close.
            select.select([channel], [], [], 0.2)

    # -- files ----------------------------------------------------------------------------------
    def put(self, local: str, remote: str) -> None:
        """Copy one local file there over SFTP (a relative ``remote`` is below the login directory)."""
        try:
            connection = self._connect()
            self._interruptible(lambda: connection.put(local, remote=remote))
        except _FAILURES as error:
            self.close()
            raise TransportError(f"ssh {self.where}: cannot put {local} to {remote}: {_text(error)}") from None

    def get(self, remote: str, local: str) -> None:
        """Copy one file from there over SFTP."""
        try:
            connection = self._connect()
            self._interruptible(lambda: connection.get(remote, local=local))
        except _FAILURES as error:
            self.close()
            raise TransportError(f"ssh {self.where}: cannot get {remote} to {local}: {_text(error)}") from None

    def _interruptible(self, copy: Callable[[], object]) -> None:
        """Run one SFTP copy in a worker thread, so that an interrupt (Ctrl-C) cannot land inside paramiko.

        Interrupted inside its pipelined writes, paramiko waits for ever for the reply to a
        request it cut short (the command hangs). The interrupt reaches this (main) thread
        instead: the connection is dropped under the copy, which ends the worker, and the
        interrupt goes on; the next call opens a new connection.
        """
        failure: list[BaseException] = []

        def work() -> None:
            try:
                copy()
            except BaseException as error:  # handed to the caller's thread, which raises it
                failure.append(error)

        worker = threading.Thread(target=work, name="httk-sftp-copy", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except BaseException:
            self.close()
            worker.join(_INTERRUPT_GRACE)
            raise
        if failure:
            raise failure[0]


class _SinkFailed(Exception):
    """A stream's consumer raised: carried past the connection-failure handling unchanged."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _hand(sink: OutputSink, data: bytes) -> None:
    try:
        sink(data)
    except Exception as error:
        raise _SinkFailed(error) from error


def _quietly_close(connection: Connection) -> None:
    """Close a connection that may be half open; a failure to close it changes nothing for the caller."""
    try:
        connection.close()
    except _FAILURES:
        pass


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``error`` or an exception it was raised while handling is a ``kind``."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _text(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f": {error.filename}" if error.filename else "")
    return " ".join(str(error).split()) or type(error).__name__
