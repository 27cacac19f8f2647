"""The application settings with a rule: ``manager.workers`` and ``vasp.magnetic_moments``.

One rule per setting, shared by ``workspace settings set`` (refused when
written) and the code that reads it: a local ``run`` and the batch script of
``run REMOTE:WS`` for ``manager.workers`` (the worker count comes from
``--workers``, else this setting, else 1), the VASP helpers for
``vasp.magnetic_moments``. Spec: 000 "Application settings".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .model import ValidationError

#: The workspace setting that supplies a manager's default worker count.
WORKERS_SETTING = "manager.workers"
DEFAULT_WORKERS = 1


def check_workers(value: Any, source: str = f"setting {WORKERS_SETTING}") -> int:
    """``value`` when it is a positive integer (a bool is not); raises :class:`ValidationError` naming ``source``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{source} must be a positive integer, not {value!r}")
    return value


def resolve_workers(settings: Mapping[str, Any], workers: int | None) -> int:
    """``workers`` when given, else the ``manager.workers`` setting, else 1."""
    if workers is not None:
        return check_workers(workers, "--workers")
    if settings.get(WORKERS_SETTING) is None:
        return DEFAULT_WORKERS
    return check_workers(settings[WORKERS_SETTING])


#: The workspace setting that chooses the starting magnetic moments of a magnetic VASP run.
MAGNETIC_MOMENTS_SETTING = "vasp.magnetic_moments"
#: The named tables it may choose; the tables themselves are ``httk.workflow.vasp.MAGNETIC_MOMENT_TABLES``.
MAGNETIC_MOMENT_TABLE_NAMES = ("httk", "materials-project")
_ELEMENT = re.compile(r"^[A-Z][a-z]{0,2}$")


def check_magnetic_moments(value: Any, source: str = f"setting {MAGNETIC_MOMENTS_SETTING}") -> str | dict[str, float]:
    """``value`` when it names a table of :data:`MAGNETIC_MOMENT_TABLE_NAMES` or is an object mapping
    element symbols to finite moments (μB); raises :class:`ValidationError` naming ``source`` otherwise."""
    if isinstance(value, str):
        if value in MAGNETIC_MOMENT_TABLE_NAMES:
            return value
        raise ValidationError(
            f"{source}: unknown table {value!r}; use one of {', '.join(MAGNETIC_MOMENT_TABLE_NAMES)} "
            'or an object such as {"Fe": 4.0, "Co": 3.0}'
        )
    if not isinstance(value, Mapping):
        raise ValidationError(f"{source} must be a table name or an object of element -> moment, not {value!r}")
    table: dict[str, float] = {}
    for element, moment in value.items():
        if not isinstance(element, str) or not _ELEMENT.match(element):
            raise ValidationError(f"{source}: {element!r} is not an element symbol such as 'Fe'")
        if isinstance(moment, bool) or not isinstance(moment, int | float) or not math.isfinite(moment):
            raise ValidationError(f"{source}: the moment of {element} must be a finite number, not {moment!r}")
        table[element] = float(moment)
    return table
