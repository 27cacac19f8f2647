"""Small runner-side utilities that replace shell idioms: arithmetic, templates, compression.

Owns :func:`evaluate_expression` (``httk_calc``), :func:`render_template`
(``httk_template_render``), :func:`compress_files` (``httk_compress``) and
:func:`decompress_files` (``httk_decompress``) — the ``runtime_utils.*`` rows of
the Python and Bash authoring parity table; the Bash functions call these.

Invariants: nothing here evaluates code or starts a shell (expressions are
interpreted from their ``ast`` by a whitelist); every file this module writes is
published all-or-nothing through the POSIX filesystem adapter (temp, fsync,
rename, fsync of the directory, as ``HTTK_WORKFLOW_DURABLE`` asks), an existing
output is never overwritten by compression, and a source is removed only after
its output is complete. The adapter is imported by the call that writes, so
``httk_calc`` does not pay for it. Refusals are ``ValueError`` (the Bash status 2), absent template
values ``KeyError`` (status 1).
"""

from __future__ import annotations

import ast
import bz2
import gzip
import lzma
import math
import operator
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from httk.workflow import codec
from httk.workflow.runner_env import durable_from_env

if TYPE_CHECKING:
    from httk.workflow.adapters.fs_posix import PosixFilesystem

Number = int | float

MAX_EXPONENT = 10000
"""Largest absolute exponent :func:`evaluate_expression` accepts."""

MAX_INTEGER_BITS = 1_000_000
"""Largest integer power or product (in bits) :func:`evaluate_expression` computes; bounds time and memory."""

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# name -> (function, minimum arguments, maximum arguments or None for any number)
_FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "abs": (abs, 1, 1),
    "min": (lambda *args: min(args), 1, None),
    "max": (lambda *args: max(args), 1, None),
    "round": (round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "log": (math.log, 1, 2),
    "exp": (math.exp, 1, 1),
}


def evaluate_expression(expression: str, variables: Mapping[str, Number] | None = None) -> Number:
    """Evaluate an arithmetic expression over numbers and ``variables``.

    Accepts numeric literals, ``+ - * / // % **``, unary ``+``/``-``, parentheses,
    variable names and the functions abs, min, max, round, floor, ceil, sqrt, log
    and exp. Integers stay integers where Python keeps them so. Anything else,
    a non-finite result, or an exponent beyond ``MAX_EXPONENT`` raises
    ``ValueError`` naming the construct.
    """
    if not isinstance(expression, str):
        raise TypeError("expression must be a string")
    names = dict(variables or {})
    for name, value in names.items():
        if not _is_number(value):
            raise ValueError(f"variable {name!r} is not a number: {value!r}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"invalid expression {expression!r}: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise ValueError(f"expression too deeply nested: {expression[:40]!r}") from None
    try:
        return _evaluate(tree.body, names)
    except RecursionError:
        raise ValueError(f"expression too deeply nested: {expression[:40]!r}") from None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: Any, construct: str) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{construct} gives a non-finite result")
    return value


