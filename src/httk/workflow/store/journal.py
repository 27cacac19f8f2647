"""The journal: per-writer, append-only segments of checksummed, length-framed frames.

One writer per process, never shared, so appends need no lock. A frame is
``u64 length ‖ JSON ‖ sha256 ‖ u64 length``; a record reference names writer,
segment, offset, length and a checksum prefix, so a reader verifies it read
exactly the frame the marker meant. Readers wait out the visibility deadline
before calling a frame missing. Spec: 000 "Checking and repairing";
docs/workflow_filesystem_api.md "Journal".
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator
from typing import Any

import attrs

from .. import codec
from ..ports import Appender, Filesystem, unreadable

SEGMENT_HEADER = b"HTTKJNL1" + b"\x00" * 8
_LENGTH = struct.Struct(">Q")
_OVERHEAD = _LENGTH.size * 2 + 32
# At most 19 digits per number, so int() never sees an absurd one; the ranges are checked after.
_REF = re.compile(r"^([0-9a-f]{12})~([0-9]{1,19})~([0-9]{1,19})~([0-9]{1,19})~([0-9a-f]{8})$")
#: The largest frame a writer appends and a reader accepts: a state frame is a small document
#: (a join listing many children is the largest), so a reference claiming more is damage.
MAX_FRAME_BYTES = 64 * 1024 * 1024
_MAX_OFFSET = 2**63 - 1  # off_t


class FrameDamage(Exception):
    """A referenced frame that cannot be read; ``code`` is the stable damage code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@attrs.frozen
class RecordRef:
    """Where exactly one frame lives."""

    writer: str
    segment: int
    offset: int
    length: int
    prefix: str

    def __str__(self) -> str:
        return f"{self.writer}~{self.segment}~{self.offset}~{self.length}~{self.prefix}"

    @classmethod
    def parse(cls, text: str) -> RecordRef:
        match = _REF.match(text)
        if not match:
            raise ValueError(f"not a record reference: {text!r}")
        writer, segment, offset, length, prefix = match.groups()
        ref = cls(writer, int(segment), int(offset), int(length), prefix)
        if ref.segment < 1 or not _OVERHEAD <= ref.length <= MAX_FRAME_BYTES:
            raise ValueError(f"record reference out of range: {text!r}")
        if not len(SEGMENT_HEADER) <= ref.offset <= _MAX_OFFSET - ref.length:
            raise ValueError(f"record reference out of range: {text!r}")
        return ref


def segment_path(journal_dir: str, writer: str, segment: int) -> str:
    return f"{journal_dir}/{writer}/{segment}.journal"


def encode_frame(document: dict[str, Any]) -> tuple[bytes, str]:
    body = codec.dumps(document).encode("utf-8")
    checksum = hashlib.sha256(body).digest()
    return _LENGTH.pack(len(body)) + body + checksum + _LENGTH.pack(len(body)), checksum.hex()


class JournalWriter:
    """Appends frames to this process's own segments, rotating at ``segment_bytes``."""

    def __init__(
        self, fs: Filesystem, journal_dir: str, writer_id: str, *, segment_bytes: int, durable: bool
    ) -> None:
        self._fs = fs
        self._dir = journal_dir
        self.writer_id = writer_id
        self._segment_bytes = segment_bytes
        self._durable = durable
        self._segment = 0
        self._appender: Appender | None = None

    def _open_next(self) -> Appender:
        if self._appender is not None:
            self._appender.close()
        self._segment += 1
        path = segment_path(self._dir, self.writer_id, self._segment)
        # The appender creates the writer directory and syncs it with the first frame.
        appender = self._fs.open_appender(path)
        if appender.size == 0:
            appender.append(SEGMENT_HEADER)
        self._appender = appender
        return appender

    def append(self, document: dict[str, Any]) -> RecordRef:
        """Append one frame (synced when durable) and return its reference."""
        frame, checksum = encode_frame(document)
        if len(frame) > MAX_FRAME_BYTES:
            # Refused before anything is written: no reader would accept a reference to it.
            raise ValueError(f"a state frame of {len(frame)} bytes exceeds the {MAX_FRAME_BYTES}-byte bound")
        appender = self._appender
        if appender is None or (appender.size >= self._segment_bytes and appender.size > len(SEGMENT_HEADER)):
            appender = self._open_next()
        offset = appender.append(frame)
        if self._durable:
            appender.sync()
        return RecordRef(self.writer_id, self._segment, offset, len(frame), checksum[:8])

    def close(self) -> None:
        if self._appender is not None:
            self._appender.close()
            self._appender = None


