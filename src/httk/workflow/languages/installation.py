"""What this installation holds of ``languages/``: engine modules the import system can find, runner directories.

The two helpers that ask the environment, kept out of the pure
:mod:`.realization` so ``operations/`` (which receives the finder as
``Ports.find_module``) never imports them: the CLI and the composition root do.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .realization import Language, packaged_runner_dir
from .realization import missing_modules as _missing_modules


def find_module(name: str) -> Any:
    """The import system's spec of top-level module ``name``, or ``None`` (nothing is imported)."""
    return importlib.util.find_spec(name)


def missing_modules(language: Language, find: Callable[[str], Any] = find_module) -> list[str]:
    """The engine modules of ``language`` this interpreter cannot find (nothing is imported)."""
    return _missing_modules(language, find)


def package_dir(name: str) -> Path:
    """A packaged runner directory of this subpackage: ``jobflow`` or ``httk_v1``."""
    return Path(packaged_runner_dir(name))


#: At most this many bytes of a flow's own modules travel in a job's inputs (job.json).
SHIPPED_MODULES_LIMIT = 1_000_000


class ModuleShippingError(ValueError):
    """A flow module that cannot travel with its job; the message names it and the fix."""


def _installed_roots() -> list[Path]:
    """The interpreter's standard library and site-packages directories."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return [Path(root).resolve() for root in roots if root]


def local_module_sources(names: Iterable[str]) -> dict[str, str]:
    """The source files of the top-level modules ``names`` that are not installed: relative path -> text.

    A module is installed when a distribution provides it (an editable install too) or
    its file is below the standard library or a site-packages directory; a manager's
    Python finds those the usual way. The others (found through the current directory
    or ``PYTHONPATH``) are what a manager elsewhere may lack, so they travel with the
    job: a plain module as ``NAME.py``, a package as every ``.py`` file below it.
    """
    from importlib.metadata import packages_distributions

    distributed = packages_distributions()
    roots = _installed_roots()
    sources: dict[str, str] = {}
    for name in names:
        if name in distributed or name in sys.builtin_module_names:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.has_location or not spec.origin:
            continue  # not findable here, built in, frozen or a namespace package: nothing to ship
        origin = Path(spec.origin).resolve()
        if any(origin.is_relative_to(root) for root in roots) or origin.suffix != ".py":
            continue
        if spec.submodule_search_locations is None:
            sources[f"{name}.py"] = origin.read_text(encoding="utf-8")
            continue
        package = origin.parent
        for path in sorted(package.rglob("*.py")):
            relative = path.relative_to(package.parent)
            if any(part == "__pycache__" or part.startswith(".") for part in relative.parts):
                continue
            sources[relative.as_posix()] = path.read_text(encoding="utf-8")
    size = sum(len(text.encode("utf-8")) for text in sources.values())
    if size > SHIPPED_MODULES_LIMIT:
        raise ModuleShippingError(
            f"the flow's modules {', '.join(sorted({path.split('/')[0].removesuffix('.py') for path in sources}))} "
            f"are {size} bytes, more than the "
            f"{SHIPPED_MODULES_LIMIT} that travel with a job; install them where the managers run "
            "(pip install -e DIR) instead")
    return sources
