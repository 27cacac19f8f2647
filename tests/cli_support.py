"""The one in-process command-line harness: ``httk workflow ...`` through click's ``CliRunner``.

Every :class:`Cli` has its own container (a test may override its providers) and
private XDG data and config homes below the test's ``tmp_path``, passed to each
command (and inherited by what a command starts, such as the ``local`` remote's
httk). The ``cli`` fixture of tests/conftest.py builds one per test; a test that
needs a second imports the class by name (``from cli_support import Cli``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from httk.workflow.bootstrap import Container
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk


class Cli:
    """Runs ``httk workflow ...`` in-process; ``code`` is the exit status a call asserts (``None``: any)."""

    def __init__(self, tmp_path: Path) -> None:
        self.runner = CliRunner()
        self.data_home = tmp_path / "xdg-data"
        self.config_home = tmp_path / "xdg-config"
        self.env = {"XDG_DATA_HOME": str(self.data_home), "XDG_CONFIG_HOME": str(self.config_home)}
        self.container = Container()

    @property
    def registry(self) -> Path:
        """This machine's workspace registry (``registry.json`` in the data home)."""
        return self.data_home / "httk-workflow" / "registry.json"

    @property
    def remotes(self) -> Path:
        """The directory of the remote registry's files (in the config home)."""
        return self.config_home / "httk-workflow" / "remotes"

    def __call__(self, *args: str, code: int | None = 0, env: dict[str, str] | None = None) -> Result:
        result = self.runner.invoke(
            httk, ["workflow", *args], obj=AppContext(self.container), env={**self.env, **(env or {})}
        )
        if code is not None and result.exit_code != code:
            raise AssertionError(
                f"exit {result.exit_code} != {code} for {args}\nstdout: {result.stdout}\n"
                f"stderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: str) -> Any:
        """The one JSON value ``args --json`` prints."""
        return json.loads(self(*args, "--json").stdout)

    def refused(self, *args: str) -> str:
        """The single ``error: ...`` line of a refused command (exit 2, no traceback, nothing else)."""
        result = self(*args, code=2)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (result.stderr, result.exception)
        return lines[0]
