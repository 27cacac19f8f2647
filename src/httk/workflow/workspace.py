"""The public ``Workspace`` facade: what a library caller or a runner author uses.

``Workspace(path)`` attaches an existing workspace with the production ports;
``Workspace(path, ports=...)`` attaches it through other ports (tests pass the
in-memory filesystem and a fake clock). Spec: 000 "Initialize a workspace";
001 "A complete runner".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from .operations.bulk_submission import Progress, submit_many, submit_specs
from .operations.submission import Submitted, submit
from .protocol import JobSpec
from .store.markers import Marker
from .store.runners import publish_runner
from .store.workspaces import Ports, WorkspaceHandle, WorkspaceService


def _default_ports() -> Ports:
    from .bootstrap import default_container

    return default_container().ports()


class Workspace:
    """One workspace directory."""

    def __init__(self, path: str | os.PathLike[str], *, ports: Ports | None = None) -> None:
        self._ports = ports or _default_ports()
        self._handle = WorkspaceService(self._ports).open(_absolute(path, self._ports))

    @classmethod
    def init(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        durable: bool = True,
        ports: Ports | None = None,
    ) -> Workspace:
        """Create a workspace at ``path`` (or adopt the one there) and attach it."""
        chosen = ports or _default_ports()
        WorkspaceService(chosen).init(_absolute(path, chosen), name=name, durable=durable)
        return cls(path, ports=chosen)

    @property
    def handle(self) -> WorkspaceHandle:
        return self._handle

    @property
    def path(self) -> str:
        return self._handle.root

    @property
    def name(self) -> str:
        return self._handle.name

    @property
    def durable(self) -> bool:
        return self._handle.durable

    @property
    def policy(self) -> dict[str, Any]:
        return self._handle.policy

    def set_policy(self, key: str, value: Any) -> dict[str, Any]:
        return self._handle.set_policy(key, value)

    @property
    def settings(self) -> dict[str, Any]:
        return self._handle.settings()

    def set_setting(self, name: str, value: Any) -> None:
        self._handle.set_setting(name, value)

    def publish_runner(
        self, path: str | os.PathLike[str], name: str | None = None, *, replace: bool = False
    ) -> dict[str, Any]:
        """Publish a runner file or directory; returns ``{"path", "sha256", "source": "workspace"}``."""
        source = _absolute(path, self._ports)
        return publish_runner(
            self._ports.fs,
            self._handle.layout,
            source,
            name or os.path.basename(source),
            replace=replace,
            durable=self._handle.durable,
        )

    def submit(
        self,
        payload: str | os.PathLike[str],
        placement: str,
        *,
        move: bool = False,
        tag: str | None = None,
        allow_missing_runner: bool = False,
    ) -> Marker:
        """Submit a prepared payload at ``placement``; returns the job's marker.

        Refused (``SubmissionError``, nothing written) like ``job submit``; ``allow_missing_runner``
        accepts a pinned workspace runner the store lacks, as ``--allow-missing-runner`` does.
        """
        result: Submitted = submit(
            self._handle, _absolute(payload, self._ports), placement, move=move, tag=tag,
            allow_missing_runner=allow_missing_runner,
        )
        return result.marker

    def submit_many(
        self,
        payloads: Iterable[str | os.PathLike[str]],
        placement: str | Sequence[str],
        *,
        move: bool = False,
        tag: str | None = None,
        allow_missing_runner: bool = False,
        progress: Progress | None = None,
    ) -> list[Marker]:
        """Submit many prepared payloads, with grouped syncs; returns their markers in order.

        ``placement`` is one placement for all or one per payload. The jobs are what one
        :meth:`submit` per payload makes; a crash leaves each submitted in full or absent.
        One payload that cannot be submitted refuses the whole batch (``SubmissionError``
        naming it, nothing written). ``progress(phase, jobs)`` is told as jobs pass each
        phase (``checking``, ``reserving``, ``copying``, ``publishing``).
        """
        results = submit_many(
            self._handle, [_absolute(payload, self._ports) for payload in payloads], placement, move=move, tag=tag,
            allow_missing_runner=allow_missing_runner, progress=progress,
        )
        return [result.marker for result in results]

    def submit_specs(
        self,
        specs: Iterable[JobSpec],
        placement: str | Sequence[str],
        *,
        tag: str | None = None,
        allow_missing_runner: bool = False,
        progress: Progress | None = None,
    ) -> list[Marker]:
        """Submit one job per definition in one pass, with grouped syncs; returns their markers in order.

        The jobs are what ``prepare_job_payloads`` of each spec then :meth:`submit_many`
        (``move=True``) make, without the payload directories: each job.json is written
        straight into the workspace's staging area. Refused (``SubmissionError`` naming the
        spec, nothing written) as :meth:`submit_many` refuses; the same crash guarantee.
        """
        results = submit_specs(
            self._handle, list(specs), placement, tag=tag, allow_missing_runner=allow_missing_runner,
            progress=progress,
        )
        return [result.marker for result in results]


def _absolute(path: str | os.PathLike[str], ports: Ports) -> str:
    text = os.fspath(path)
    if text.startswith("/"):
        return os.path.normpath(text)
    return os.path.normpath(os.path.join(os.getcwd(), text))
