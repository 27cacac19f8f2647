"""The workflows that ship with httk-workflow, one runner directory each.

Every directory here holding a ``workflow.json`` is one shipped workflow: the
document names it and declares its inputs, settings and job defaults
(``httk-workflow-workflow`` version 1, see
:mod:`httk.workflow.operations.workflows`), and ``run.py`` beside it is the
runner. ``httk workflow job new`` publishes such a directory into the
workspace runner store under ``shipped/<name>`` and pins the job to its digest,
so the runner travels with a transferred job. ``vasp_static/run.py`` is the
same program as ``vasp_relax/run.py``: the VASP runner takes its workflow name
and its default INCAR from the ``workflow.json`` beside it. See
docs/vasp_runners.md "Shipped workflows".
"""

from __future__ import annotations

import os

SHIPPED_WORKFLOWS = os.path.dirname(os.path.abspath(__file__))
"""The directory holding the shipped workflow directories."""
