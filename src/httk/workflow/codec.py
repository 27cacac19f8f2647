"""The one place JSON meets the model: canonical bytes and path-naming errors.

Canonical JSON (sorted keys, compact separators, UTF-8, trailing newline for
files) is what makes two writers — Python and Bash, or two managers — produce
the same bytes for the same document. Structured value types go through the one
cattrs converter below; every decoding error names the document and the member.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

T = TypeVar("T")

_converter: Any = None


def converter() -> Any:
    """The one cattrs converter (created on first use: runner-side code never pays its import)."""
    global _converter
    if _converter is None:
        import cattrs

        _converter = cattrs.Converter(forbid_extra_keys=True)
    return _converter


class DocumentError(ValueError):
    """A malformed document; the message is one line naming the file and the member."""

    def __init__(self, document: str, member: str, problem: str) -> None:
        super().__init__(f"{document} @ {member}: {problem}")
        self.document = document
        self.member = member
        self.problem = problem


def dumps(value: Any) -> str:
    """Canonical JSON text without a trailing newline."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any) -> bytes:
    """Canonical JSON file bytes (with the trailing newline)."""
    return (dumps(value) + "\n").encode("utf-8")


class _NotJson(ValueError):
    """A value Python's parser accepts that no JSON document can carry (the message says which)."""


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are accepted by Python's parser but are not JSON, and cannot be re-encoded.
    raise _NotJson(f"{name} is not JSON")


def _finite(text: str) -> float:
    # 1e999 parses as Infinity: a document holding it could never be written back (encode refuses it).
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:40]} is beyond the range of a JSON number")
    return value


#: A ``\uD800``-``\uDFFF`` escape: the only way a decoded string can hold a surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any) -> None:
    """A lone surrogate escape decodes to a string no UTF-8 writer can write back: refuse it on reading."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotJson(f"the string {item[:40]!r} holds a lone surrogate, which is not Unicode") from None


def decode(data: bytes, document: str) -> Any:
    """Parse JSON bytes; a parse error names the document.

    Only values JSON can carry and UTF-8 can write back are accepted: NaN, Infinity,
    a number beyond every float (``1e999``) and a lone surrogate escape are refused
    here, so no reader meets one and no writer fails on one later.
    """
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite)
        if _SURROGATE_ESCAPE.search(data):
            _refuse_lone_surrogates(value)
        return value
    except RecursionError:
        raise DocumentError(document, "$", "nested too deeply") from None
    except UnicodeDecodeError as error:
        raise DocumentError(document, "$", f"not UTF-8 ({error.reason})") from None
    except _NotJson as error:
        raise DocumentError(document, "$", str(error)) from None
    except json.JSONDecodeError as error:
        problem = f"not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        raise DocumentError(document, "$", problem) from None
    except ValueError as error:  # e.g. an integer beyond the interpreter's digit limit
        raise DocumentError(document, "$", str(error).split(";")[0]) from None


def decode_object(data: bytes, document: str) -> dict[str, Any]:
    value = decode(data, document)
    if not isinstance(value, dict):
        raise DocumentError(document, "$", "expected an object")
    return value


def structure(value: Any, cls: type[T], document: str) -> T:
    """Structure ``value`` into ``cls`` with the shared converter; errors name the member."""
    import cattrs

    try:
        return converter().structure(value, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as error:
        member, problem = _first_problem(error)
        raise DocumentError(document, member, problem) from None


def unstructure(value: Any) -> Any:
    return converter().unstructure(value)


def _first_problem(error: BaseException, path: str = "$") -> tuple[str, str]:
    import cattrs

    if isinstance(error, cattrs.BaseValidationError):
        for inner in error.exceptions:
            note = _note(inner)
            return _first_problem(inner, path + note)
        return path, str(error)
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return f"{path}.{sorted(error.extra_fields)[0]}", "unknown member"
    if isinstance(error, KeyError):
        return path, f"missing member {error}"
    return path, str(error) or type(error).__name__


def _note(error: BaseException) -> str:
    for note in getattr(error, "__notes__", ()):
        name = getattr(note, "name", None)
        index = getattr(note, "index", None)
        if name is not None:
            return f".{name}"
        if index is not None:
            return f"[{index}]"
    return ""


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Checked:
    """A tiny member checker for hand-validated documents (job.json, outcome.json)."""

    __slots__ = ("document",)

    def __init__(self, document: str) -> None:
        self.document = document

    def fail(self, member: str, problem: str) -> DocumentError:
        return DocumentError(self.document, member, problem)

    def string(self, obj: dict[str, Any], key: str, path: str, *, optional: bool = False) -> str | None:
        value = obj.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(f"{path}.{key}", f"expected string, got {type_name(value)}")
        return value

    def integer(self, obj: dict[str, Any], key: str, path: str, *, optional: bool = False) -> int | None:
        value = obj.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"expected int, got {type_name(value)}")
        return value

    def obj(self, obj: dict[str, Any], key: str, path: str, *, optional: bool = False) -> dict[str, Any]:
        value = obj.get(key)
        if value is None and optional:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{path}.{key}", f"expected object, got {type_name(value)}")
        return value

    def strings(self, obj: dict[str, Any], key: str, path: str) -> list[str]:
        value = obj.get(key, [])
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(f"{path}.{key}", "expected an array of strings")
        return list(value)


FRAME_FORMAT = "httk-workflow-state-frame"


def frame_to_json(frame: Any) -> dict[str, Any]:
    """A :class:`~httk.workflow.domain.frames.StateFrame` as its journal document."""
    document = unstructure(frame)
    document["format"] = FRAME_FORMAT
    document["format_version"] = 1
    return document


def frame_from_json(document: dict[str, Any]) -> Any:
    """A journal document as a ``StateFrame``; raises :class:`DocumentError` naming the member."""
    from .domain.frames import StateFrame

    if document.get("format") != FRAME_FORMAT or document.get("format_version") != 1:
        raise DocumentError("state frame", "$.format", f"expected {FRAME_FORMAT} version 1")
    values = {key: value for key, value in document.items() if key not in ("format", "format_version")}
    return structure(values, StateFrame, "state frame")
