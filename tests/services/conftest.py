from __future__ import annotations

import pytest

from httk.workflow.protocol import JobSpec
from httk.workflow.services.workspaces import WorkspaceHandle, WorkspaceService
from httk.workflow.testing import InMemoryFilesystem, memory_ports

ROOT = "/ws"


@pytest.fixture
def ports():
    return memory_ports()


@pytest.fixture
def handle(ports) -> WorkspaceHandle:
    return WorkspaceService(ports).init(ROOT)


def write_payload(fs: InMemoryFilesystem, path: str, spec: JobSpec | None = None) -> str:
    spec = spec or JobSpec(name="job", workflow="w", runner_path="run.sh", tag="t")
    fs.makedirs(path)
    fs.write_atomic(f"{path}/job.json", spec.to_bytes(), durable=True)
    fs.write_atomic(f"{path}/run.sh", b"#!/bin/sh\n", durable=True)
    return path
