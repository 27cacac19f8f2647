"""A job.json that breaks a definition rule is that job's problem in the manager, never a crash.

The payloads below reached the workspace without ``job submit`` (an older writer, a
copy by hand, a shared filesystem): a priority no marker name can carry, and unknown
members inside ``claim``/``workdir``/``data``. The manager must serve the good job,
count the bad ones as unreadable definitions and leave them as ``invalid_job``.
Spec: 000 "Submit a job"; issue 10 "Per-job fault isolation".
"""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.domain.model import JobKey
from httk.workflow.protocol import JobSpec
from httk.workflow.store.store import JobDamage
from httk.workflow.testing import memory_manager, memory_workspace

GOOD = JobSpec(name="j", workflow="w", runner_path="run.sh")


def plant(handle, job_id: str, changes: dict) -> JobKey:
    """A payload whose job.json has ``changes`` merged in, and its submitted marker, bypassing submission."""
    document = GOOD.to_document()
    for key, value in changes.items():
        document[key] = {**document[key], **value} if isinstance(value, dict) else value
    key = JobKey(job_id, None)
    payload = handle.layout.payload("p", str(key))
    handle.fs.makedirs(payload)
    handle.fs.write_atomic(f"{payload}/job.json", codec.encode(document), durable=False)
    handle.fs.write_atomic(f"{payload}/run.sh", b"#!/bin/sh\n", durable=False)
    handle.store.create_submitted("p", key, 0)
    return key


BAD = [
    ({"priority": 10**250}, "$.priority"),
    ({"data": {"mdoe": "transactional"}}, "$.data.mdoe"),
    ({"workdir": {"mdoe": "isolated"}}, "$.workdir.mdoe"),
    ({"claim": {"poool": "gpu"}}, "$.claim.poool"),
]


@pytest.mark.parametrize(("changes", "member"), BAD, ids=[member for _, member in BAD])
def test_a_bad_definition_is_refused_for_its_job_and_the_manager_serves_the_rest(changes, member):
    _ports, handle, [good] = memory_workspace()  # GOOD's job
    bad = plant(handle, "00000000-0000-4000-8000-00000000bad0", changes)
    lines: list[str] = []
    manager = memory_manager(handle, out=lines.append)

    assert manager.run() == 0
    [succeeded] = handle.store.iter_markers(StateKind.SUCCEEDED)
    assert succeeded.key == good.key
    [stuck] = handle.store.iter_markers(StateKind.SUBMITTED)
    assert stuck.key == bad
    with pytest.raises(JobDamage) as caught:
        handle.store.read_spec(stuck)
    assert caught.value.code == "invalid_job" and f"@ {member}:" in str(caught.value)
    assert any("1 with an unreadable definition" in line for line in lines), lines
