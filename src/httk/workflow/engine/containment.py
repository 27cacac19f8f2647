"""Fault containment: one job's or one request's handling fails alone, and the manager goes on.

:func:`contained` is the one mechanism: the manager's per-job passes and the
request pass run each item's handling through it, so an unexpected exception of
any type ends in that item's named refusal (a job refused, a request
quarantined) with the reason, logged once by whoever records it. Every step of
the protocol is crash-safe, so abandoning an item midway leaves it as a killed
manager would. ``SystemExit`` (the second signal) and other ``BaseException``s
still end the manager.

:class:`Refusals` keeps the jobs a manager refused, by job key: a job counts
only while its last observation was a refusal, so one refused by a transient
error and handled later is no longer counted or shown by ``job why``.
Spec: 000 "Run" (per-job fault isolation, the closing summary).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from .. import codec
from ..ports import Filesystem
from ..store.markers import Marker

log = logging.getLogger("httk.workflow.manager")
T = TypeVar("T")
F = TypeVar("F")

#: A reason is one log line, whatever the exception carried.
REASON_LIMIT = 1000


def one_line(text: str) -> str:
    """``text`` on one line, bounded."""
    return " ".join(text.split())[:REASON_LIMIT]


def contained(what: str, handler: Callable[[], T], on_fault: Callable[[str], F]) -> T | F | None:
    """``handler()``; when it raises, ``on_fault(reason)`` records the item's refusal and its result is returned.

    ``reason`` names ``what`` failed, the exception type and its message. A fault
    handler that fails too is logged here, with both causes, and ``None`` returned.
    """
    try:
        return handler()
    except Exception as error:
        reason = one_line(f"{what} failed: {type(error).__name__}: {error}")
        try:
            return on_fault(reason)
        except Exception as second:
            log.error("%s; recording that failed too: %s: %s", reason, type(second).__name__, second)
            return None


class Refusals:
    """The jobs one manager refuses (job key -> reason), each recorded under ``directory`` for ``job why``.

    A refusal stands until an observation of the job ends without one and finds it
    moved on: this manager made it progress, or it is at a later generation than the
    refusal saw (another manager moved it). An observation that only skips the job
    (its own claim left by a failed launch, say) leaves the refusal standing.
    """

    def __init__(self, fs: Filesystem, directory: str, now: Callable[[], float]) -> None:
        self.fs = fs
        self.directory = directory
        self.now = now
        self.reasons: dict[str, str] = {}
        #: How many refusals were made, so an observation can tell whether it ended in one.
        self.count = 0
        self._generation: dict[str, int] = {}

    def refuse(self, marker: Marker, reason: str, *, generation: int | None = None) -> None:
        """Record that ``marker``'s job (at ``generation``, by default the marker's) is refused.

        Logged and written once per reason.
        """
        key = str(marker.key)
        reason = one_line(reason)
        self.count += 1
        self._generation[key] = marker.generation if generation is None else generation
        if self.reasons.get(key) == reason:
            return
        self.reasons[key] = reason
        log.error("job %s: refused: %s", key, reason)
        note = {"job_key": key, "kind": marker.kind.value, "reason": reason, "at": self.now()}
        try:
            # Evidence, not protocol state: no fsync; a failure to record must not become a fault itself.
            self.fs.write_atomic(f"{self.directory}/{key}.json", codec.encode(note), durable=False)
        except OSError as error:
            log.warning("job %s: could not record the refusal: %s", key, error)

    def observed(self, marker: Marker, *, progressed: bool) -> None:
        """An observation of ``marker``'s job ended without a refusal; it clears one if the job moved on."""
        key = str(marker.key)
        standing = self._generation.get(key)
        if standing is not None and (progressed or marker.generation > standing):
            self.forget(key)

    def forget(self, key: str) -> None:
        """The job is no longer refused: drop it and its note."""
        self._generation.pop(key, None)
        if self.reasons.pop(key, None) is None:
            return
        log.info("job %s: no longer refused", key)
        try:
            self.fs.remove(f"{self.directory}/{key}.json")
        except OSError:
            pass  # never written, or already gone: the note is evidence only