class JournalReader:
    """Reads and verifies referenced frames."""

    def __init__(self, fs: Filesystem, journal_dir: str, *, deadline_seconds: float) -> None:
        self._fs = fs
        self._dir = journal_dir
        self._deadline = deadline_seconds

    def read(self, ref: RecordRef | str, *, deadline_seconds: float | None = None) -> dict[str, Any]:
        """The frame's JSON object; raises :class:`FrameDamage`.

        ``deadline_seconds`` replaces the configured visibility deadline for this read:
        ``0`` probes once, for a caller (fsck) that waits out many reads together.
        """
        if isinstance(ref, str):
            try:
                ref = RecordRef.parse(ref)
            except ValueError as error:
                raise FrameDamage("unparseable_name", str(error)) from None
        path = segment_path(self._dir, ref.writer, ref.segment)

        def probe() -> bytes | None:
            if not self._fs.exists(path):
                return None
            data = self._fs.read_range(path, ref.offset, ref.length)
            return data if len(data) == ref.length else None

        try:
            data = self._fs.retry_until(probe, self._deadline if deadline_seconds is None else deadline_seconds)
        except OSError as error:  # a directory or FIFO where the segment belongs, an unreadable file
            raise FrameDamage("missing_segment", f"journal segment {unreadable(path, error)}") from None
        if data is None:
            if not self._fs.exists(path):
                raise FrameDamage("missing_segment", f"journal segment {path} does not exist")
            raise FrameDamage("short_read", f"frame {ref} extends past the end of {path}")
        return decode_frame(data, str(ref), expected_prefix=ref.prefix)

    def iter_segment(self, path: str) -> Iterator[tuple[RecordRef | None, dict[str, Any] | FrameDamage]]:
        """Every frame of one segment in order; each damage is yielded as ``(None, damage)``.

        A frame whose two length fields agree but whose checksum or document is bad
        damages only itself: the walk goes on after it, so a flipped byte does not
        hide every later frame of the segment (fsck's repair looks for them). A torn
        tail or a broken length stops the walk: nothing after it can be found.
        """
        match = re.search(r"/([0-9a-f]{12})/([0-9]+)\.journal$", path)
        if not match:
            return
        writer, segment = match.group(1), int(match.group(2))
        try:
            # The manager's own file, so no size bound; but never through a link and never blocking.
            data = self._fs.read_document(path, limit=None)
        except OSError as error:
            yield None, FrameDamage("missing_segment", f"journal segment {unreadable(path, error)}")
            return
        offset = len(SEGMENT_HEADER)
        if not data.startswith(SEGMENT_HEADER):
            yield None, FrameDamage("checksum_mismatch", f"{path} has no journal header")
            return
        while offset < len(data):
            if offset + _LENGTH.size > len(data):
                yield None, FrameDamage("short_read", f"torn frame at {path}:{offset}")
                return
            (length,) = _LENGTH.unpack_from(data, offset)
            total = length + _OVERHEAD
            chunk = data[offset : offset + total]
            if len(chunk) < total:
                yield None, FrameDamage("short_read", f"torn frame at {path}:{offset}")
                return
            try:
                document = decode_frame(chunk, f"{path}:{offset}", expected_prefix=None)
            except FrameDamage as damage:
                yield None, damage
                if damage.code == "reference_mismatch":  # the lengths disagree: no frame boundary to go on from
                    return
                offset += total
                continue
            prefix = chunk[_LENGTH.size + length : _LENGTH.size + length + 4].hex()
            yield RecordRef(writer, segment, offset, total, prefix), document
            offset += total


def decode_frame(data: bytes, where: str, *, expected_prefix: str | None) -> dict[str, Any]:
    if len(data) < _OVERHEAD:
        raise FrameDamage("short_read", f"frame {where} is {len(data)} bytes")
    (head,) = _LENGTH.unpack_from(data, 0)
    (tail,) = _LENGTH.unpack_from(data, len(data) - _LENGTH.size)
    if head != tail or head + _OVERHEAD != len(data):
        raise FrameDamage("reference_mismatch", f"frame {where} lengths do not match the reference")
    body = data[_LENGTH.size : _LENGTH.size + head]
    checksum = data[_LENGTH.size + head : _LENGTH.size + head + 32]
    if hashlib.sha256(body).digest() != checksum:
        raise FrameDamage("checksum_mismatch", f"frame {where} fails its checksum")
    if expected_prefix is not None and checksum.hex()[:8] != expected_prefix:
        raise FrameDamage("reference_mismatch", f"frame {where} is not the frame the reference names")
    try:
        return codec.decode_object(body, f"frame {where}")
    except codec.DocumentError as error:
        raise FrameDamage("checksum_mismatch", str(error)) from None
