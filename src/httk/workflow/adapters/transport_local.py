"""LocalTransport: the :class:`~httk.workflow.ports.RemoteTransport` of this machine.

Runs an argument vector with ``subprocess`` (never a shell), so the ``local`` and
``local-slurm`` remotes behave like an SSH remote that happens to be here; put and
get are plain file copies. A missing program is exit status 127, as a shell on
the far side of an SSH connection reports it, so callers see one behaviour;
``stream`` hands the output on as it arrives, like the SSH transport.
Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..ports import CommandResult, OutputSink, TransportError


class LocalTransport:
    """Commands and files on this machine."""

    #: The transport's name: its entry point's name and the first half of a template name.
    name: ClassVar[str] = "local"
    #: The target, opening a template's description ("This machine; a manager runs as ...").
    description: ClassVar[str] = "This machine"
    #: The remote settings this transport adds to a template (the SettingSpec schema of operations/remotes); none here.
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> LocalTransport:
        """The transport of a remote with these settings (the template's defaults overlaid with its own)."""
        return cls()

    def __init__(self, *, cwd: str | None = None) -> None:
        self.cwd = cwd

    def __repr__(self) -> str:
        return "LocalTransport()"

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` and capture its output; stdin is ``input`` or empty."""
        if not argv:
            raise TransportError("local: empty command")
        try:
            done = subprocess.run(
                list(argv),
                input=input if input is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self.cwd,
                check=False,
            )
        except FileNotFoundError as error:
            if self.cwd is not None and error.filename == self.cwd:
                raise TransportError(f"local: working directory {self.cwd} does not exist") from None
            return CommandResult(127, "", f"{argv[0]}: command not found\n")
        except PermissionError:
            return CommandResult(126, "", f"{argv[0]}: permission denied\n")
        except subprocess.TimeoutExpired:
            raise TransportError(f"local: {argv[0]} did not finish within {timeout:g} s") from None
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def stream(self, argv: Sequence[str], *, out: OutputSink, err: OutputSink, timeout: float | None = None) -> int:
        """Run ``argv`` with an empty stdin, handing its output to ``out``/``err`` as it arrives."""
        if not argv:
            raise TransportError("local: empty command")
        try:
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.cwd
            )
        except FileNotFoundError as error:
            if self.cwd is not None and error.filename == self.cwd:
                raise TransportError(f"local: working directory {self.cwd} does not exist") from None
            err(f"{argv[0]}: command not found\n".encode())
            return 127
        except PermissionError:
            err(f"{argv[0]}: permission denied\n".encode())
            return 126
        deadline = None if timeout is None else time.monotonic() + timeout
        sinks = {process.stdout: out, process.stderr: err}
        with selectors.DefaultSelector() as selector, process:
            for pipe in sinks:
                selector.register(pipe, selectors.EVENT_READ)
            try:
                while selector.get_map():
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        raise TransportError(f"local: {argv[0]} did not finish within {timeout:g} s")
                    for key, _events in selector.select(wait):
                        data = os.read(key.fd, 1 << 16)
                        if data:
                            sinks[key.fileobj](data)  # type: ignore[index]
                        else:
                            selector.unregister(key.fileobj)
            except BaseException:
                # A timeout, a closed pipe on our side or an interrupt: the command must not run on unseen.
                process.kill()
                raise
            return process.wait()

    def put(self, local: str, remote: str) -> None:
        """Copy one file (mode included)."""
        self._copy(local, remote)

    def get(self, remote: str, local: str) -> None:
        """Copy one file (mode included)."""
        self._copy(remote, local)

    def close(self) -> None:
        """Nothing to release."""

    @staticmethod
    def _copy(source: str, destination: str) -> None:
        try:
            if os.path.isdir(source):
                raise IsADirectoryError(21, "is a directory; transports copy single files", source)
            shutil.copy2(source, destination)
        except OSError as error:
            where = error.filename or source
            raise TransportError(f"local: cannot copy {source} to {destination}: {error.strerror} ({where})") from None
