"""Workspace policy (the four engine tunables) and application settings: validation.

Policy lives in ``format.json`` so every manager and CLI attaching the workspace
agrees on it; a write is validated member by member and an unknown key is
refused rather than stored. Settings are a flat map of dotted names to small JSON
values. Spec: 000 "Workspace policy", "Application settings".
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..codec import type_name
from ..domain import settings as engine_settings
from ..domain.model import ValidationError

DEFAULT_POLICY: dict[str, Any] = {
    "visibility_deadline_seconds": 5.0,
    "lease_seconds": 900.0,
    "journal_segment_bytes": 67108864,
    "retention": {},
}
RETENTION_KEYS = ("attempt_control_days", "journal_days", "trash_days", "transfer_days", "manager_days",
                  "scratch_days")
SETTING_NAME = re.compile(r"^[a-z0-9_][a-z0-9_-]*(\.[a-z0-9_][a-z0-9_-]*)*$")


class PolicyError(ValueError):
    """A policy or settings write that is refused; the message names the key and the fix."""


def _spelled(value: float) -> str:
    """A non-finite float as it was typed (``1e999`` reads as Infinity)."""
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _positive_number(key: str, value: Any) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        # Python's JSON parser reads NaN, Infinity and 1e999; format.json could not be written with them.
        raise PolicyError(f"policy {key}: {_spelled(value)} is not a finite JSON number; give a positive number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise PolicyError(f"policy {key}: expected a positive number, got {type_name(value)} {value!r}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond every float, such as 10**400
        raise PolicyError(f"policy {key}: an integer of {len(str(value))} digits is too large") from None


def _check_retention(key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise PolicyError(f"policy {key}: expected an object of {', '.join(RETENTION_KEYS)}")
    out: dict[str, float] = {}
    for name, days in value.items():
        if name not in RETENTION_KEYS:
            raise PolicyError(f"policy retention.{name}: unknown key; known: {', '.join(RETENTION_KEYS)}")
        if isinstance(days, float) and not math.isfinite(days):
            raise PolicyError(
                f"policy retention.{name}: {_spelled(days)} is not a finite JSON number; give a number of days >= 0"
            )
        if isinstance(days, bool) or not isinstance(days, int | float) or days < 0:
            raise PolicyError(f"policy retention.{name}: expected a number of days >= 0, got {days!r}")
        out[name] = days
    return out


def validate_policy(policy: Any) -> dict[str, Any]:
    """Check a whole policy object; unknown keys and wrong types are refused."""
    if not isinstance(policy, dict):
        raise PolicyError("policy: expected an object")
    out = copy.deepcopy(DEFAULT_POLICY)
    for key, value in policy.items():
        out[key] = _check_key(key, value)
    return out


def _check_key(key: str, value: Any) -> Any:
    if key in ("visibility_deadline_seconds", "lease_seconds"):
        return _positive_number(key, value)
    if key == "journal_segment_bytes":
        if isinstance(value, bool) or not isinstance(value, int) or value < 4096:
            raise PolicyError(f"policy {key}: expected an integer >= 4096, got {type_name(value)} {value!r}")
        return value
    if key == "retention":
        return _check_retention(key, value)
    known = ", ".join([*DEFAULT_POLICY, *(f"retention.{name}" for name in RETENTION_KEYS)])
    raise PolicyError(f"unknown policy key {key!r}; known keys: {known}")


def set_policy_value(policy: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A new policy with ``key`` (dotted for retention members) set to ``value``; validated."""
    out = copy.deepcopy(policy)
    if key.startswith("retention."):
        name = key.split(".", 1)[1]
        retention = dict(out.get("retention") or {})
        if value is None:
            retention.pop(name, None)
        else:
            retention[name] = value
        out["retention"] = _check_retention("retention", retention)
        return out
    out[key] = _check_key(key, value)
    return out


def check_setting_name(name: str) -> str:
    if not isinstance(name, str) or not SETTING_NAME.match(name):
        raise PolicyError(
            f"invalid setting name {name!r}: use dotted lowercase names such as 'vasp.command'"
        )
    return name


