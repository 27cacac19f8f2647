"""Splitting a byte stream into text lines, as supervised output and checker results arrive.

Owns :class:`LineSplitter`. Invariants: bytes are decoded as UTF-8 with invalid
bytes replaced and the line ending (``\\n``, ``\\r\\n``) stripped; a "line" longer
than :data:`MAX_LINE` bytes is cut there, so a stream without newlines cannot grow
the buffer without bound.
"""

from __future__ import annotations

MAX_LINE = 1 << 20
"""Bytes after which a line without a newline is cut and delivered."""


class LineSplitter:
    """Feed bytes in, get the complete lines out; :meth:`flush` delivers the unterminated rest."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data``."""
        self.buffer += data
        lines = []
        while (index := self.buffer.find(b"\n")) >= 0 or len(self.buffer) >= MAX_LINE:
            end = index if 0 <= index < MAX_LINE else MAX_LINE
            lines.append(self.buffer[:end].decode("utf-8", "replace").rstrip("\r"))
            del self.buffer[: end + 1 if end == index else end]
        return lines

    def flush(self) -> list[str]:
        """The unterminated last line, if any; the buffer is empty afterwards."""
        lines = [self.buffer.decode("utf-8", "replace").rstrip("\r")] if self.buffer else []
        self.buffer.clear()
        return lines
