"""The one place JSON meets the model: canonical bytes and path-naming errors.

Canonical JSON (sorted keys, compact separators, UTF-8, trailing newline for
files) is what makes two writers — Python and Bash, or two managers — produce
the same bytes for the same document. Every on-disk document is a frozen attrs
record that the one cattrs converter below structures (:func:`structure`,
:func:`read`) and unstructures (:func:`unstructure`): a record's ``FORMAT``
(:class:`Format`) is checked and written here, an unknown member is refused, and
every error is one line naming the document and the member's path from cattrs'
``transform_error`` (``job.json @ $.retry_policy.maximum_total_attempts: expected
int, got string``). Only this module imports cattrs, and only on first use.
"""

from __future__ import annotations

import enum
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

_converter: Any = None


class Format(NamedTuple):
    """A document's ``format`` name and ``format_version``: a record's ``FORMAT`` class variable.

    Defined once beside its record; :func:`structure` checks it and :func:`unstructure` writes it.
    (Not an attrs class: ``calc`` imports this module and should not pay for attrs.)
    """

    name: str
    version: int = 1


class Problem(ValueError):
    """What a structure hook refuses; ``member`` names a member below the value's own path."""

    def __init__(self, problem: str, member: str = "") -> None:
        super().__init__(problem)
        self.member = member


def converter() -> Any:
    """The one cattrs converter (created on first use: ``calc`` and ``run`` never pay its import).

    Strict: a JSON value of the wrong type is refused (cattrs would turn ``5`` into ``"5"``),
    an unknown member of a record is refused, and ``Annotated[base, check, ...]`` runs each
    domain ``check`` on the structured value, its ``ValueError`` becoming the problem.
    """
    global _converter
    if _converter is None:
        import attrs
        import cattrs

        made = cattrs.Converter(forbid_extra_keys=True)
        # By class: cattrs dispatches primitives by class before any predicate, subclasses (a str
        # Enum such as StateKind) included, which _strict makes into their members.
        for base, name in ((str, "string"), (int, "int"), (bool, "boolean")):
            made.register_structure_hook(base, _strict(base, name))
        made.register_structure_hook(float, _number)
        made.register_structure_hook_func(_is_json_object, _json_object)
        made.register_structure_hook_func(_is_strings, _strings)
        made.register_structure_hook_factory(_is_array, lambda kind: _array(made, kind))
        made.register_structure_hook_factory(attrs.has, lambda cls: _record(made, cls))
        made.register_structure_hook_factory(_is_checked, lambda kind: _checked(made, kind))
        made.register_structure_hook_factory(_is_optional, lambda kind: _optional(made, kind))
        made.register_unstructure_hook_factory(_has_omitted, lambda kind: _omitting(made, kind))
        _converter = made
    return _converter


def _strict(base: type, name: str) -> Callable[[Any, Any], Any]:
    def structure(value: Any, kind: Any) -> Any:
        if kind is base and type(value) is base:  # nearly every value: the plain type, not an Enum member
            return value
        # bool is an int in Python and never one in a document.
        if not isinstance(value, base) or (base is int and isinstance(value, bool)):
            raise Problem(f"expected {name}, got {type_name(value)}")
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            # A StrEnum is a str: this hook serves it too, and must return its member (StateKind, not "ready").
            try:
                return kind(value)
            except ValueError:
                raise Problem(f"expected one of {', '.join(str(item.value) for item in kind)}") from None
        return value

    return structure