def check_setting_value(name: str, value: Any) -> Any:
    """A setting value must be JSON that can reach a runner: no NUL in any string, no NaN or infinity.

    NUL cannot be passed in an environment variable or a path, so one such value
    would stop every attempt from starting.
    """
    problem = _value_problem(value)
    if problem is not None:
        raise PolicyError(f"setting {name}: {problem}; give a JSON value without it")
    return value


def _value_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return "the value contains a NUL character" if "\x00" in value else None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a JSON number"
    if isinstance(value, dict):
        for key, member in value.items():
            problem = _value_problem(key) or _value_problem(member)
            if problem is not None:
                return problem
    if isinstance(value, list):
        for member in value:
            problem = _value_problem(member)
            if problem is not None:
                return problem
    return None


def check_engine_setting(name: str, value: Any) -> None:
    """Refuse a value of a setting with a rule (``manager.workers``, ``vasp.magnetic_moments``) that its
    reader could not use.

    ``null`` is accepted: it reads as unset.
    """
    rules = {
        engine_settings.WORKERS_SETTING: engine_settings.check_workers,
        engine_settings.MAGNETIC_MOMENTS_SETTING: engine_settings.check_magnetic_moments,
    }
    if name in rules and value is not None:
        try:
            rules[name](value)
        except ValidationError as error:
            raise PolicyError(str(error)) from None


#: The attempt variables the manager itself sets (``HTTK_WORKFLOW_CONTEXT``...): no setting may be exported there.
PROTOCOL_ENV_PREFIX = "HTTK_WORKFLOW_"


def setting_env_name(name: str) -> str:
    """``vasp.command`` → ``HTTK_VASP_COMMAND``."""
    return "HTTK_" + name.upper().replace(".", "_").replace("-", "_")


def env_collisions(names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The environment variables that two or more setting names share, with those names.

    ``.``, ``-`` and ``_`` all become ``_`` (``a.b-c`` and ``a.b_c`` are both
    ``HTTK_A_B_C``), so distinct names can meet in one variable.
    """
    by_variable: dict[str, list[str]] = {}
    for name in names:
        by_variable.setdefault(setting_env_name(name), []).append(name)
    return {variable: tuple(sorted(group)) for variable, group in by_variable.items() if len(group) > 1}


def collision_text(variable: str, names: Sequence[str]) -> str:
    """One collision, worded the same by every place that reports it."""
    return f"settings {' and '.join(names)} share the environment variable {variable}"


def check_setting_env_name(name: str, existing: Iterable[str]) -> None:
    """Refuse ``name`` when its environment variable is already another setting's (one of them would win),
    or is in the protocol's own ``HTTK_WORKFLOW_*`` namespace (which always wins over a setting)."""
    variable = setting_env_name(name)
    if variable.startswith(PROTOCOL_ENV_PREFIX):
        raise PolicyError(
            f"setting {name}: its environment variable {variable} is in the protocol's own {PROTOCOL_ENV_PREFIX}* "
            "namespace, which a runner would read instead; choose a name not starting with 'workflow.', 'workflow_' or "
            "'workflow-'"
        )
    others = sorted(other for other in existing if other != name and setting_env_name(other) == variable)
    if others:
        raise PolicyError(
            f"setting {name}: {collision_text(variable, [others[0], name])}, so a manager could export only "
            f"one of them; use the existing name {others[0]}, or unset it first"
        )


def scalar_settings_env(
    settings: dict[str, Any], collisions: dict[str, tuple[str, ...]] | None = None
) -> dict[str, str]:
    """The attempt environment of the scalar settings (objects and arrays stay in context.json).

    A variable two setting names share (a hand-edited settings.json: ``settings set``
    refuses the second name) is exported for neither, never for whichever comes
    last: a runner's ``a.setting(name)`` then reads each from context.json.
    ``collisions`` is :func:`env_collisions` of ``settings`` when the caller has it already.
    """
    if collisions is None:
        collisions = env_collisions(settings)
    shared = {name for names in collisions.values() for name in names}
    env: dict[str, str] = {}
    for name, value in settings.items():
        if name in shared:
            continue
        if isinstance(value, bool):
            env[setting_env_name(name)] = "true" if value else "false"
        elif isinstance(value, int | float | str):
            env[setting_env_name(name)] = str(value)
    return env
