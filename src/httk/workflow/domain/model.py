"""Frozen value types of the domain: names, placements, failures, policies, joins.

Validation here is pure string and number checking; every error names the value
and says what a valid one looks like. Spec: 000 "Submit a job", 001 "What an
attempt publishes".
"""

from __future__ import annotations

import re
from typing import Any

import attrs

#: Tags and child labels: lowercase, filename- and shell-safe, no ``--``.
TAG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,47}$")
UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
STEP_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
CONTROL_DIR = ".httk-workflow"
RESERVED_PLACEMENT_NAMES = frozenset({CONTROL_DIR, ".httk-job", ".httk-runner"})

WORKDIR_MODES = ("persistent", "isolated")
DATA_MODES = ("none", "transactional")
DEFAULT_POOL = "default"
DEFAULT_EXECUTOR = "path"

#: Record field metadata: the member is not written at all while it is ``None`` (``codec`` honours
#: it). Here, not beside the frames that use it most, so the runner side reads it without importing them.
OMIT_WHEN_NONE = "omit_when_none"


class ValidationError(ValueError):
    """A value that breaks a protocol rule; the message names it and the fix."""


def check_tag(tag: str, what: str = "tag") -> str:
    if not isinstance(tag, str) or not TAG_PATTERN.match(tag) or "--" in tag:
        raise ValidationError(
            f"invalid {what} {tag!r}: use 1-48 of [a-z0-9._-], starting with a letter or digit, without '--'"
        )
    return tag


def check_step(step: str) -> str:
    if not isinstance(step, str) or not STEP_PATTERN.match(step):
        raise ValidationError(f"invalid step name {step!r}: use [A-Za-z_][A-Za-z0-9_.-]*")
    return step


#: Priorities are 64-bit signed integers: every marker name, SDK and shell can carry one.
PRIORITY_MIN, PRIORITY_MAX = -(2**63), 2**63 - 1


def check_priority(priority: Any, what: str = "priority") -> int:
    """An int priority within the 64-bit range (a bool is not a priority); raises :class:`ValidationError`."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValidationError(f"invalid {what} {priority!r}: expected an integer")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValidationError(f"invalid {what}: outside the 64-bit range [-2**63, 2**63 - 1]")
    return priority


@attrs.frozen(order=True)
class JobKey:
    """``<tag>--<uuid>`` or a bare lowercase uuid; the name of a payload directory."""

    job_id: str
    tag: str | None = None

    def __attrs_post_init__(self) -> None:
        if not UUID_PATTERN.match(self.job_id):
            raise ValidationError(f"invalid job id {self.job_id!r}: expected a lowercase uuid")
        if self.tag is not None:
            check_tag(self.tag)

    def __str__(self) -> str:
        return f"{self.tag}--{self.job_id}" if self.tag else self.job_id

    @classmethod
    def parse(cls, text: str) -> JobKey:
        tag, sep, job_id = text.rpartition("--")
        if not sep:
            return cls(job_id=text)
        return cls(job_id=job_id, tag=tag)


def check_placement(placement: str) -> str:
    """A placement is a relative POSIX path below the workspace, never into the control tree."""
    if not isinstance(placement, str) or not placement.strip("/"):
        raise ValidationError(f"invalid placement {placement!r}: give a relative path such as 'project-a/00/17'")
    if placement.startswith("/"):
        raise ValidationError(f"invalid placement {placement!r}: must be relative to the workspace, not absolute")
    parts = [part for part in placement.split("/") if part]
    for part in parts:
        if part in (".", ".."):
            raise ValidationError(f"invalid placement {placement!r}: '.' and '..' are not allowed")
        if part in RESERVED_PLACEMENT_NAMES:
            raise ValidationError(f"invalid placement {placement!r}: {part!r} is reserved for the control tree")
        if "\x00" in part or "\n" in part:
            raise ValidationError(f"invalid placement {placement!r}: control characters are not allowed")
    if not placement.isascii():
        try:
            placement.encode("utf-8")  # a byte that is not UTF-8 arrives as a lone surrogate
        except UnicodeEncodeError:
            raise ValidationError(f"invalid placement {placement!r}: it is not UTF-8, so no frame can record it; "
                                  "choose a UTF-8 placement") from None
    return "/".join(parts)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def control_character(text: str) -> str | None:
    """The first control character (C0 or DEL) in ``text``, or ``None``.

    Names that become paths refuse them: NUL cannot reach the OS at all, and the
    others break every line-oriented log, listing and shell that shows the name.
    """
    found = _CONTROL.search(text)
    return found.group() if found else None


def _failure_code(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"a failure code must be a non-empty string, got {value!r}")


@attrs.frozen
class Failure:
    """The one canonical failure object: ``{code, message, details, retryable}`` (``codec`` reads and writes it)."""

    code: str = attrs.field(validator=_failure_code)
    message: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    details: dict[str, Any] = attrs.field(factory=dict, validator=attrs.validators.instance_of(dict))
    retryable: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


@attrs.frozen
class RetryPolicy:
    """Attempt budgets of a job; ``None`` means unlimited."""

    maximum_attempts_per_activation: int | None = 3
    maximum_total_attempts: int | None = None
    maximum_activations: int | None = None
    retry_on: tuple[str, ...] = ()


JOIN_CONDITIONS = ("all_succeeded", "all_terminal", "any_succeeded", "at_least")


def check_join_condition(when: Any, count: Any, children: int | None = None) -> None:
    """The one rule for a join condition: the SDK's gather, the manager's outcome parser and JoinSpec.

    ``children`` is how many children the join covers, when the caller knows it: a
    join covers at least one, and ``at_least`` cannot ask for more than it covers.
    Raises :class:`ValidationError`.
    """
    if not isinstance(when, str) or when not in JOIN_CONDITIONS:
        raise ValidationError(f"invalid join condition {when!r}: use one of {', '.join(JOIN_CONDITIONS)}")
    if when == "at_least":
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValidationError(f"join condition 'at_least' needs an int count >= 1, got {count!r}")
    elif count is not None:
        raise ValidationError(f"join condition {when!r} takes no count, got {count!r}")
    if children is None:
        return
    if children < 1:
        raise ValidationError("a join waits for the children spawned on this attempt, and none were spawned")
    if when == "at_least" and count > children:
        raise ValidationError(f"join condition at_least(count={count}) but only {children} spawned")


@attrs.frozen
class JoinSpec:
    """What a waiting job waits for: the labelled children of one attempt and a condition."""

    step: str
    when: str = "all_succeeded"
    count: int | None = None
    on_impossible: str | None = None
    children: tuple[tuple[str, str], ...] = ()  # (label, job key)

    def __attrs_post_init__(self) -> None:
        check_join_condition(self.when, self.count)
