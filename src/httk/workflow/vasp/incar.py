"""INCAR reading and statement-level updating, band counts, and starting magnetic moments.

An INCAR line holds ``;``-separated ``TAG = value`` statements; ``!`` or ``#``
starts a comment that runs to the end of the line, and a trailing ``\\``
continues a line onto the next. Tags are case-insensitive and are returned
upper-cased. Values are returned as the stripped text VASP would read; this
module never guesses types.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ._io import PathLike, read_text, write_text

_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class IncarError(ValueError):
    """An INCAR statement or value that cannot be read or written safely."""


@attrs.frozen
class _Statement:
    tag: str
    text: str  # the statement as written, without the separator


@attrs.frozen
class _Line:
    statements: tuple[_Statement, ...]
    comment: str  # including its '!' or '#', or ''
    raw: str  # the logical line as written (continuations joined with newlines)


def _split_comment(line: str) -> tuple[str, str]:
    positions = [p for p in (line.find("!"), line.find("#")) if p >= 0]
    if not positions:
        return line, ""
    cut = min(positions)
    return line[:cut], line[cut:]


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        body, _comment = _split_comment(line)
        if body.rstrip().endswith("\\"):
            pending += line + "\n"
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending.rstrip("\n"))
    return out


def _parse_line(raw: str, where: str) -> _Line:
    parts = raw.split("\n")
    body_parts, comment = [], ""
    for part in parts:
        body, part_comment = _split_comment(part)
        body = body.rstrip()
        body_parts.append(body[:-1] if body.endswith("\\") else body)
        comment = comment or part_comment
    statements = []
    for chunk in " ".join(body_parts).split(";"):
        if not chunk.strip():
            continue
        if "=" not in chunk:
            raise IncarError(f"{where}: statement {chunk.strip()!r} has no '='")
        tag, _value = chunk.split("=", 1)
        tag = tag.strip()
        if not _TAG.match(tag):
            raise IncarError(f"{where}: invalid tag {tag!r}")
        statements.append(_Statement(tag=tag.upper(), text=chunk.strip()))
    return _Line(statements=tuple(statements), comment=comment.strip(), raw=raw)


def _parse(text: str, where: str) -> list[_Line]:
    return [_parse_line(raw, where) for raw in _logical_lines(text)]


def _value(statement: _Statement) -> str:
    return statement.text.split("=", 1)[1].strip()


def parse_incar(text: str, where: str = "INCAR") -> dict[str, str]:
    """The tags of INCAR ``text`` in file order, upper-cased, mapped to their value text.

    A tag assigned twice keeps its first value, as VASP's tag lookup finds the
    first match; :func:`update_incar` removes such later duplicates.
    """
    tags: dict[str, str] = {}
    for line in _parse(text, where):
        for statement in line.statements:
            tags.setdefault(statement.tag, _value(statement))
    return tags


def read_incar(path: PathLike = "INCAR") -> dict[str, str]:
    """The tags of the INCAR at ``path`` (see :func:`parse_incar`)."""
    return parse_incar(read_text(path), str(path))


def format_incar_value(value: Any) -> str:
    """VASP text for a Python value.

    ``bool`` → ``.TRUE.``/``.FALSE.``; ``int`` → decimal; ``float`` → shortest
    round-trip repr; a list/tuple → its items space-separated; ``str`` → as is.
    A string containing a newline, ``;``, ``!`` or ``#`` is refused, because it
    would change the statement structure of the file.
    """
    if isinstance(value, bool):
        return ".TRUE." if value else ".FALSE."
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise IncarError(f"INCAR values must be finite, got {value!r}")
        return repr(value)
    if isinstance(value, list | tuple):
        return " ".join(format_incar_value(item) for item in value)
    if isinstance(value, str):
        if any(char in value for char in "\n\r;!#"):
            raise IncarError(f"INCAR value {value!r} contains a newline, ';', '!' or '#'")
        return value.strip()
    raise IncarError(f"cannot write a {type(value).__name__} as an INCAR value: {value!r}")


def _normalise(updates: Mapping[str, Any]) -> dict[str, str | None]:
    normalised: dict[str, str | None] = {}
    for tag, value in updates.items():
        if not isinstance(tag, str) or not _TAG.match(tag):
            raise IncarError(f"invalid INCAR tag {tag!r}")
        if tag.upper() in normalised:
            raise IncarError(f"INCAR tag {tag.upper()} is given twice (tags are case-insensitive)")
        normalised[tag.upper()] = None if value is None else format_incar_value(value)
    return normalised


def update_incar_text(updates: Mapping[str, Any], text: str, where: str = "INCAR") -> str:
    """``text`` with ``updates`` applied statement by statement (see :func:`update_incar`)."""
    wanted = _normalise(updates)
    done: set[str] = set()
    out: list[str] = []
    for line in _parse(text, where):
        if not any(statement.tag in wanted for statement in line.statements):
            out.append(line.raw)  # untouched lines keep their exact text
            continue
        kept = []
        for statement in line.statements:
            if statement.tag not in wanted:
                kept.append(statement.text)
            elif statement.tag not in done:
                done.add(statement.tag)
                if wanted[statement.tag] is not None:
                    kept.append(f"{statement.tag} = {wanted[statement.tag]}")
        if kept or line.comment:
            out.append(" ; ".join(kept) + (" " if kept and line.comment else "") + line.comment)
    for tag, value in wanted.items():
        if tag not in done and value is not None:
            out.append(f"{tag} = {value}")
    return "\n".join(out) + "\n" if out else ""


def update_incar(updates: Mapping[str, Any], path: PathLike = "INCAR") -> dict[str, str]:
    """Set or remove INCAR tags in place, statement by statement; return the new tags.

    The first statement of an updated tag is rewritten as ``TAG = value`` where
    it stands, every later statement of that tag is deleted (so ``ISPIN = 2 ;
    ISYM = 2`` updated for ISPIN keeps one ISPIN and the ISYM beside it), and a
    tag not yet present is appended as its own line, in the order given. A
    value of ``None`` removes every statement of the tag. Comments are kept; a
    line left with neither statements nor comment is dropped. A missing file is
    treated as empty. Values go through :func:`format_incar_value`.
    """
    target = Path(path)
    text = read_text(target) if target.exists() else ""
    new = update_incar_text(updates, text, str(target))
    write_text(target, new)
    return parse_incar(new, str(target))


def write_incar(tags: Mapping[str, Any], path: PathLike = "INCAR") -> None:
    """Write a fresh INCAR with one ``TAG = value`` line per tag, in the given order."""
    write_text(path, update_incar_text(tags, "", str(path)))


def calculate_nbands(
    nelect: float,
    nions: int,
    *,
    magnetization: float = 0.0,
    noncollinear: bool = False,
) -> int:
    """VASP's default band count for ``nelect`` electrons and ``nions`` ions.

    ``n = max(ceil((NELECT + |M| + 2) / 2) + max(ceil(NIONS / 2), 3), ceil(0.6 * NELECT))``,
    doubled for a noncollinear calculation. ``magnetization`` (the total starting
    moment |M|, in μB) makes room for the majority spin channel. This follows the
    VASP manual's default; VASP may round it further up to a multiple of its
    band parallelisation, which this function does not model.
    """
    if nelect <= 0 or nions <= 0:
        raise ValueError(f"nelect and nions must be positive, got {nelect!r}, {nions!r}")
    occupied = math.ceil((nelect + abs(magnetization) + 2) / 2)
    bands = max(occupied + max(math.ceil(nions / 2), 3), math.ceil(0.6 * nelect))
    return 2 * bands if noncollinear else bands


def bump_nbands(nbands: int, factor: float = 1.1, minimum_increase: int = 4, multiple: int = 1) -> int:
    """More bands after a "too few bands" error.

    ``max(ceil(nbands * factor), nbands + minimum_increase)``, rounded up to a
    multiple of ``multiple`` (e.g. the NCORE/NPAR band group size).
    """
    if nbands <= 0 or factor < 1 or minimum_increase < 1 or multiple < 1:
        raise ValueError("bump_nbands needs nbands > 0, factor >= 1, minimum_increase >= 1, multiple >= 1")
    bands = max(math.ceil(nbands * factor - 1e-9), nbands + minimum_increase)  # 100 * 1.1 is 110.00000000000001
    return math.ceil(bands / multiple) * multiple


MAGNETIC_MOMENTS: Mapping[str, float] = {
    "V": 5.0, "Cr": 5.0, "Mn": 5.0, "Fe": 5.0, "Co": 5.0, "Ni": 5.0, "Cu": 1.0,
    "Mo": 5.0, "Ru": 3.0, "Rh": 2.0, "W": 5.0, "Os": 3.0, "Ir": 2.0,
    "Ce": 5.0, "Pr": 3.0, "Nd": 4.0, "Pm": 5.0, "Sm": 6.0, "Eu": 7.0, "Gd": 7.0,
    "Tb": 6.0, "Dy": 5.0, "Ho": 4.0, "Er": 3.0, "Tm": 2.0, "Yb": 1.0, "U": 3.0, "Np": 4.0, "Pu": 5.0,
}
"""Starting moments (μB) for a ferromagnetic high-spin start: transition metals high, rare earths by 4f count."""

DEFAULT_MAGNETIC_MOMENT = 0.6
"""Starting moment of every element not in :data:`MAGNETIC_MOMENTS`, small but non-zero so it can polarise."""


def element_of(species: str) -> str:
    """The element of a species label: ``Fe_pv`` → ``Fe``, ``Si/ab12`` → ``Si``."""
    return species.split("/")[0].split("_")[0].split(".")[0]


def suggested_magnetic_moments(
    species: Sequence[str],
    counts: Sequence[int],
    table: Mapping[str, float] | None = None,
) -> list[float]:
    """One starting moment per atom, in POSCAR order, from ``table`` (default :data:`MAGNETIC_MOMENTS`).

    A species missing from the table gets :data:`DEFAULT_MAGNETIC_MOMENT`.
    Format the list for an INCAR with :func:`format_magmom`.
    """
    if len(species) != len(counts):
        raise ValueError(f"{len(species)} species but {len(counts)} counts")
    moments = MAGNETIC_MOMENTS if table is None else table
    out: list[float] = []
    for label, count in zip(species, counts, strict=True):
        out.extend([float(moments.get(element_of(label), DEFAULT_MAGNETIC_MOMENT))] * int(count))
    return out


def format_magmom(moments: Iterable[float]) -> str:
    """MAGMOM text with VASP's run-length form: ``[5, 5, 0.6]`` → ``2*5.0 1*0.6``."""
    groups: list[tuple[int, float]] = []
    for value in moments:
        if groups and groups[-1][1] == float(value):
            groups[-1] = (groups[-1][0] + 1, groups[-1][1])
        else:
            groups.append((1, float(value)))
    return " ".join(f"{count}*{value!r}" for count, value in groups)
