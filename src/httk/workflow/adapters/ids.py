"""Production identifiers: uuid4 and random hex."""

from __future__ import annotations

import secrets
import uuid


class UuidIds:
    """Fresh ids from the operating system's randomness."""

    def new_id(self) -> str:
        return str(uuid.uuid4())

    def new_hex(self, digits: int) -> str:
        return secrets.token_hex((digits + 1) // 2)[:digits]
