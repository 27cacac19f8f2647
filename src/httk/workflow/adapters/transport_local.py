"""LocalTransport: the :class:`~httk.workflow.ports.RemoteTransport` of this machine.

Runs an argument vector with ``subprocess`` (never a shell), so the ``local`` and
``local-slurm`` remotes behave like an SSH remote that happens to be here; put and
get are plain file copies. A missing program is exit status 127, as a shell on
the far side of an SSH connection reports it, so callers see one behaviour.
Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from ..ports import CommandResult, TransportError


class LocalTransport:
    """Commands and files on this machine."""

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
