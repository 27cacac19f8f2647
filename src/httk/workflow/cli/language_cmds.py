"""``job new --language jobflow --flow module:function``: a workflow-language flow becomes jobs.

``--flow`` names a function (``package.module:function``, imported from the
current directory and ``PYTHONPATH``) that returns a jobflow ``Flow`` or
``Job``; it is called with no arguments, and the flow is submitted as one
conductor job that spawns one job per jobflow ``Job`` while it runs
(:func:`..operations.language_jobs.submit_flow`). The modules the flow needs
that are not installed (the current directory's, ``PYTHONPATH``'s) travel in the
job's inputs, so a manager that cannot import them still runs it. Nothing here imports jobflow
until a language job is asked for, so the CLI starts without it. Spec: 000
"precheck" (language jobs); docs/jobflow.md.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from ..languages import LANGUAGES
from ..languages.installation import local_module_sources, missing_modules
from .render import emit_json, refuse


def load_flow(reference: str) -> Any:
    """Call the ``module:function`` ``reference`` and return what it returns; refusals name the fix."""
    module_name, colon, function_name = reference.partition(":")
    if not colon or not module_name or not function_name:
        refuse(f"--flow {reference!r}: expected MODULE:FUNCTION, e.g. --flow mypackage.flows:make_flow")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: a module in the current directory is found
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        refuse(f"--flow {reference!r}: cannot import {module_name!r} ({error}); put it on PYTHONPATH or run "
               "from its directory")
    factory = getattr(module, function_name, None)
    if not callable(factory):
        refuse(f"--flow {reference!r}: module {module_name!r} has no function {function_name!r}")
    try:
        return factory()
    except Exception as error:  # noqa: BLE001 - the user's factory; its failure is a refusal naming it
        refuse(f"--flow {reference!r}: {function_name}() raised {type(error).__name__}: {error}")


def new_language_job(
    handle: Any, language: str, flow_reference: str | None, *, tag: str | None, placement: str | None,
    as_json: bool,
) -> None:
    """Submit the flow ``flow_reference`` of ``language`` into ``handle``'s workspace and print the job id."""
    from ..operations.language_jobs import DEFAULT_PLACEMENT, LanguageJobError, submit_flow
    from ..operations.submission import SubmissionError

    known = LANGUAGES.get(language)
    if known is None:
        refuse(f"--language {language!r}: unknown language; known: {', '.join(sorted(LANGUAGES))}")
    if not flow_reference:
        refuse(f"--language {language} needs --flow MODULE:FUNCTION (a function returning the flow)")
    missing = missing_modules(known)
    if missing:
        refuse(f"--language {language}: the {language} engine is not installed ({', '.join(missing)} missing); "
               f"{known.install_hint}")
    flow = load_flow(flow_reference)
    try:
        # The flow's own modules (the current directory's, PYTHONPATH's) travel with the job.
        submitted = submit_flow(handle, flow, placement=placement or DEFAULT_PLACEMENT, tag=tag,
                                module_sources=local_module_sources)
    except (LanguageJobError, SubmissionError) as error:
        refuse(str(error))
    if submitted.warning:
        click.echo(f"warning: {submitted.warning}", err=True)
    marker = submitted.marker
    if not as_json:
        click.echo(str(marker.key))  # the tag--uuid key, as 'job submit' prints it
        return
    spec = submitted.spec
    emit_json({
        "job_id": marker.job_id, "job_key": str(marker.key), "kind": marker.kind.value,
        "placement": marker.placement, "workflow": spec.workflow, "workflow_realization": "language",
        "language": language, "flow": flow_reference, "runner": spec.runner, "payload": submitted.payload,
        "workspace": handle.root,
    })
