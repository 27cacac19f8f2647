"""A hand-built attempt on disk, laid out exactly as docs/workflow_filesystem_api.md says a manager does.

:func:`attempt_factory` (the ``make_attempt`` fixture of tests/conftest.py) writes a
payload (via ``prepare_job_payload``), a control directory with ``context.json``
and a workdir below a temporary workspace, and sets the ``HTTK_WORKFLOW_*``
variables, so ``Runner.main`` and the Bash SDK run as if launched by a manager.
``FakeAttempt.next`` lays out the following attempt of the same job (same payload
and persistent workdir, new control directory). Shared by the Python SDK tests
(tests/sdk) and the Bash SDK tests (tests/shell); imported by name.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from httk.workflow import codec
from httk.workflow.protocol import JobSpec, prepare_job_payload

RUNNER_SHA = "ab" * 32
ENV_VARS = (
    "HTTK_WORKFLOW_CONTEXT",
    "HTTK_WORKFLOW_CONTROL_DIR",
    "HTTK_WORKFLOW_JOB_DIR",
    "HTTK_WORKFLOW_WORKDIR",
    "HTTK_WORKFLOW_WORKSPACE_DIR",
    "HTTK_WORKFLOW_DATA_DIR",
    "HTTK_WORKFLOW_STEP",
    "HTTK_WORKFLOW_DURABLE",
    "HTTK_WORKFLOW_JOB_ID",
    "HTTK_WORKFLOW_ATTEMPT_ID",
    "HTTK_WORKFLOW_DESCRIBE",
)


def workspace_spec(**changes: Any) -> JobSpec:
    """A job whose runner is a shared workspace runner, so ChildSpec can inherit it."""
    base: dict[str, Any] = {
        "name": "Parent",
        "workflow": "demo",
        "runner_source": "workspace",
        "runner_path": "demo/run.py",
        "runner_sha256": RUNNER_SHA,
        "initial_step": "start",
    }
    base.update(changes)
    return JobSpec(**base)


class FakeAttempt:
    """The paths of one laid-out attempt plus readers for what the runner left behind."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        workspace: Path,
        payload: Path,
        workdir: Path,
        spec: JobSpec,
        *,
        job_id: str,
        placement: str,
    ) -> None:
        self.monkeypatch = monkeypatch
        self.workspace = workspace
        self.payload = payload
        self.workdir = workdir
        self.spec = spec
        self.job_id = job_id
        self.placement = placement
        self.ordinal = 0
        self.control = workspace
        self.attempt_id = ""
        self.data: Path | None = None

    def next(
        self,
        step: str,
        *,
        children: list[dict[str, Any]] | None = None,
        settings: dict[str, Any] | None = None,
        durable: bool = False,
    ) -> FakeAttempt:
        """Lay out the next attempt of this job at ``step`` and point the environment at it."""
        self.ordinal += 1
        self.attempt_id = str(uuid.uuid4())
        control_root = self.workspace / ".httk-workflow" / "attempts" / self.job_id
        self.control = control_root / f"{self.ordinal:04d}-{self.attempt_id}"
        self.control.mkdir(parents=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.spec.data_mode == "transactional":
            self.data = self.workspace / ".httk-workflow" / "data" / self.job_id / "current"
            self.data.mkdir(parents=True, exist_ok=True)
        context = {
            "format": "httk-workflow-attempt-context",
            "format_version": 1,
            "workspace": str(self.workspace),
            "workspace_id": "0123456789ab",
            "job_id": self.job_id,
            "job_key": self.payload.name,
            "placement": self.placement,
            "step": step,
            "activation_id": str(uuid.uuid4()),
            "activation_ordinal": 1,
            "attempt_id": self.attempt_id,
            "attempt_ordinal": self.ordinal,
            "total_attempts": self.ordinal,
            "payload": str(self.payload),
            "workdir": str(self.workdir),
            "data": str(self.data) if self.data else None,
            "control": str(self.control),
            "durable": durable,
            "workdir_mode": self.spec.workdir_mode,
            "data_mode": self.spec.data_mode,
            "manager_id": "manager-1",
            "host": "localhost",
            "created_at": 1700000000.0,
            "runner": self.spec.runner,
            "settings": settings or {},
            "restart": {"previous_attempt_id": None, "unclean": False, "takeover": None},
            "children": children or [],
        }
        (self.control / "context.json").write_bytes(codec.encode(context))
        env = {
            **self.path_env(),
            "HTTK_WORKFLOW_STEP": step,
            "HTTK_WORKFLOW_DURABLE": "1" if durable else "0",
            "HTTK_WORKFLOW_JOB_ID": self.job_id,
            "HTTK_WORKFLOW_ATTEMPT_ID": self.attempt_id,
        }
        for name in ENV_VARS:
            self.monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        if self.data is not None:
            self.monkeypatch.setenv("HTTK_WORKFLOW_DATA_DIR", str(self.data))
        return self

    def path_env(self) -> dict[str, str]:
        """The variables naming this attempt's context, directories and workspace (what ``initialize`` needs)."""
        return {
            "HTTK_WORKFLOW_CONTEXT": str(self.control / "context.json"),
            "HTTK_WORKFLOW_CONTROL_DIR": str(self.control),
            "HTTK_WORKFLOW_JOB_DIR": str(self.payload),
            "HTTK_WORKFLOW_WORKDIR": str(self.workdir),
            "HTTK_WORKFLOW_WORKSPACE_DIR": str(self.workspace),
        }

    @property
    def ready(self) -> Path:
        return self.control / "outcome.ready"

    def outcome(self) -> dict[str, Any]:
        """outcome.json, after checking it is byte-for-byte canonical."""
        data = (self.ready / "outcome.json").read_bytes()
        document = json.loads(data)
        assert data == codec.encode(document)
        return document

    def spawned(self) -> dict[str, Any]:
        return json.loads((self.ready / "children" / "spawn.json").read_bytes())

    def drafts(self) -> list[Path]:
        return sorted(self.control.glob("outcome.tmp.*"))

    def expected(self, action: str, steps: list[str] | None, **members: Any) -> dict[str, Any]:
        """The outcome document a Runner with ``steps`` publishes for ``action``."""
        step = json.loads((self.control / "context.json").read_bytes())["step"]
        return {
            "format": "httk-workflow-outcome",
            "format_version": 1,
            "action": action,
            "attempt_id": self.attempt_id,
            "step": step,
            "runner_steps": steps,
            **members,
        }


def attempt_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeAttempt]:
    """``make(step, spec=..., children=..., settings=...)`` -> :class:`FakeAttempt`, below ``tmp_path/ws``.

    Clears the ``HTTK_WORKFLOW_*`` variables of :data:`ENV_VARS` first (``monkeypatch`` restores them).
    """

    def make(
        step: str = "start",
        *,
        spec: JobSpec | None = None,
        placement: str = "project/a",
        children: list[dict[str, Any]] | None = None,
        settings: dict[str, Any] | None = None,
        durable: bool = False,
        payload_files: dict[str, str] | None = None,
    ) -> FakeAttempt:
        spec = spec or workspace_spec()
        workspace = tmp_path / "ws"
        job_id = str(uuid.uuid4())
        payload = workspace / placement / f"{spec.tag}--{job_id}" if spec.tag else workspace / placement / job_id
        prepare_job_payload(payload, spec, durable=False)
        for name, text in (payload_files or {}).items():
            (payload / name).parent.mkdir(parents=True, exist_ok=True)
            (payload / name).write_text(text, encoding="utf-8")
        workdir = workspace / ".httk-workflow" / "workdirs" / job_id
        attempt = FakeAttempt(monkeypatch, workspace, payload, workdir, spec, job_id=job_id, placement=placement)
        return attempt.next(step, children=children, settings=settings, durable=durable)

    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return make
