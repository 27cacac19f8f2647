"""Fixtures of the Bash SDK tests: a scratch directory of runner scripts (``runners``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shell_support import Runners


@pytest.fixture
def runners(tmp_path: Path) -> Runners:
    directory = tmp_path / "runners"
    directory.mkdir()
    return Runners(directory)
