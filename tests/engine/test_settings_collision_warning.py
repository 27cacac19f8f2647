"""A settings-name clash in a hand-edited settings.json is warned about once per manager, not per attempt.

Spec 000 "Application settings": names sharing one ``HTTK_*`` variable are exported for
neither and the manager warns. A fan-out launches thousands of attempts with the same
settings; one warning per attempt buried the log (2,000 lines for 2,000 children).
"""

from __future__ import annotations

import logging

from httk.workflow import codec
from httk.workflow.testing import memory_manager, memory_workspace

WARNING = "share the environment variable HTTK_A_B_C"


def test_a_clash_is_warned_once_per_manager_however_many_attempts_launch(caplog):
    ports, handle, _ = memory_workspace(jobs=5)
    ports.fs.write_atomic(handle.layout.settings_file, codec.encode({"a.b-c": "x", "a.b_c": "y"}), durable=False)
    caplog.set_level(logging.WARNING, logger="httk.workflow")
    first = memory_manager(handle, manager_id="m-a")  # one worker: the five attempts launch one by one
    first.publish_manifest()
    first.heartbeat(force=True)
    for _ in range(20):
        first.tick()
    assert len(first.proc.processes) == 5
    assert sum(WARNING in record.getMessage() for record in caplog.records) == 1
    # Another manager has not warned yet: it says so once too.
    ops = memory_workspace(jobs=2)
    ops.ports.fs.write_atomic(ops.handle.layout.settings_file, codec.encode({"a.b-c": "x", "a.b_c": "y"}),
                              durable=False)
    caplog.clear()
    second = memory_manager(ops.handle, manager_id="m-b")
    second.publish_manifest()
    second.heartbeat(force=True)
    second.tick()
    assert sum(WARNING in record.getMessage() for record in caplog.records) == 1
