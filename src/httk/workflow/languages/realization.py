"""Which realization runs a job, and what each workflow language needs: the pure part of ``languages/``.

A job's *realization* says what runs it. It is read off the runner the job pins,
so it cannot drift from what a manager will start:

- ``language``: the runner is a packaged language engine, published in the
  workspace runner store under ``languages/<language>`` (``languages/jobflow``);
  the engine's Python modules come from a pip extra (``httk-workflow[jobflow]``)
  that must be installed where the job *runs*, not where it is submitted;
- ``httk-v1``: the runner is the packaged httk v1 runner, ``compat/httk-v1``,
  which executes an unchanged v1 ``ht_steps`` (see docs/v1_compatibility.md);
- ``native``: every other runner.

This is the one module of ``languages/`` that ``operations/`` imports: it does no
I/O and imports no engine (whether an engine's modules are installed is asked
through the ``find`` callable the caller passes, ``Ports.find_module`` in a
service). The runner-side modules (``jobflow_runner``, ``v1_runner``) run inside
attempts. Spec: 000 "precheck" (the collect gate's ``workflow_realization =
language`` pair), "Runner contract" (httk v1).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

import attrs

#: The runner-store prefix of packaged language engines, and the name of the packaged v1 runner.
LANGUAGE_PREFIX = "languages"
V1_RUNNER_NAME = "compat/httk-v1"
NATIVE = "native"
LANGUAGE = "language"
HTTK_V1 = "httk-v1"
REALIZATIONS = (NATIVE, LANGUAGE, HTTK_V1)


@attrs.frozen
class Language:
    """One workflow language: the engine modules it needs and the pip extra that brings them."""

    name: str
    #: Top-level modules the engine imports; all must be findable where the job runs.
    modules: tuple[str, ...]
    #: The ``httk-workflow[<extra>]`` that installs them.
    extra: str

    @property
    def runner_name(self) -> str:
        return f"{LANGUAGE_PREFIX}/{self.name}"

    @property
    def install_hint(self) -> str:
        return f"pip install 'httk-workflow[{self.extra}]'"


LANGUAGES: Mapping[str, Language] = {
    "jobflow": Language("jobflow", ("jobflow", "monty", "maggma"), "jobflow"),
}


@attrs.frozen
class Realization:
    """What realizes one job: ``kind`` is one of :data:`REALIZATIONS`; ``language`` names a language job's engine."""

    kind: str
    language: str | None = None

    def describe(self) -> str:
        return f"{self.kind} ({self.language})" if self.language else self.kind

    def to_json(self) -> dict[str, Any]:
        return {"workflow_realization": self.kind, "language": self.language}


def realization_of(runner_source: str, runner_path: str) -> Realization:
    """The realization of a job whose runner is ``(runner_source, runner_path)``."""
    if runner_source == "workspace":
        head, _, name = runner_path.partition("/")
        if head == LANGUAGE_PREFIX and name in LANGUAGES:
            return Realization(LANGUAGE, name)
        if runner_path == V1_RUNNER_NAME:
            return Realization(HTTK_V1)
    return Realization(NATIVE)


def missing_modules(language: Language, find: Callable[[str], Any]) -> list[str]:
    """The engine modules of ``language`` that ``find`` (``importlib.util.find_spec``) cannot find."""
    missing = []
    for module in language.modules:
        try:
            found = find(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            missing.append(module)
    return missing


def packaged_runner_dir(name: str) -> str:
    """The directory of a packaged runner of this subpackage, ``jobflow`` or ``httk_v1`` (a path, nothing read)."""
    return posixpath.join(posixpath.dirname(posixpath.abspath(__file__)), name)
