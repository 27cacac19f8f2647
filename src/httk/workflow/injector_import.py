"""Importing dependency-injector without the parts of its import this package never uses.

The composition root (``bootstrap``) imports dependency-injector through
:func:`import_dependency_injector` before anything else of it: its optional
backends (PyYAML, pydantic) are hidden for the length of that import and
``asyncio``, ``configparser`` and its own ``wiring`` module are deferred, which
together were most of every command's start-up (docs/benchmarks.md "CLI start-up
and the composition root").
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

#: Optional backends dependency-injector imports at its own import when they are installed
#: (``Configuration.from_yaml``/``from_pydantic``, which this package never calls).
_UNUSED_BACKENDS = frozenset({"yaml", "pydantic_settings", "pydantic"})


class _HideBackends:
    """A meta-path finder under which the unused backends are not installed."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name.split(".", 1)[0] in _UNUSED_BACKENDS:
            raise ModuleNotFoundError(f"{name} is hidden while dependency-injector is imported", name=name)


#: What dependency-injector takes from the ``asyncio`` package at its import (``from asyncio import
#: Future, ensure_future, gather`` in its providers, containers and _cwiring modules). It calls them
#: only when a provider returns an awaitable, so a synchronous container never does.
_ASYNCIO_CALLABLES = ("Future", "ensure_future", "gather")


#: What dependency-injector takes, at its import, from modules it calls only for features this package never
#: uses: ``from configparser import ConfigParser`` (providers; only ``Configuration.from_ini`` calls it) and
#: ``from .wiring import unwire, wire`` (containers; only ``container.wire()`` and a ``wiring_config`` call them).
_DEFERRED_CALLABLES = {"configparser": ("ConfigParser",), "dependency_injector.wiring": ("unwire", "wire")}


def _deferred_callable(module: str, name: str) -> Callable[..., Any]:
    """``<module>.<name>``, looked up in the real module when called (importing it first if need be)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class _PreloadedCoroutines:
    """A one-shot meta-path finder and loader: the real ``asyncio`` package gets the ``asyncio.coroutines``
    executed for dependency-injector, so both see one ``_is_coroutine`` marker."""

    def __init__(self, module: types.ModuleType, spec: importlib.machinery.ModuleSpec) -> None:
        self.module = module
        self.spec = spec

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != "asyncio.coroutines":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # type: ignore[arg-type]
        return importlib.util.spec_from_loader(name, self)  # type: ignore[arg-type]

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self.spec  # its own (the source file's), not this finder's


class _StandIn(types.ModuleType):
    """What ``import NAME`` finds while dependency-injector is imported: the callables it takes, no more."""

    def __init__(self, name: str, callables: tuple[str, ...]) -> None:
        super().__init__(name)
        self._deferred = callables
        for attribute in callables:
            setattr(self, attribute, _deferred_callable(name, attribute))

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{self.__name__}.{name}: dependency-injector asked for more of {self.__name__} at its "
                             f"import than httk.workflow.injector_import defers ({', '.join(self._deferred)})")


@contextlib.contextmanager
def _callables_deferred() -> Iterator[None]:
    """Keep the modules of :data:`_DEFERRED_CALLABLES` out of dependency-injector's import.

    ``configparser`` is about 2 ms (a dozen regular expressions) and ``dependency_injector.wiring``
    about 3 ms (it imports pkgutil and probes for fastapi, starlette, werkzeug and
    fast_depends). For the length of the import each is a :class:`_StandIn` holding
    callables that import the real module when called; afterwards the stand-ins leave
    ``sys.modules``, so importing either anywhere gets the real module. A module already
    imported is used as it is.
    """
    stand_ins = {name: _StandIn(name, callables) for name, callables in _DEFERRED_CALLABLES.items()
                 if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


@contextlib.contextmanager
def _asyncio_deferred() -> Iterator[None]:
    """Keep the ``asyncio`` package (it imports ssl, socket, subprocess) out of dependency-injector's import.

    Its providers module imports ``Future``, ``ensure_future`` and ``gather`` from ``asyncio``
    and the ``_is_coroutine`` marker and ``_COROUTINE_TYPES`` from ``asyncio.coroutines``
    unconditionally. For the length of the import, ``asyncio`` is a stand-in holding
    callables (:func:`_deferred_callable`), and ``asyncio.coroutines`` the real module executed on its
    own (it imports nothing of its package); afterwards both leave ``sys.modules``, and the
    real package, when something imports it, is given that same ``coroutines`` module
    (:class:`_PreloadedCoroutines`). (``importlib.util.LazyLoader`` cannot do this: ``from
    asyncio import Future`` and importing a submodule read the module's attributes, which
    loads it.) Nothing is done when asyncio is already imported.
    """
    if "asyncio" in sys.modules:
        yield
        return
    package = importlib.util.find_spec("asyncio")
    spec = importlib.machinery.PathFinder.find_spec("asyncio.coroutines", package.submodule_search_locations
                                                    ) if package is not None else None
    if spec is None or spec.loader is None:
        yield
        return
    coroutines = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(coroutines)
    stand_in = _StandIn("asyncio", _ASYNCIO_CALLABLES)
    stand_in.__path__ = []
    stand_in.coroutines = coroutines  # type: ignore[attr-defined]
    sys.modules["asyncio"], sys.modules["asyncio.coroutines"] = stand_in, coroutines
    try:
        yield
    finally:
        if sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]
        if sys.modules.get("asyncio.coroutines") is coroutines:
            del sys.modules["asyncio.coroutines"]
        sys.meta_path.insert(0, _PreloadedCoroutines(coroutines, spec))  # type: ignore[arg-type]


def import_dependency_injector() -> None:
    """Import dependency-injector without the parts of its import this package never uses.

    Its unused optional backends are hidden for the length of the import: with pydantic
    and PyYAML installed (pymatgen brings them), its ``providers`` module imports them
    eagerly, about 0.3 s of every command's start-up. A backend already imported is used
    as it is, and every one is importable as usual afterwards. And neither ``asyncio``
    (:func:`_asyncio_deferred`) nor ``configparser`` and dependency-injector's ``wiring``
    (:func:`_callables_deferred`) are imported: an async provider imports asyncio when it
    runs, ``from_ini`` configparser, and ``wire()`` its module.

    The finder and the stand-in are process-wide, so they are used only while this is
    the only thread (the CLI; ``threading`` knows of no other): a program that imports
    this module lazily with other threads running (an SDK program through
    ``workspace.py``) imports dependency-injector plainly, slower but without refusing
    another thread's ``import yaml`` or showing it the stand-in. Both rely on how
    dependency-injector imports its backends and asyncio; pyproject.toml pins the tested range.
    """
    if threading.active_count() != 1:
        import dependency_injector.containers  # noqa: F401
        return
    finder = _HideBackends()
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:
        with _asyncio_deferred(), _callables_deferred():
            import dependency_injector.containers  # noqa: F401  (imports .providers)
    finally:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
