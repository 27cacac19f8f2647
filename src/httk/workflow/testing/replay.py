"""ReplayTransport: a RemoteTransport that answers from recorded command output; RecordingTransport makes one.

A recording is a list of :class:`Exchange` — the argv run, the stdin it got, what
it printed and its exit status — kept as one JSON document
(``{"format": "httk-workflow-replay", "format_version": 1, "source", "exchanges"}``).
:class:`ReplayTransport` answers each command with the next exchange and raises
:class:`ReplayMismatch` (an ``AssertionError``) the moment a command is not the
one recorded, so a batch system replayed on its scheduler's real output is held
to the exact argv it ran then. :class:`RecordingTransport` wraps a real transport
and records what passes through it: run your adapter against the real scheduler
once, save :meth:`RecordingTransport.document`, and the contract suite
(tests/contract, docs/integrators.md) replays it from then on. Only ``run`` and
``stream`` are recorded: batch systems use nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..ports import CommandResult, OutputSink, RemoteTransport, TransportError

REPLAY_FORMAT = "httk-workflow-replay"


class ReplayMismatch(AssertionError):
    """A command was not the one the recording holds next (or none was left)."""


@attrs.frozen
class Exchange:
    """One recorded command and its answer; ``error`` replays a :class:`TransportError` instead."""

    argv: tuple[str, ...]
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    #: The stdin the command got (``None``: not checked on replay).
    input: str | None = None
    error: str | None = None

    @classmethod
    def from_document(cls, item: Mapping[str, Any]) -> Exchange:
        unknown = set(item) - {"argv", "returncode", "stdout", "stderr", "input", "error"}
        if unknown or not isinstance(item.get("argv"), list) or not all(isinstance(w, str) for w in item["argv"]):
            raise ValueError(f"not an exchange (argv: a list of strings; unknown members {sorted(unknown)}): {item}")
        return cls(tuple(item["argv"]), int(item.get("returncode", 0)), str(item.get("stdout", "")),
                   str(item.get("stderr", "")), item.get("input"), item.get("error"))

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"argv": list(self.argv), "returncode": self.returncode,
                                    "stdout": self.stdout, "stderr": self.stderr}
        if self.input is not None:
            document["input"] = self.input
        if self.error is not None:
            document["error"] = self.error
        return document


def load_exchanges(document: Mapping[str, Any]) -> list[Exchange]:
    """The exchanges of a replay document (or of any object with an ``exchanges`` list)."""
    if document.get("format", REPLAY_FORMAT) != REPLAY_FORMAT:
        raise ValueError(f"not a {REPLAY_FORMAT} document: format {document.get('format')!r}")
    return [Exchange.from_document(item) for item in document.get("exchanges", [])]


class ReplayTransport:
    """Answers ``run``/``stream`` from recorded exchanges, in order, checking each argv (and stdin when recorded)."""

    def __init__(self, exchanges: Iterable[Exchange]) -> None:
        self.pending = list(exchanges)
        #: Every command asked for: ``(argv, input)``.
        self.calls: list[tuple[list[str], str | None]] = []
        self.closed = 0

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ReplayTransport:
        return cls(load_exchanges(document))

    def __repr__(self) -> str:
        return f"ReplayTransport({len(self.pending)} pending)"

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        exchange = self._next(argv, input)
        return CommandResult(exchange.returncode, exchange.stdout, exchange.stderr)

    def stream(self, argv: Sequence[str], *, out: OutputSink, err: OutputSink, timeout: float | None = None) -> int:
        exchange = self._next(argv, None)
        if exchange.stdout:
            out(exchange.stdout.encode())
        if exchange.stderr:
            err(exchange.stderr.encode())
        return exchange.returncode

    def put(self, local: str, remote: str) -> None:
        raise ReplayMismatch(f"a replay holds command output only; put {local} -> {remote} was not recorded")

    def get(self, remote: str, local: str) -> None:
        raise ReplayMismatch(f"a replay holds command output only; get {remote} -> {local} was not recorded")

    def close(self) -> None:
        self.closed += 1

    def assert_done(self) -> None:
        """Every recorded exchange was asked for."""
        if self.pending:
            first = list(self.pending[0].argv)
            raise ReplayMismatch(f"{len(self.pending)} recorded command(s) never ran, the first {first}")

    def _next(self, argv: Sequence[str], input: str | None) -> Exchange:
        words = [str(word) for word in argv]
        self.calls.append((words, input))
        if not self.pending:
            raise ReplayMismatch(f"no recorded command left for {words}")
        exchange = self.pending.pop(0)
        if list(exchange.argv) != words:
            raise ReplayMismatch(f"ran {words}, the recording holds {list(exchange.argv)}")
        if exchange.input is not None and exchange.input != input:
            raise ReplayMismatch(f"{words[0]} got stdin {input!r}, the recording holds {exchange.input!r}")
        if exchange.error is not None:
            raise TransportError(exchange.error)
        return exchange


class RecordingTransport:
    """Wraps a real transport and records each ``run``/``stream`` as an :class:`Exchange`."""

    def __init__(self, inner: RemoteTransport) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        words = tuple(str(word) for word in argv)
        try:
            result = self.inner.run(words, input=input, timeout=timeout)
        except TransportError as error:
            self.exchanges.append(Exchange(words, 0, "", "", input, str(error)))
            raise
        self.exchanges.append(Exchange(words, result.returncode, result.stdout, result.stderr, input))
        return result

    def stream(self, argv: Sequence[str], *, out: OutputSink, err: OutputSink, timeout: float | None = None) -> int:
        words = tuple(str(word) for word in argv)
        seen: dict[str, list[bytes]] = {"out": [], "err": []}

        def tee(name: str, sink: OutputSink) -> OutputSink:
            def hand(data: bytes) -> None:
                seen[name].append(data)
                sink(data)

            return hand

        code = self.inner.stream(words, out=tee("out", out), err=tee("err", err), timeout=timeout)
        text = {name: b"".join(chunks).decode("utf-8", "replace") for name, chunks in seen.items()}
        self.exchanges.append(Exchange(words, code, text["out"], text["err"]))
        return code

    def put(self, local: str, remote: str) -> None:
        self.inner.put(local, remote)

    def get(self, remote: str, local: str) -> None:
        self.inner.get(remote, local)

    def close(self) -> None:
        self.inner.close()

    def document(self, source: str) -> dict[str, Any]:
        """The recording as a replay document; ``source`` says where and against what it was made."""
        return {"format": REPLAY_FORMAT, "format_version": 1, "source": source,
                "exchanges": [exchange.to_document() for exchange in self.exchanges]}

    def dumps(self, source: str) -> str:
        return json.dumps(self.document(source), indent=2) + "\n"
