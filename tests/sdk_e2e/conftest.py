"""A real workspace and a real manager for end-to-end tests of the Python runner SDK.

Every test here writes a tiny runner file, publishes it in a fresh workspace,
submits a job that runs it, and lets :func:`httk.workflow.bootstrap.build_manager`
launch real attempts until the workspace is idle. What the runner did is then
read back from the workspace tree and through ``services.inspection``, exactly as
an operator would. Helpers are reached through the :class:`Harness` fixture,
never by ``from conftest import ...``, which would depend on which of the
suite's several ``conftest`` modules pytest imported last.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from httk.workflow import JobSpec, prepare_job_payload
from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.operations import inspection
from httk.workflow.store.markers import Marker
from httk.workflow.workspace import Workspace

#: Prepended to every runner a test writes.
RUNNER_HEADER = """\
import json
import os
import sys
from pathlib import Path

from httk.workflow import ChildSpec, Runner, RunnerRef


def save(a, document, name="report.json"):
    # Leave evidence for the test beside the attempt's outcome.
    (a.control / name).write_text(json.dumps(document, sort_keys=True, default=str), encoding="utf-8")


def publish_raw(a, **members):
    # Publish an outcome.json past the SDK's checks, as a hand-written runner would: a draft, then the rename.
    draft = a.control / "outcome.tmp.raw"
    draft.mkdir()
    outcome = {"format": "httk-workflow-outcome", "format_version": 1, "attempt_id": a.context.attempt_id,
               "step": a.step, **members}
    (draft / "outcome.json").write_text(json.dumps(outcome), encoding="utf-8")
    os.rename(draft, a.control / "outcome.ready")
