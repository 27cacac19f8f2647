"""Fixtures of the remote tests: an in-process CLI and the Slurm/SSH infrastructure's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_support import Cli, load_infra


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture(scope="session")
def infra() -> dict[str, str]:
    """``$CI_INFRA_DIR/env`` of tests/infra/start-slurm-ssh.sh; the test skips when it is absent."""
    return load_infra(fresh_httk=False)


@pytest.fixture(scope="session")
def infra_httk() -> dict[str, str]:
    """Like ``infra``, for tests that run the ssh user's httk: it must match this checkout."""
    return load_infra(fresh_httk=True)
