"""Marker names: the zero-length files whose location and name are a job's truth.

``state/<kind>/<placement>/<job-key>.p<priority>.g<generation base36>.<ref>``.
Parsing splits from the right, because a tag may contain dots while the three
trailing fields never do. Spec: docs/workflow_filesystem_api.md "Markers".
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ..domain.lifecycle import StateKind
from ..domain.model import JobKey, ValidationError, check_priority

INIT_REF = "init"
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
#: A generation fits 63 bits (13 base-36 digits): a name claiming more is damage, not a job.
MAX_GENERATION = 2**63 - 1
_NUMBER_DIGITS = 24  # longer fields ("p" + sign + 19 digits at most) are refused before int() sees them


def to_base36(value: int) -> str:
    if value < 0:
        raise ValueError("generation must be >= 0")
    if value == 0:
        return "0"
    out = []
    while value:
        value, digit = divmod(value, 36)
        out.append(_DIGITS[digit])
    return "".join(reversed(out))


def shown(text: str) -> str:
    """``text`` as it can be printed and written into JSON: each byte of a file name that is not UTF-8 as ``\\xNN``.

    The OS hands such a byte over as a lone surrogate, which no UTF-8 output or
    document can carry: a damage report naming the file would fail instead of reporting it.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def undecodable(name: str) -> bool:
    """Whether a file name holds a byte that is not UTF-8 (no frame or document can record it)."""
    if name.isascii():
        return False  # nearly every name: no encoding attempted
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


#: The damage message of a placement directory whose name is not UTF-8 (the walk does not enter it).
UNDECODABLE_PLACEMENT = "a placement directory whose name is not UTF-8: no frame can record a job there"


class MarkerNameError(ValueError):
    """A file in the state tree whose name is not a marker (damage code ``unparseable_name``)."""


@attrs.frozen
class Marker:
    """One marker: where it is and what its name says."""

    kind: StateKind
    placement: str
    key: JobKey
    priority: int
    generation: int
    ref: str

    @property
    def job_id(self) -> str:
        return self.key.job_id

    @property
    def name(self) -> str:
        return f"{self.key}.p{self.priority}.g{to_base36(self.generation)}.{self.ref}"

    def relative_path(self) -> str:
        return f"{self.kind.value}/{self.placement}/{self.name}"

    @classmethod
    def parse(cls, kind: StateKind | str, placement: str, name: str) -> Marker:
        parts = name.rsplit(".", 3)
        # The store writes ASCII names only; anything else (a byte that is not UTF-8, say) is no marker.
        if len(parts) != 4 or not name.isascii():
            raise MarkerNameError(f"unparseable marker name {name[:200]!r}")
        key_text, priority_text, generation_text, ref = parts
        try:
            if not priority_text.startswith("p") or not generation_text.startswith("g"):
                raise ValueError
            if len(priority_text) > _NUMBER_DIGITS or len(generation_text) > _NUMBER_DIGITS:
                raise ValueError
            priority = check_priority(int(priority_text[1:]))
            generation = int(generation_text[1:], 36)
            # Both numbers must be written the one way the store writes them ("p+0" or "g00" are not).
            if priority_text[1:] != str(priority) or generation_text[1:] != to_base36(generation) or not ref:
                raise ValueError
            if generation > MAX_GENERATION:
                raise ValueError
            key = JobKey.parse(key_text)
        except (ValueError, ValidationError):
            raise MarkerNameError(f"unparseable marker name {name[:200]!r}") from None
        return cls(StateKind(kind), placement, key, priority, generation, ref)


def newest_per_job(markers: Iterable[Marker]) -> dict[str, Marker]:
    """The current marker of each job among ``markers``, by job id.

    A job renamed between two kinds during a walk can be seen twice: the higher generation is current.
    """
    newest: dict[str, Marker] = {}
    for marker in markers:
        seen = newest.get(marker.job_id)
        if seen is None or marker.generation > seen.generation:
            newest[marker.job_id] = marker
    return newest
