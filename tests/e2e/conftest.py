from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "defects"


@pytest.fixture
def campaign_env(monkeypatch):
    """The stand-in programs on PATH, as the demo has them."""
    monkeypatch.setenv("PATH", f"{EXAMPLE / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("DEMO_DIVERGE", raising=False)
    return monkeypatch


def python() -> str:
    return sys.executable
