"""Fixtures of the remote tests: the Slurm/SSH infrastructure's settings and a transport to it.

The in-process command line is the shared ``cli`` fixture of tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from remote_support import load_infra, ssh_transport


@pytest.fixture(scope="session")
def infra() -> dict[str, str]:
    """``$CI_INFRA_DIR/env`` of tests/infra/start-slurm-ssh.sh; the test skips when it is absent."""
    return load_infra(fresh_httk=False)


@pytest.fixture(scope="session")
def infra_httk() -> dict[str, str]:
    """Like ``infra``, for tests that run the ssh user's httk: it must match this checkout."""
    return load_infra(fresh_httk=True)


@pytest.fixture
def ssh(infra: dict[str, str]) -> Iterator[Any]:
    """An open ``SshTransport`` to the infrastructure's sshd, closed after the test."""
    connection = ssh_transport(infra)
    yield connection
    connection.close()
