"""INCAR reading and statement-level updating, band counts, and starting magnetic moments.

An INCAR line holds ``;``-separated ``TAG = value`` statements; ``!`` or ``#``
starts a comment that runs to the end of the line, and a trailing ``\\``
continues a line onto the next. A value in double quotes (``SYSTEM = "a ; b"``,
a multi-line ``WANNIER90_WIN = "..."``) is literal: ``;``, ``!``, ``#`` and
newlines inside it belong to the value. Tags are case-insensitive and are
returned upper-cased. Values are returned as the text VASP would read (a value
that is one quoted string without its quotes); this module never guesses types.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from httk.workflow.domain import settings as settings_rules
from httk.workflow.domain.model import ValidationError

from ._io import PathLike, read_text, write_text

_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class IncarError(ValueError):
    """An INCAR statement or value that cannot be read or written safely."""


@attrs.frozen
class _Statement:
    tag: str
    text: str  # the statement as written, without the separator (a quoted value keeps its quotes and newlines)


@attrs.frozen
class _Line:
    statements: tuple[_Statement, ...]
    comment: str  # including its '!' or '#', or ''
    raw: str  # the logical line as written (continuations and quoted newlines joined with newlines)


def _statement(chunk: str, where: str, number: int) -> _Statement | None:
    if not chunk.strip():
        return None
    if "=" not in chunk:
        raise IncarError(f"{where}: line {number}: statement {chunk.strip()!r} has no '='")
    tag = chunk.split("=", 1)[0].strip()
    if not _TAG.match(tag):
        raise IncarError(f"{where}: line {number}: invalid tag {tag!r}")
    return _Statement(tag=tag.upper(), text=chunk.strip())


def _parse(text: str, where: str) -> list[_Line]:
    """Split ``text`` into logical lines of statements.

    Outside quotes ``;`` separates statements, ``!``/``#`` start a comment and a
    trailing ``\\`` continues the line. Inside a ``"…"`` value every character is
    literal, newlines included, so a quoted value may span physical lines.
    """
    physical = text.splitlines()
    out: list[_Line] = []
    index = 0
    while index < len(physical):
        start = index
        statements: list[_Statement] = []
        comment, chunk, quoted = "", "", False
        while True:
            line = physical[index]
            index += 1
            position = 0
            while position < len(line):
                char = line[position]
                if quoted or char not in ";!#":
                    quoted = quoted != (char == '"')
                    chunk += char
                elif char == ";":
                    statement = _statement(chunk, where, index)
                    statements += [statement] if statement else []
                    chunk = ""
                else:
                    comment = comment or line[position:].strip()
                    break
                position += 1
            if quoted:
                if index >= len(physical):
                    raise IncarError(f"{where}: line {start + 1}: a quoted value is never closed (add the '\"')")
                chunk += "\n"
                continue
            if chunk.rstrip().endswith("\\") and index < len(physical):
                chunk = chunk.rstrip()[:-1] + " "
                continue
            if chunk.rstrip().endswith("\\"):
                chunk = chunk.rstrip()[:-1]
            break
        statement = _statement(chunk, where, index)
        statements += [statement] if statement else []
        out.append(_Line(statements=tuple(statements), comment=comment, raw="\n".join(physical[start:index])))
    return out


def _value(statement: _Statement) -> str:
    # A value that is one quoted string is its inside, verbatim; anything else is the stripped text.
    value = statement.text.split("=", 1)[1].strip()
    if len(value) >= 2 and value[0] == value[-1] == '"' and value.count('"') == 2:
        return value[1:-1]
    return value


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
    round-trip repr; a list/tuple → its items space-separated; ``str`` → as is,
    or in double quotes when it holds a ``;`` or a newline (VASP reads a quoted
    value literally). A string with ``!`` or ``#`` is refused (readers differ on
    whether they start a comment inside quotes), and so is one that needs quotes
    but holds a ``"``.
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
        if any(char in value for char in "!#\r"):
            raise IncarError(f"INCAR value {value!r} contains '!', '#' or a carriage return; remove them")
        if any(char in value for char in "\n;"):
            if '"' in value:
                raise IncarError(f"INCAR value {value!r} needs quotes for its ';' or newline but contains '\"'")
            return f'"{value}"'
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


def _nint(value: float) -> int:
    # Fortran NINT: to the nearest integer, halves away from zero (Python's round() goes to even).
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def calculate_nbands(
    nelect: float,
    nions: int,
    *,
    magnetization: float = 0.0,
    noncollinear: bool = False,
) -> int:
    """VASP's default band count, as VASP 5.4.4 (``main.F``) computes it.

    ``NBANDS = MAX(NINT(NELECT+2)/2 + MAX(NIONS/2, 3), INT(0.6*NELECT)) + NMAG``
    with Fortran integer arithmetic (``/`` of integers truncates) and
    ``NMAG = INT((|M| + 1) / 2)`` for the total starting moment ``M`` (ΣMAGMOM,
    in μB; the sign only says which spin channel is the majority). A
    noncollinear calculation doubles the whole count. VASP may round the result
    further up to a multiple of its band parallelisation, which this function
    does not model.
    """
    if nelect <= 0 or nions <= 0:
        raise ValueError(f"nelect and nions must be positive, got {nelect!r}, {nions!r}")
    if not math.isfinite(magnetization):
        raise ValueError(f"magnetization must be a finite number of μB, got {magnetization!r}")
    bands = max(_nint(nelect + 2) // 2 + max(int(nions) // 2, 3), int(0.6 * nelect))
    bands += int((abs(magnetization) + 1) / 2)
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
"""The ``httk`` table (μB): a ferromagnetic high-spin start, transition metals high, rare earths by 4f count.

