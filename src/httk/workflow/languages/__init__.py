"""Job realizations beyond native runners: workflow-language jobs and converted httk v1 tasks.

Three kinds of module live here, and tests/test_layering.py holds them apart:

- pure helpers ``operations/`` may import: :mod:`.realization` (which runner
  realizes a job, what each language needs; re-exported here), :mod:`.v1_format`
  (the v1 task format) and :mod:`.jobflow_codec` (jobflow objects as JSON);
- :mod:`.installation`: what this interpreter can find, for the CLI and the
  composition root;
- the runner side, run inside attempts and building their own adapters:
  :mod:`.jobflow_runner`, :mod:`.v1_runner` and the packaged ``run.py`` programs.
"""

from __future__ import annotations

from .realization import (
    HTTK_V1,
    LANGUAGE,
    LANGUAGE_PREFIX,
    LANGUAGES,
    NATIVE,
    REALIZATIONS,
    V1_RUNNER_NAME,
    Language,
    Realization,
    missing_modules,
    packaged_runner_dir,
    realization_of,
)

__all__ = [
    "HTTK_V1", "LANGUAGE", "LANGUAGE_PREFIX", "LANGUAGES", "NATIVE", "REALIZATIONS", "V1_RUNNER_NAME",
    "Language", "Realization", "missing_modules", "packaged_runner_dir", "realization_of",
]
