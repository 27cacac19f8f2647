"""A NUL (or other control character) in a runner's manifest or a workspace setting fails one job, not the manager.

Issue 10: a transaction manifest naming ``a\\x00b`` made the commit raise
``embedded null byte``, and a setting holding NUL made every launch raise, so
every later manager died on the same document. Now the manifest is refused as
that job's ``transaction_error`` (like any other invalid destination), a NUL
setting is refused by ``settings set``, and one written by hand fails each job
with ``setting_invalid`` while the manager goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

SUCCEED = """publish '"action":"succeed"'"""

#: A runner that stages one put by hand, its destination given as JSON text.
MANIFEST_RUNNER = r"""
d="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.$$"; mkdir -p "$d/transaction/files"
echo data > "$d/transaction/files/op-0001"
printf '{"format":"httk-workflow-transaction","format_version":1,"operations":[%s]}\n' \
  '{"id":"op-0001","op":"put","destination":DEST,"source":"files/op-0001"}' > "$d/transaction/manifest.json"
printf '{"format":"httk-workflow-outcome","format_version":1,"action":"succeed"}\n' > "$d/outcome.json"
mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"
"""


def test_a_manifest_destination_with_a_control_character_fails_that_job_only(ops):
    bad = {
        name: ops.job(MANIFEST_RUNNER.replace("DEST", destination), data_mode="transactional")
        for name, destination in (("nul", r'"a\u0000b"'), ("newline", r'"a\nb"'))
    }
    good = ops.job(SUCCEED)
    manager = ops.run()
    assert "Traceback" not in manager.stderr, manager.stderr
    assert ops.kind(good) == "succeeded"
    for name, job in bad.items():
        assert ops.kind(job) == "failed", name
        failure = ops.frame(job).failure
        assert failure.code == "transaction_error" and "control character" in failure.message, failure
        assert not list(Path(ops.handle.layout.data_dir(job)).glob("current/a*")), name
    # The refused outcome stays on disk: the next manager must not trip over it either.
    later = ops.job(SUCCEED)
    ops.run()
    assert ops.kind(later) == "succeeded"


def test_settings_set_refuses_a_nul_value_and_writes_nothing(ops):
    settings = Path(ops.handle.layout.settings_file)
    before = settings.read_bytes() if settings.exists() else None
    for value in (r'"a\u0000b"', r'{"x": ["ok", "a\u0000b"]}', "NaN"):
        refused = ops.httk("workspace", "settings", "set", str(ops.root), "app.command", value, code=2)
        assert refused.stderr.startswith("error: ") and "app.command" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert (settings.read_bytes() if settings.exists() else None) == before


def test_a_hand_written_nul_setting_fails_each_launch_not_the_manager(ops):
    Path(ops.handle.layout.settings_file).write_text(json.dumps({"app.command": "srun\u0000vasp"}) + "\n")
    first, second = ops.job(SUCCEED), ops.job(SUCCEED)
    manager = ops.run()
    assert "Traceback" not in manager.stderr, manager.stderr
    for job in (first, second):
        assert ops.kind(job) == "failed"
        failure = ops.frame(job).failure
        assert failure.code == "setting_invalid" and "app.command" in failure.message, failure
    why = ops.httk("job", "why", str(ops.root), first).stdout
    assert "setting_invalid" in why and "NUL" in why
    # Fixed by the operator, the job runs when continued.
    ops.httk("workspace", "settings", "set", str(ops.root), "app.command", "srun vasp")
    ops.request(first, "continue")
    ops.run()
    assert ops.kind(first) == "succeeded"
