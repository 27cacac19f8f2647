"""Deterministic identifiers for tests."""

from __future__ import annotations

import itertools


class SequentialIds:
    """Ids that count up: ``00000000-0000-4000-8000-000000000001``, … and hex ``000000000001``, …"""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self) -> str:
        return f"00000000-0000-4000-8000-{next(self._counter):012x}"

    def new_hex(self, digits: int) -> str:
        return f"{next(self._counter):0{digits}x}"[-digits:]
