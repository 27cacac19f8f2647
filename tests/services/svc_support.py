"""Shared helpers of the service tests (imported by name; conftest modules must not be)."""

from __future__ import annotations

from httk.workflow.protocol import JobSpec
from httk.workflow.testing import InMemoryFilesystem

ROOT = "/ws"


def write_payload(fs: InMemoryFilesystem, path: str, spec: JobSpec | None = None) -> str:
    spec = spec or JobSpec(name="job", workflow="w", runner_path="run.sh", tag="t")
    fs.makedirs(path)
    fs.write_atomic(f"{path}/job.json", spec.to_bytes(), durable=True)
    fs.write_atomic(f"{path}/run.sh", b"#!/bin/sh\n", durable=True)
    return path
