"""A hand-edited settings.json whose names share one ``HTTK_*`` variable (spec 000 "Application settings").

The manager exports that variable for neither name, never for whichever comes
last, and logs a warning naming both; the other settings are exported as usual.
"""

from __future__ import annotations

import json
from pathlib import Path


def test_a_shared_variable_is_exported_for_neither_and_warned_about(ops):
    Path(ops.handle.layout.settings_file).write_text(json.dumps({"a.b-c": "x", "a.b_c": "y", "v.c": "z"}))
    job = ops.job("""echo "${HTTK_A_B_C-unset} ${HTTK_V_C-unset}" > env.out
publish '"action":"succeed"'""")
    manager = ops.run()
    assert ops.kind(job) == "succeeded"
    assert (ops.workdir(job) / "env.out").read_text().split() == ["unset", "z"]
    assert "settings a.b-c and a.b_c share the environment variable HTTK_A_B_C" in manager.stderr, manager.stderr
