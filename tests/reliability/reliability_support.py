"""The machinery of the reliability campaign (tests/reliability): profiles, seeds, deadlines,
the campaign loop and its report, and the document mutations (fuzz_bench.py holds the workspace bench).

A profile (``HTTK_RELIABILITY_PROFILE``: ``ci``, the default, or ``soak``) sets how many
fuzz cases and kills run. Every case draws from ``random.Random(f"{kind}:{seed}")``;
``HTTK_RELIABILITY_SEED=N`` runs only case ``N`` of each kind, which reproduces a
finding exactly (the in-memory ports are deterministic). A case runs under a
SIGALRM deadline, so a blocking read of a real FIFO, or a loop, is a finding and
not a hung suite; the in-memory filesystem raises ``SimulatedHang`` for the same
read. See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import random
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from httk.workflow.cli.render import ANTICIPATED
from httk.workflow.ports import DOCUMENT_LIMIT

PROFILES = {"ci": {"fuzz": 1000, "kills": 10}, "soak": {"fuzz": 10000, "kills": 100}}
PROFILE = os.environ.get("HTTK_RELIABILITY_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise RuntimeError(f"HTTK_RELIABILITY_PROFILE={PROFILE!r}: use one of {', '.join(PROFILES)}")
FUZZ_CASES = PROFILES[PROFILE]["fuzz"]
KILLS = PROFILES[PROFILE]["kills"]
BASE_SEED = int(os.environ.get("HTTK_RELIABILITY_BASE_SEED", "1"))
ONLY_SEED = os.environ.get("HTTK_RELIABILITY_SEED")
#: Seconds one case may take before it counts as hung.
CASE_SECONDS = 10.0
ROOT_DOCS = Path(__file__).resolve().parents[2] / "docs"


def case_seeds(share: float) -> list[int]:
    """The seeds of one kind's cases: ``share`` of the profile's cases, or the one ``HTTK_RELIABILITY_SEED``."""
    if ONLY_SEED is not None:
        return [int(ONLY_SEED)]
    return [BASE_SEED + index for index in range(max(1, round(FUZZ_CASES * share)))]


class CaseHung(BaseException):
    """A case outlived its deadline (a BaseException, so no ``except Exception`` in the code under test eats it)."""


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`CaseHung` in the main thread when ``seconds`` pass (interrupts a blocking ``open``)."""

    def expired(signum: int, frame: Any) -> None:
        raise CaseHung(f"{what} did not finish within {seconds:.0f}s (a blocking read or an endless loop)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@attrs.frozen
class Finding:
    seed: int
    mutation: str
    error: str
    where: str


def where(error: BaseException) -> str:
    """The innermost frame of httk.workflow in the traceback (else the innermost one): ``file:line (function)``."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if "/httk/workflow/" in frame.filename]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    name = frame.filename.split("/src/")[-1].split("/tests/")[-1]
    return f"{name}:{frame.lineno} ({frame.name})"


def _cases(kind: str, seeds: list[int], body: Callable[[random.Random, list[str]], None],
           findings: list[Finding]) -> None:
    for seed in seeds:
        rng = random.Random(f"{kind}:{seed}")
        notes: list[str] = []
        try:
            with deadline(CASE_SECONDS, f"{kind} case {seed}"):
                body(rng, notes)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - every escape is a finding, SystemExit included
            text = " ".join(f"{type(error).__name__}: {error}".split())
            findings.append(Finding(seed, "; ".join(notes), text, where(error)))


def campaign(kind: str, test: str, share: float, body: Callable[[random.Random, list[str]], None]) -> None:
    """Run ``body(rng, notes)`` for each seed of ``kind``; fail listing every case that broke an invariant."""
    seeds = case_seeds(share)
    findings: list[Finding] = []
    started = time.monotonic()
    # Refusals are logged at error level by design; thousands of them would only bury the findings.
    quiet = logging.getLogger("httk.workflow")
    level, quiet.level = quiet.level, logging.CRITICAL + 1
    try:
        _cases(kind, seeds, body, findings)
    finally:
        quiet.setLevel(level)
    elapsed = time.monotonic() - started
    print(f"reliability fuzz {kind}: {len(seeds)} cases, {len(findings)} broke an invariant, {elapsed:.1f}s "
          f"(profile {PROFILE}, base seed {BASE_SEED})")
    if findings:
        groups: dict[str, list[Finding]] = {}
        for finding in findings:
            groups.setdefault(f"{finding.where} {finding.error[:90]}", []).append(finding)
        lines = [f"{len(findings)} of {len(seeds)} {kind} cases broke an invariant ({len(groups)} distinct):"]
        for group in sorted(groups.values(), key=len, reverse=True)[:12]:
            first = group[0]
            lines.append(f"- {len(group)}x seed {first.seed} [{first.where}]: {first.error[:400]}\n"
                         f"    mutation: {first.mutation[:300]}")
        lines.append(f"reproduce one: HTTK_RELIABILITY_SEED=<seed> .venv/bin/pytest "
                     f"tests/reliability/test_fuzz_documents.py -k {test}")
        raise AssertionError("\n".join(lines))


# -- mutations -------------------------------------------------------------------------------------

@attrs.frozen
class Raw:
    """JSON text spliced into a document as it is: NaN, 1e999, 5000 digits, deep nesting, lone surrogates."""

    text: str


def render(document: Any) -> bytes:
    """``document`` as JSON bytes, :class:`Raw` values written verbatim (non-canonical on purpose)."""
    raws: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {key: swap(item) for key, item in value.items()}
        if isinstance(value, list):
            return [swap(item) for item in value]
        return value

    text = json.dumps(swap(document), ensure_ascii=False, allow_nan=True)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}\x00"), raw, 1)
    return text.encode("utf-8", "surrogatepass") + b"\n"


NUMBERS: tuple[Any, ...] = (
    10**250, 2**40, 2**63, -(2**63) - 1, -1, 0, 1, 1.5, -0.0, 1e308, True, False,
    Raw("1e999"), Raw("-1e999"), Raw("NaN"), Raw("Infinity"), Raw("9" * 5000),
)
STRINGS: tuple[Any, ...] = (
    "", "a\x00b", "\x00", "tab\there", "new\nline", "\x1b[2J", "\u202ertl", "\u2028", "../../outside",
    "/etc/passwd", ".httk-workflow", "a/../../b", ".", "..", "x" * 300, "é😀", " spaced ", "UPPER",
    "p", "main", "succeeded", "op-0001", Raw('"\\ud800"'),
)
SHAPES: tuple[Any, ...] = (None, [], {}, [None], {"": None}, [[[]]], ["a", "a"], {"x": {"y": {"z": []}}})
CONTROL = ("\x00", "\x01", "\n", "\r", "\x7f", "\x1f", "\u0085")
UNKNOWN_KEYS = ("unknown", "x\x00y", "", "Format", "format_version ", "__proto__", "k" * 200)


def _slots(value: Any, path: str = "$") -> Iterator[tuple[Any, Any, str]]:
    """``(container, key, path)`` for every member and element below ``value``."""
    if isinstance(value, dict):
        for key in list(value):
            yield value, key, f"{path}.{key}"
            yield from _slots(value[key], f"{path}.{key}")
    elif isinstance(value, list):
        for index in range(len(value)):
            yield value, index, f"{path}[{index}]"
            yield from _slots(value[index], f"{path}[{index}]")


def _short(value: Any) -> str:
    text = value.text if isinstance(value, Raw) else repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


def hostile(rng: random.Random) -> Any:
    pool = rng.choice((NUMBERS, STRINGS, SHAPES))
    return copy.deepcopy(rng.choice(pool))


def _retyped(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {str(index): item for index, item in enumerate(value)}
    if isinstance(value, dict):
        return [value]
    return "null"


def mutate_tree(rng: random.Random, document: Any, notes: list[str], rounds: int | None = None) -> Any:
    """A copy of ``document`` with 1-3 structural mutations, each described in ``notes``."""
    document = copy.deepcopy(document)
    for _ in range(rounds or rng.randint(1, 3)):
        slots = list(_slots(document))
        objects = [document] if isinstance(document, dict) else []
        objects += [container[key] for container, key, _ in slots if isinstance(container[key], dict)]
        strings = [slot for slot in slots if isinstance(slot[0][slot[1]], str)]
        operation = rng.choice(("set", "set", "retype", "drop", "extra", "control", "huge", "nest", "sibling"))
        if not slots or (operation == "extra" and objects):
            target = rng.choice(objects) if objects else document
            if isinstance(target, dict):
                key, value = rng.choice(UNKNOWN_KEYS), hostile(rng)
                target[key] = value
                notes.append(f"add unknown member {key!r} = {_short(value)}")
                continue
        if not slots:
            notes.append("nothing to mutate")
            return document
        container, key, path = rng.choice(slots)
        if operation == "drop" and isinstance(container, dict):
            del container[key]
            notes.append(f"drop {path}")
        elif operation == "retype":
            container[key] = _retyped(container[key])
            notes.append(f"retype {path} to {type(container[key]).__name__}")
        elif operation == "control" and strings:
            container, key, path = rng.choice(strings)
            text, char = container[key], rng.choice(CONTROL)
            at = rng.randint(0, len(text))
            container[key] = text[:at] + char + text[at:]
            notes.append(f"insert {char!r} into {path}")
        elif operation == "huge" and strings:
            container, key, path = rng.choice(strings)
            size = DOCUMENT_LIMIT + 1 if rng.random() < 0.05 else rng.choice((4096, 1 << 20))
            container[key] = "x" * size
            notes.append(f"{path} = a string of {size} characters")
        elif operation == "nest":
            depth = rng.choice((64, 1000, 100000))
            container[key] = Raw("[" * depth + render(container[key]).decode("utf-8", "surrogatepass").strip()
                                 + "]" * depth)
            notes.append(f"nest {path} in {depth} arrays")
        elif operation == "sibling":
            _, other_key, other_path = rng.choice(slots)
            other = next(c[k] for c, k, p in _slots(document) if p == other_path)
            container[key] = copy.deepcopy(other)
            notes.append(f"{path} = the value of {other_path}")
        else:
            container[key] = hostile(rng)
            notes.append(f"set {path} = {_short(container[key])}")
    return document


def mutate_bytes(rng: random.Random, data: bytes, notes: list[str]) -> bytes:
    """One byte-level mutation of a rendered document."""
    operation = rng.choice(("truncate", "flip", "utf8", "replace", "bom", "trailing", "duplicate", "twice"))
    if operation == "truncate":
        at = rng.randrange(len(data))
        notes.append(f"truncate at byte {at}")
        return data[:at]
    if operation == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
        notes.append("flip bits")
        return bytes(out)
    if operation == "utf8":
        at = rng.randrange(len(data))
        notes.append(f"invalid UTF-8 at byte {at}")
        return data[:at] + b"\xff\xfe\xc0" + data[at:]
    if operation == "replace":
        chosen = rng.choice((b"", b" \n", b"null", b"[]", b'"text"', b"42", b"{", b"\x00" * 16, b"[" * 200000))
        notes.append(f"replace the bytes with {chosen[:20]!r}")
        return chosen
    if operation == "bom":
        notes.append("UTF-8 byte order mark")
        return b"\xef\xbb\xbf" + data
    if operation == "trailing":
        notes.append("trailing garbage")
        return data.rstrip() + b" }garbage"
    if operation == "duplicate":
        notes.append('duplicate member "format" (the last one wins)')
        body = data.rstrip()
        return body[:-1] + b',"format":1}' if body.endswith(b"}") else body
    notes.append("the document twice")
    return data + data


def mutate_document(rng: random.Random, document: Any, notes: list[str]) -> bytes:
    """Structural mutations, then (one time in four) a byte-level one."""
    data = render(mutate_tree(rng, document, notes))
    if rng.random() < 0.25:
        data = mutate_bytes(rng, data, notes)
    return data


#: What can stand where a document belongs instead of a small regular file.
SPECIALS = ("directory", "fifo", "symlink-inside", "symlink-outside", "dangling-symlink", "symlink-loop",
            "oversized", "empty", "socket")


@attrs.frozen
class Special:
    what: str
    valid: bytes = b"{}\n"  # what a symlink-inside points at: the valid document


def designed(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(result, None)``, or ``(None, error)`` for an anticipated error with a one-line message; else raises."""
    try:
        return call(), None
    except ANTICIPATED as error:
        assert str(error).strip() and "\n" not in str(error).strip(), f"a multi-line error: {str(error)[:200]!r}"
        return None, error


def documented_codes() -> set[str]:
    """The damage codes the user docs name (fsck's "Checking and repairing", the protocol's "Damage codes")."""
    codes: set[str] = set()
    sections = (("workflow_cli.md", "## Checking and repairing"), ("workflow_filesystem_api.md", "## Journal"))
    for page, heading in sections:
        text = (ROOT_DOCS / page).read_text(encoding="utf-8")
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        codes |= set(re.findall(r"`([a-z]+(?:_[a-z]+)+)`", section))
    return codes
