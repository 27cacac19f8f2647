"""Production identifiers: uuid4 and random hex."""

from __future__ import annotations

import os
import uuid


class UuidIds:
    """Fresh ids from the operating system's randomness."""

    def new_id(self) -> str:
        return str(uuid.uuid4())

    def new_hex(self, digits: int) -> str:
        # os.urandom, as secrets.token_hex does, without importing secrets (hmac, hashlib, random) at start-up.
        return os.urandom((digits + 1) // 2).hex()[:digits]