def _evaluate(node: ast.expr, names: dict[str, Number]) -> Number:
    if isinstance(node, ast.Constant):
        if not _is_number(node.value):
            raise ValueError(f"unsupported literal {node.value!r}")
        return _finite(node.value, "literal")
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(f"unknown name {node.id!r}")
        return _finite(names[node.id], f"variable {node.id!r}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, names))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        symbol = type(node.op).__name__
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        elif isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            # A long chain of products of huge integers is the other way to make this hang.
            if left.bit_length() + right.bit_length() > MAX_INTEGER_BITS:
                raise ValueError(f"product exceeds {MAX_INTEGER_BITS} bits")
        try:
            return _finite(_BINARY[type(node.op)](left, right), f"operator {symbol}")
        except ZeroDivisionError:
            raise ValueError(f"division by zero in operator {symbol}") from None
        except OverflowError:
            raise ValueError(f"operator {symbol} overflows") from None
    if isinstance(node, ast.Call):
        return _call(node, names)
    raise ValueError(f"unsupported construct {type(node).__name__}: {ast.unparse(node)!r}")


def _check_power(base: Number, exponent: Number) -> None:
    # Refused before computing: 9**9**9 must fail at once instead of running for hours.
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if base.bit_length() * exponent > MAX_INTEGER_BITS:
            raise ValueError(f"power result exceeds {MAX_INTEGER_BITS} bits")


def _call(node: ast.Call, names: dict[str, Number]) -> Number:
    if not isinstance(node.func, ast.Name):
        raise ValueError(f"unsupported call target {ast.unparse(node.func)!r}")
    name = node.func.id
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown function {name!r}")
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ValueError(f"function {name!r} takes positional arguments only")
    function, least, most = _FUNCTIONS[name]
    if len(node.args) < least or (most is not None and len(node.args) > most):
        counts = str(least) if most == least else f"{least} or more" if most is None else f"{least} to {most}"
        raise ValueError(f"function {name!r} takes {counts} arguments, got {len(node.args)}")
    args = [_evaluate(arg, names) for arg in node.args]
    if name == "round" and len(args) == 2 and not isinstance(args[1], int):
        raise ValueError("round() digits must be an integer")
    try:
        return _finite(function(*args), f"function {name!r}")
    except (ValueError, ZeroDivisionError, OverflowError) as error:
        raise ValueError(f"function {name!r}: {error}") from None


_PLACEHOLDER = re.compile(
    r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+))*)\s*\}\}"
)


class _MissingValue(KeyError):
    """A ``KeyError`` whose message reads as a sentence rather than a quoted key."""

    def __str__(self) -> str:
        return str(self.args[0])


def render_template(
    template: str | os.PathLike[str],
    values: Mapping[str, Any] | str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
) -> str:
    """Render the template file with one JSON value document; write ``output`` atomically if given.

    A placeholder is ``{{ name }}`` or a dotted path ``{{ a.b.0 }}`` (a numeric
    segment indexes an array). ``{{`` not followed by such a path and ``}}`` is
    left literal. Strings are inserted verbatim, every other value as canonical
    JSON. A missing member raises ``KeyError`` naming the placeholder and the
    template line.
    """
    template_path = Path(template)
    text = template_path.read_bytes().decode("utf-8")  # not read_text: keep line endings byte for byte
    if isinstance(values, Mapping):
        document: Mapping[str, Any] = values
    else:
        document = codec.decode_object(Path(values).read_bytes(), os.fspath(values))

    def substitute(match: re.Match[str]) -> str:
        dotted = match.group(1)
        try:
            value = _lookup(document, dotted)
        except LookupError as error:
            line = text.count("\n", 0, match.start()) + 1
            raise _MissingValue(
                f"{template_path}:{line}: placeholder {{{{ {dotted} }}}} has no value ({error.args[0]})"
            ) from None
        return value if isinstance(value, str) else codec.dumps(value)

    rendered = _PLACEHOLDER.sub(substitute, text)
    if output is not None:
        _filesystem().write_atomic(os.path.abspath(output), rendered.encode("utf-8"), durable=durable_from_env())
    return rendered


def _filesystem() -> PosixFilesystem:
    from httk.workflow.adapters.fs_posix import PosixFilesystem

    return PosixFilesystem()


def _lookup(document: Any, dotted: str) -> Any:
    value = document
    walked: list[str] = []
    for segment in dotted.split("."):
        where = ".".join(walked) or "the document"
        if isinstance(value, Mapping):
            if segment not in value:
                raise LookupError(f"no member {segment!r} in {where}")
            value = value[segment]
        elif isinstance(value, list) and segment.isascii() and segment.isdigit():
            if int(segment) >= len(value):
                raise LookupError(f"index {segment} out of range in {where} (length {len(value)})")
            value = value[int(segment)]
        else:
            raise LookupError(f"{where} is a {codec.type_name(value)}, not indexable by {segment!r}")
        walked.append(segment)
    return value


_OPENERS: dict[str, Callable[[IO[bytes], str], IO[bytes]]] = {
    "gz": lambda raw, name: gzip.GzipFile(filename=name, mode="wb", fileobj=raw, mtime=0),
    "bz2": lambda raw, _name: bz2.BZ2File(raw, mode="wb"),
    "xz": lambda raw, _name: lzma.LZMAFile(raw, mode="wb"),
}
_READERS: dict[str, Callable[[Path], IO[bytes]]] = {
    "gz": lambda path: gzip.open(path, "rb"),
    "bz2": lambda path: bz2.open(path, "rb"),
    "xz": lambda path: lzma.open(path, "rb"),
}
_CORRUPT = (OSError, EOFError, lzma.LZMAError)