A start above the ground-state moment lets the SCF fall to a low-spin solution;
a start below it can leave a high-spin ground state unfound."""

MATERIALS_PROJECT_MAGNETIC_MOMENTS: Mapping[str, float] = {
    "Ce": 5.0, "Co": 0.6, "Cr": 5.0, "Eu": 10.0, "Fe": 5.0, "Mn": 5.0, "Mo": 5.0, "Ni": 5.0, "V": 5.0, "W": 5.0,
}
"""The ``materials-project`` table: the element entries of pymatgen's ``MPRelaxSet`` MAGMOM
(``VASPIncarBase.yaml``; its oxidation-state entries such as ``Gd3+`` need a decorated
structure and are not used), so a run starts where the Materials Project's data did."""

MAGNETIC_MOMENT_TABLES: Mapping[str, Mapping[str, float]] = {
    "httk": MAGNETIC_MOMENTS, "materials-project": MATERIALS_PROJECT_MAGNETIC_MOMENTS,
}
"""The named tables the ``vasp.magnetic_moments`` workspace setting may choose (the names the setting rule knows)."""

DEFAULT_MAGNETIC_MOMENT_TABLE = "httk"

DEFAULT_MAGNETIC_MOMENT = 0.6
"""Starting moment of every element a table does not list (both named tables use 0.6): small but non-zero."""

MagneticMomentTable = str | Mapping[str, float]


def magnetic_moment_table(choice: MagneticMomentTable | None = None) -> Mapping[str, float]:
    """The table ``choice`` means: a name of :data:`MAGNETIC_MOMENT_TABLES`, an element → μB mapping
    (the value of the ``vasp.magnetic_moments`` setting), or ``None`` for the ``httk`` table.

    The rule is the one ``workspace settings set`` applies; a bad value raises ``ValueError``.
    """
    if choice is None:
        return MAGNETIC_MOMENT_TABLES[DEFAULT_MAGNETIC_MOMENT_TABLE]
    try:
        checked = settings_rules.check_magnetic_moments(choice, "magnetic moment table")
    except ValidationError as error:
        raise ValueError(str(error)) from None
    return MAGNETIC_MOMENT_TABLES[checked] if isinstance(checked, str) else checked


def element_of(species: str) -> str:
    """The element of a species label: ``Fe_pv`` → ``Fe``, ``Si/ab12`` → ``Si``."""
    return species.split("/")[0].split("_")[0].split(".")[0]


def suggested_magnetic_moments(
    species: Sequence[str],
    counts: Sequence[int],
    table: MagneticMomentTable | None = None,
) -> list[float]:
    """One starting moment per atom, in POSCAR order, from ``table`` (see :func:`magnetic_moment_table`;
    default the ``httk`` table, :data:`MAGNETIC_MOMENTS`).

    A species missing from the table gets :data:`DEFAULT_MAGNETIC_MOMENT`.
    Format the list for an INCAR with :func:`format_magmom`.
    """
    if len(species) != len(counts):
        raise ValueError(f"{len(species)} species but {len(counts)} counts")
    moments = magnetic_moment_table(table)
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
