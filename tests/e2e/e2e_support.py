"""Shared constants of the end-to-end tests (imported by name; conftest modules must not be)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "defects"
