"""Where everything lives in a workspace: one place that spells every path.

Spec: docs/workflow_filesystem_api.md "Workspace layout".
"""

from __future__ import annotations

import posixpath

import attrs

from ..domain.lifecycle import StateKind
from ..domain.model import CONTROL_DIR


@attrs.frozen
class Layout:
    """Absolute paths of one workspace."""

    root: str

    @classmethod
    def at(cls, root: str) -> Layout:
        return cls(posixpath.normpath(root))

    @property
    def control(self) -> str:
        return f"{self.root}/{CONTROL_DIR}"

    @property
    def format_file(self) -> str:
        return f"{self.control}/format.json"

    @property
    def settings_file(self) -> str:
        return f"{self.control}/settings.json"

    @property
    def state(self) -> str:
        return f"{self.control}/state"

    def kind_dir(self, kind: StateKind | str) -> str:
        return f"{self.state}/{StateKind(kind).value}"

    @property
    def journal(self) -> str:
        return f"{self.control}/journal"

    @property
    def runners(self) -> str:
        return f"{self.control}/runners"

    @property
    def attempts(self) -> str:
        return f"{self.control}/attempts"

    def job_attempts(self, job_id: str) -> str:
        return f"{self.attempts}/{job_id}"

    def attempt_dir(self, job_id: str, ordinal: int, attempt_id: str) -> str:
        return f"{self.attempts}/{job_id}/{ordinal:04d}-{attempt_id}"

    def persistent_workdir(self, job_id: str) -> str:
        return f"{self.control}/workdirs/{job_id}"

    def data_dir(self, job_id: str) -> str:
        return f"{self.control}/data/{job_id}"

    @property
    def managers(self) -> str:
        return f"{self.control}/managers"

    @property
    def requests(self) -> str:
        return f"{self.control}/requests"

    @property
    def tmp(self) -> str:
        return f"{self.control}/tmp"

    @property
    def ids(self) -> str:
        return f"{self.control}/ids"

    def id_reservation(self, job_id: str) -> str:
        """The workspace-wide reservation of ``job_id`` (a lowercase uuid), fanned out by its first two digits."""
        return f"{self.ids}/{job_id[:2]}/{job_id}"

    @property
    def quarantine(self) -> str:
        return f"{self.control}/quarantine"

    def payload(self, placement: str, job_key: str) -> str:
        return f"{self.root}/{placement}/{job_key}"
