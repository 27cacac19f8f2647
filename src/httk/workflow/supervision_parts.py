"""The parts of supervised execution below the loop: line splitting, followed files,
the versioned checker protocol, and process-group signalling.

:mod:`httk.workflow.supervision` composes them into :class:`ProcessSupervisor`.
Spec: the ``supervision.ProcessSupervisor`` row of the authoring parity table.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

from httk.workflow import codec

RESULT_FORMAT = "httk-workflow-checker-result"
FORMAT_VERSION = 1
_MAX_LINE = 1 << 20  # a longer "line" is cut, so a newline-free stream cannot grow a buffer forever
_FOLLOW_CHUNK = 1 << 22


class Lines:
    """Split a byte stream into text lines (UTF-8, invalid bytes replaced, line ending stripped)."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self.buffer += data
        lines = []
        while (index := self.buffer.find(b"\n")) >= 0 or len(self.buffer) >= _MAX_LINE:
            end = index if 0 <= index < _MAX_LINE else _MAX_LINE
            lines.append(self.buffer[:end].decode("utf-8", "replace").rstrip("\r"))
            del self.buffer[: end + 1 if end == index else end]
        return lines

    def flush(self) -> list[str]:
        lines = [self.buffer.decode("utf-8", "replace").rstrip("\r")] if self.buffer else []
        self.buffer.clear()
        return lines


class Follower:
    """Tail of one followed file: new bytes since the run started, or all of it if created later."""

    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path, self.lines = name, path, Lines()
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        with contextlib.suppress(OSError):
            stat = path.stat()
            self.identity, self.offset = (stat.st_dev, stat.st_ino), stat.st_size

    def poll(self) -> tuple[bool, list[str]]:
        """(whether the file grew, the complete new lines)."""
        try:
            with open(self.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                lines: list[str] = []
                if (stat.st_dev, stat.st_ino) != self.identity or stat.st_size < self.offset:
                    # Replaced or truncated (a restarted program): everything in it is new.
                    lines, self.identity, self.offset = self.lines.flush(), (stat.st_dev, stat.st_ino), 0
                if stat.st_size <= self.offset:
                    return False, lines
                handle.seek(self.offset)
                data = handle.read(_FOLLOW_CHUNK)
        except OSError:
            return False, []
        self.offset += len(data)
        return bool(data), lines + self.lines.feed(data)


class Checker:
    """One running checker: its pipes, the events not yet written, and the results read back."""

    def __init__(self, name: str, argv: tuple[str, ...], process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        self.name, self.argv, self.process = name, argv, process
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr
        os.set_blocking(self.stdin.fileno(), False)
        self.pending = bytearray()
        self.lines = Lines()
        self.stderr_tail = bytearray()
        self.results: list[dict[str, Any]] = []
        self.continued = self.dropped = 0
        self.writing = self.broken = self.closing = False
        self.stdout_open = self.stderr_open = self.stdin_open = True
        self.exit_seen = False


def parse_result(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """(problem, result) for one checker output line; exactly one is ``None``."""
    try:
        value = codec.decode_object(line.encode("utf-8"), "checker result")
    except codec.DocumentError as error:
        return error.problem, None
    if value.get("format") != RESULT_FORMAT or value.get("format_version") != FORMAT_VERSION:
        return f"not an {RESULT_FORMAT} version {FORMAT_VERSION} line", None
    unknown = sorted(set(value) - {"format", "format_version", "action", "reason", "diagnosis"})
    if unknown:
        return f"unknown member {unknown[0]!r}", None
    if value.get("action") not in ("continue", "stop"):
        return f"action must be 'continue' or 'stop', got {value.get('action')!r}", None
    reason, diagnosis = value.get("reason", ""), value.get("diagnosis", {})
    if not isinstance(reason, str) or not isinstance(diagnosis, dict):
        return "reason must be a string and diagnosis an object", None
    return None, {"action": value["action"], "reason": reason, "diagnosis": diagnosis}


def exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it (its pid keeps the group id ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def group_alive(pgid: int) -> bool:
    """Whether a non-zombie process of group ``pgid`` remains (zombies cannot run or write)."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        # comm may contain spaces and ')': the fields resume after the last ')'.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def signal_group(pgid: int, signum: int) -> None:
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to signal process group {pgid}")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def forward(fd: int, data: bytes) -> None:
    """Copy output to our own stdout/stderr, the destination when no file was named."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:
            return  # our own stream is gone; the checkers still saw the line