"""

#: Environment variables of an attempt that must not leak from the test process into a runner.
_LEAKY = ("HTTK_WORKFLOW_", "HTTK_VASP_", "HTTK_E2E_")


class Harness:
    """One workspace below ``tmp_path`` plus the verbs an end-to-end test needs."""

    def __init__(self, tmp_path: Path, *, durable: bool = False) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "ws"
        self.ws = Workspace.init(self.root, durable=durable)
        self._count = 0
        self.last_status: int | None = None

    # -- setting up ----------------------------------------------------------------------
    def write_runner(self, body: str, name: str = "run.py", *, sdk_main: bool = True) -> Path:
        """Write ``RUNNER_HEADER`` + the dedented ``body`` (+ the ``run.main()`` entry point) to a fresh file."""
        self._count += 1
        path = self.tmp / "runners" / str(self._count) / name
        path.parent.mkdir(parents=True)
        text = RUNNER_HEADER + "\n" + textwrap.dedent(body).strip("\n") + "\n"
        if sdk_main and "\nif __name__ == " not in text:
            text += '\n\nif __name__ == "__main__":\n    raise SystemExit(run.main())\n'
        path.write_text(text, encoding="utf-8")
        return path

    def publish(self, body: str, name: str = "run.py", *, sdk_main: bool = True) -> dict[str, Any]:
        """Write a runner and publish it in the workspace runner store; returns ``{path, sha256, source}``."""
        path = self.write_runner(body, sdk_main=sdk_main)
        return self.ws.publish_runner(path, name=f"{self._count}/{name}")

    def prepare(
        self,
        runner: dict[str, Any],
        *,
        step: str = "main",
        inputs: dict[str, Any] | None = None,
        files: dict[str, str] | None = None,
        **spec: Any,
    ) -> Path:
        """A prepared payload directory (job.json plus ``files``) that runs ``runner`` at ``step``."""
        self._count += 1
        payload = self.tmp / "payloads" / str(self._count)
        members: dict[str, Any] = {
            "name": f"job {self._count}",
            "workflow": "e2e",
            "runner_source": runner.get("source", "workspace"),
            "runner_path": str(runner["path"]),
            "runner_sha256": runner.get("sha256"),
            "initial_step": step,
            "inputs": dict(inputs or {}),
        }
        members.update(spec)
        prepare_job_payload(payload, JobSpec(**members), durable=False)
        for relative, text in (files or {}).items():
            target = payload / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return payload

    def submit(
        self,
        runner: dict[str, Any],
        *,
        placement: str = "proj/a",
        tag: str | None = None,
        **prepare: Any,
    ) -> Marker:
        """Prepare a payload for ``runner`` and submit it; returns the job's first marker."""
        return self.ws.submit(self.prepare(runner, **prepare), placement, tag=tag)

    # -- running ---------------------------------------------------------------------------
    def run(self, **config: Any) -> int:
        """Run a real manager over the workspace until it is idle; returns its exit status."""
        settings: dict[str, Any] = {"workers": 2, "poll_interval": 0.05, "kill_grace": 2.0}
        settings.update(config)
        manager = build_manager(default_container(), self.ws.handle, ManagerConfig(**settings))
        manager.out = lambda _line: None
        self.last_status = manager.run()
        return self.last_status

    def finish(self, job: Marker, kind: str, **config: Any) -> dict[str, Any]:
        """Run the manager until idle (it must exit 0); ``job show`` of ``job``, which must have ended ``kind``."""
        assert self.run(**config) == 0
        show = self.show(job)
        assert show["kind"] == kind, self.describe(job)
        return show

    # -- reading back ----------------------------------------------------------------------
    def marker(self, job: Marker | str) -> Marker:
        selector = job.job_id if isinstance(job, Marker) else job
        return inspection.resolve_job(self.ws.handle, selector)

    def show(self, job: Marker | str) -> dict[str, Any]:
        return inspection.show_job(self.ws.handle, self.marker(job))

    def log(self, job: Marker | str) -> list[dict[str, Any]]:
        return inspection.job_log(self.ws.handle, self.marker(job))

    def events(self, job: Marker | str) -> list[str]:
        return [str(entry.get("event")) for entry in self.log(job)]

    def jobs(self) -> list[dict[str, Any]]:
        """Every job of the workspace (summaries from marker names), sorted by tag then key."""
        return sorted(inspection.list_jobs(self.ws.handle), key=lambda job: (job["tag"] or "", job["job_key"]))

    def payload(self, job: Marker | str) -> Path:
        marker = self.marker(job)
        return self.root / marker.placement / str(marker.key)

    def workdir(self, job: Marker | str) -> Path:
        """The persistent workdir of a job."""
        return self.root / ".httk-workflow" / "workdirs" / self.marker(job).job_id

    def data(self, job: Marker | str) -> Path:
        return self.root / ".httk-workflow" / "data" / self.marker(job).job_id / "current"

    def attempts(self, job: Marker | str) -> list[Path]:
        """The attempt control directories of a job, oldest first."""
        directory = self.root / ".httk-workflow" / "attempts" / self.marker(job).job_id
        if not directory.is_dir():
            return []
        return sorted(path for path in directory.iterdir() if path.is_dir())

    def state(self, job: Marker | str) -> dict[str, Any]:
        path = self.payload(job) / ".httk-job" / "state.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def report(self, job: Marker | str, attempt: int = -1, name: str = "report.json") -> Any:
        """A JSON file a runner wrote into its attempt control directory (``a.control / name``)."""
        return json.loads((self.attempts(job)[attempt] / name).read_text(encoding="utf-8"))

    def child(self, parent: Marker | str, label: str) -> dict[str, Any]:
        """``job show`` of the child a parent spawned under ``label`` (tag == label)."""
        parent_id = self.marker(parent).job_id
        for job in self.jobs():
            if job["tag"] != label:
                continue
            link = self.root / job["placement"] / job["job_key"] / ".httk-job" / "parent.json"
            if link.exists() and json.loads(link.read_text(encoding="utf-8"))["job_id"] == parent_id:
                return self.show(job["job_id"])
        raise AssertionError(f"no child labelled {label!r} of {parent_id}; jobs: {self.jobs()}")

    def describe(self, job: Marker | str) -> str:
        """Everything useful for an assertion message: the job, its log events and its attempts' stderr."""
        lines = [json.dumps({k: v for k, v in self.show(job).items() if k in ("kind", "step", "failure")})]
        lines.append(" ".join(self.events(job)))
        for control in self.attempts(job):
            for name in ("stderr.log", "error.json"):
                path = control / name
                if path.exists() and path.stat().st_size:
                    lines.append(f"--- {control.name}/{name}\n{path.read_text(encoding='utf-8')[-2000:]}")
        return "\n".join(lines)


@pytest.fixture(autouse=True)
def _clean_attempt_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runners inherit the manager's environment: keep this process's HTTK_* variables out of it."""
    for name in list(os.environ):
        if name.startswith(_LEAKY):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


@pytest.fixture
def durable_harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path, durable=True)