def _number(value: Any, _kind: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Problem(f"expected number, got {type_name(value)}")
    return float(value)


def _is_json_object(kind: Any) -> bool:
    return typing.get_origin(kind) in (dict, Mapping) and typing.get_args(kind) == (str, Any)


def _is_strings(kind: Any) -> bool:
    return kind in (tuple[str, ...], list[str])


def _json_object(value: Any, _kind: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Problem(f"expected object, got {type_name(value)}")
    return value


def _strings(value: Any, kind: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Problem("expected an array of strings")
    return tuple(value) if typing.get_origin(kind) is tuple else list(value)


def _is_array(kind: Any) -> bool:
    # An array of records; an array of strings has its own hook (_strings).
    return (typing.get_origin(kind) is tuple and len(typing.get_args(kind)) == 2
            and typing.get_args(kind)[1] is ... and not _is_strings(kind))


def _guarded(inner: Callable[[Any, Any], Any], kind: Any, json_type: type, expected: str) -> Callable[[Any, Any], Any]:
    """cattrs' structure function ``inner`` of ``kind``, behind a check that it got a JSON ``expected``.

    Unguarded, cattrs would iterate a string, or an object's keys, as if it were an array,
    and read a record's members off whatever it was handed.
    """

    def structure(value: Any, _kind: Any) -> Any:
        if not isinstance(value, json_type):
            raise Problem(f"expected {expected}, got {type_name(value)}")
        return inner(value, kind)

    return structure


def _array(made: Any, kind: Any) -> Callable[[Any, Any], Any]:
    """cattrs' structure function of ``tuple[X, ...]``, behind a check that it got an array."""
    from cattrs.cols import homogenous_tuple_structure_factory

    return _guarded(homogenous_tuple_structure_factory(kind, made), kind, list, "array")


def _record(made: Any, cls: type) -> Callable[[Any, Any], Any]:
    """cattrs' generated structure function of an attrs record, behind a check that it got an object."""
    from cattrs.gen import make_dict_structure_fn

    return _guarded(make_dict_structure_fn(cls, made), cls, dict, "object")


def _is_optional(kind: Any) -> bool:
    """``X | None`` of one ``X``: cattrs would look the hook of ``X`` up again at every value."""
    arguments = typing.get_args(kind)
    return (typing.get_origin(kind) in (typing.Union, types.UnionType) and len(arguments) == 2
            and type(None) in arguments)


def _optional(made: Any, kind: Any) -> Callable[[Any, Any], Any]:
    """The structure function of ``X | None``: ``None``, or ``X``'s hook, found once."""
    inner_kind = next(argument for argument in typing.get_args(kind) if argument is not type(None))
    found: list[Callable[[Any, Any], Any]] = []

    def structure(value: Any, _kind: Any) -> Any:
        if value is None:
            return None
        if not found:  # on the first value: a member no document gives a value needs no hook
            found.append(made.get_structure_hook(inner_kind))
        return found[0](value, inner_kind)

    return structure


def _is_checked(kind: Any) -> bool:
    return typing.get_origin(kind) is typing.Annotated


def _checked(made: Any, kind: Any) -> Callable[[Any, Any], Any]:
    base, *checks = typing.get_args(kind)
    inner = made.get_structure_hook(base)

    def structure(value: Any, _kind: Any) -> Any:
        result = inner(value, base)
        for check in checks:
            try:
                check(result)
            except ValueError as error:
                raise Problem(str(error)) from None
        return result

    return structure


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


def json_or_text(text: str) -> Any:
    """``text`` as a JSON value when it parses as one (:func:`decode`'s rules), otherwise ``text`` itself.

    How a value typed as text becomes typed: ``2`` the number, ``true`` a boolean,
    ``["a"]`` an array, ``"alpha"`` and ``alpha`` both the string alpha, ``007`` and
    ``NaN`` strings (not JSON). Used for ``NAME=VALUE`` in Bash, ``HTTK_<NAME>``
    settings in ``Attempt.setting`` and ``job new --input``.
    """
    try:
        return decode(text.encode("utf-8"), "value")
    except DocumentError:
        return text


def decode_object(data: bytes, document: str) -> dict[str, Any]:
    value = decode(data, document)
    if not isinstance(value, dict):
        raise DocumentError(document, "$", "expected an object")
    return value


def structure(value: Any, cls: type[T], document: str) -> T:
    """Structure ``value`` into ``cls`` with the shared converter; errors name the member.

    A record with a ``FORMAT`` (:class:`Format`) class variable is a whole document: its
    ``format`` and ``format_version`` members are checked first and are not record fields.
    """
    import cattrs

    expected = getattr(cls, "FORMAT", None)
    if isinstance(expected, Format):
        value = _strip_format(value, expected, document)
    made = converter()
    try:
        return made.structure(value, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as error:
        messages = cattrs.transform_error(error, format_exception=_format_problem)
        member, problem = _split(messages[0] if messages else f"{error} @ $")
        raise DocumentError(document, member, problem) from None


def read(data: bytes, cls: type[T], document: str) -> T:
    """Parse JSON bytes and structure them into ``cls`` (:func:`decode`, then :func:`structure`)."""
    return structure(decode(data, document), cls, document)


def unstructure(value: Any) -> Any:
    """The JSON value of a record; a record with a ``FORMAT`` gets its ``format`` members too."""
    document = converter().unstructure(value)
    expected = getattr(type(value), "FORMAT", None)
    if isinstance(expected, Format):
        document = {"format": expected.name, "format_version": expected.version, **document}
    return document


def _strip_format(value: Any, expected: Format, document: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DocumentError(document, "$", "expected an object")
    if value.get("format") != expected.name:
        raise DocumentError(document, "$.format", f"expected {expected.name!r}")
    version = value.get("format_version")
    if type(version) is not int or version != expected.version:
        raise DocumentError(document, "$.format_version", f"expected {expected.version}")
    return {key: item for key, item in value.items() if key not in ("format", "format_version")}


#: Separates a member below the reported path from the problem in a formatted message.
_BELOW = "\x1f"


def _format_problem(error: BaseException, _kind: Any) -> str:
    """cattrs' message hook: today's wording (``unknown member; known: …``), not a type's repr."""
    import cattrs

    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        import attrs

        known = {field.name for field in attrs.fields(error.cl)}
        if isinstance(getattr(error.cl, "FORMAT", None), Format):
            known |= {"format", "format_version"}
        return f"{sorted(error.extra_fields)[0]}{_BELOW}unknown member; known: {', '.join(sorted(known))}"
    if isinstance(error, Problem):
        return f"{error.member}{_BELOW}{error}"
    if isinstance(error, KeyError):
        return "missing member"
    return str(error) or type(error).__name__


def _split(message: str) -> tuple[str, str]:
    """``(member path, problem)`` from one ``transform_error`` line (``problem @ $.path``)."""
    problem, _, path = message.rpartition(" @ $")
    below, _, problem = problem.rpartition(_BELOW)
    member = "$" + path
    if below:
        member += below if below.startswith("[") else f".{below}"
    return member, problem


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


def _has_omitted(kind: Any) -> bool:
    """A record with a member marked ``OMIT_WHEN_NONE`` (:mod:`.domain.model`)."""
    import attrs

    from .domain.model import OMIT_WHEN_NONE

    return attrs.has(kind) and any(field.metadata.get(OMIT_WHEN_NONE) for field in attrs.fields(kind))


def _omitting(made: Any, kind: Any) -> Callable[[Any], Any]:
    # Such a member is written only when set: a frame keeps the bytes of the dict it replaced.
    import attrs
    from cattrs.gen import make_dict_unstructure_fn, override

    from .domain.model import OMIT_WHEN_NONE

    omitted = {field.name: override(omit_if_default=True)
               for field in attrs.fields(kind) if field.metadata.get(OMIT_WHEN_NONE)}
    return make_dict_unstructure_fn(kind, made, **omitted)  # type: ignore[no-any-return]


def frame_to_json(frame: Any) -> dict[str, Any]:
    """A :class:`~httk.workflow.domain.frames.StateFrame` as its journal document."""
    document: dict[str, Any] = unstructure(frame)
    document.update(format=frame.FORMAT_NAME, format_version=frame.FORMAT_VERSION)
    return document


def frame_from_json(document: dict[str, Any]) -> Any:
    """A journal document as a ``StateFrame``; raises :class:`DocumentError` naming the member."""
    from .domain.frames import StateFrame

    expected = Format(StateFrame.FORMAT_NAME, StateFrame.FORMAT_VERSION)
    return structure(_strip_format(document, expected, "state frame"), StateFrame, "state frame")