def compress_files(
    paths: Iterable[str | os.PathLike[str]], method: str = "gz", remove: bool = False
) -> list[Path]:
    """Compress each file to ``<path>.<method>`` (gz, bz2 or xz); return the outputs.

    Every source and output is checked before anything is written: an existing
    output raises ``FileExistsError`` naming it. Outputs keep the source's mode
    and modification time; gzip headers carry mtime 0 so equal inputs give
    equal bytes. With ``remove`` a source is deleted only after its output is
    complete.
    """
    if method not in _OPENERS:
        raise ValueError(f"unknown compression method {method!r} (expected gz, bz2 or xz)")
    plan = _plan([(Path(path), Path(f"{os.fspath(path)}.{method}")) for path in paths])
    for source, target in plan:

        def write(temp: IO[bytes], source: Path = source) -> None:
            with source.open("rb") as reader, _OPENERS[method](temp, source.name) as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)

        _publish(source, target, write, remove)
    return [target for _source, target in plan]


def decompress_files(paths: Iterable[str | os.PathLike[str]], remove: bool = False) -> list[Path]:
    """Decompress each ``.gz``/``.bz2``/``.xz`` file next to itself, without the suffix; return the outputs.

    An unknown suffix or corrupt data raises ``ValueError``; an existing output
    raises ``FileExistsError`` naming it. With ``remove`` a source is deleted
    only after its output is complete.
    """
    pairs: list[tuple[Path, Path]] = []
    for path in paths:
        source = Path(path)
        method = source.suffix[1:]
        if method not in _READERS or not source.stem:
            expected = "expected .gz, .bz2 or .xz"
            raise ValueError(f"{source}: unknown compression suffix {source.suffix!r} ({expected})")
        pairs.append((source, source.with_suffix("")))
    plan = _plan(pairs)
    for source, target in plan:

        def write(temp: IO[bytes], source: Path = source) -> None:
            try:
                with _READERS[source.suffix[1:]](source) as reader:
                    shutil.copyfileobj(reader, temp, 1 << 20)
            except _CORRUPT as error:
                raise ValueError(f"{source}: not valid {source.suffix[1:]} data ({error})") from None

        _publish(source, target, write, remove)
    return [target for _source, target in plan]


def _plan(pairs: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
    # Validate everything first so a bad argument list changes nothing at all.
    seen: set[Path] = set()
    for source, target in pairs:
        if not source.is_file():
            raise FileNotFoundError(f"{source}: not a regular file")
        if os.path.lexists(target):
            raise FileExistsError(f"{target}: output exists; refusing to overwrite it")
        if target.resolve() in seen:
            raise ValueError(f"{target}: named twice")
        seen.add(target.resolve())
    return pairs


def _publish(source: Path, target: Path, write: Callable[[IO[bytes]], None], remove: bool) -> None:
    """Write ``target`` via a temp file, rename it in without overwriting, then maybe drop ``source``."""
    fs, durable = _filesystem(), durable_from_env()
    final = os.path.abspath(target)  # the adapter syncs the directory a name is in: never ""
    temp = target.parent / f".{target.name}.tmp.{secrets.token_hex(6)}"
    stat = source.stat()
    try:
        with open(temp, "xb") as handle:
            write(handle)
        os.chmod(temp, stat.st_mode & 0o7777)
        os.utime(temp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        if durable:
            fs.sync_tree(os.path.abspath(temp))
        try:
            fs.rename(os.path.abspath(temp), final, durable=durable)
        except FileExistsError:
            # The output appeared after the plan checked it: never replaced.
            raise FileExistsError(f"{target}: output exists; refusing to overwrite it") from None
    finally:
        temp.unlink(missing_ok=True)
    if remove:
        fs.remove(os.path.abspath(source))
        if durable:
            fs.fsync_dir(os.path.dirname(os.path.abspath(source)))
