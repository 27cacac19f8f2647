"""The versioned checker protocol: the event lines a checker reads and the result lines it writes.

A checker of :class:`~httk.workflow.supervision.ProcessSupervisor` reads one
``httk-workflow-checker-event`` v1 JSON line per line of supervised output on its
stdin and answers with ``httk-workflow-checker-result`` v1 lines on its stdout
(docs/runtime_helpers.md "Running programs"). Owns :func:`event_line` and
:func:`parse_result`. Invariant: a result line is either exactly valid (known
members only, ``action`` continue or stop) or a problem naming what is wrong;
nothing in between is guessed.
"""

from __future__ import annotations

from typing import Any

from httk.workflow import codec

EVENT_FORMAT = "httk-workflow-checker-event"
RESULT_FORMAT = "httk-workflow-checker-result"
FORMAT_VERSION = 1


def event_line(source: str, line: str, time: float) -> bytes:
    """The event for one ``line`` of ``source`` (stdout, stderr or a followed file) at epoch ``time``."""
    event = {"format": EVENT_FORMAT, "format_version": FORMAT_VERSION, "source": source, "line": line, "time": time}
    return (codec.dumps(event) + "\n").encode("utf-8")


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
