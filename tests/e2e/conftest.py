from __future__ import annotations

import os
import sys

import pytest
from e2e_support import EXAMPLE


@pytest.fixture
def campaign_env(monkeypatch):
    """The stand-in programs on PATH, as the demo has them."""
    monkeypatch.setenv("PATH", f"{EXAMPLE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("DEMO_DIVERGE", raising=False)
    return monkeypatch


def python() -> str:
    return sys.executable
