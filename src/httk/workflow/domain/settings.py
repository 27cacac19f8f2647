"""The application settings the engine itself reads: today ``manager.workers``.

One rule, shared by ``workspace settings set`` (refused when written), a local
``run`` and the batch script of ``run REMOTE:WS`` (the worker count comes from
``--workers``, else this setting, else 1). Spec: 000 "Application settings".
"""

from __future__ import annotations

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
