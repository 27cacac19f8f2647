"""``collect``: reading results rather than status.

An exhaustive, streaming walk (like ``fsck`` or ``job list``, never part of a
tick): each job becomes one :class:`CollectedJob` summary — identity, outcome,
where its results are, its state, its declarations and its realization
(``workflow_realization``: ``native``, ``language`` or ``httk-v1``) — or, with ``raw``, one
:class:`JobRecord` holding the marker, the journalled frame and ``job.json`` as
they are on disk, for a data layer. Spec: 000 "Inspecting jobs" (collecting).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from .. import codec
from ..domain.lifecycle import TERMINAL_KINDS, StateKind
from ..domain.scheduling import placement_matches
from ..languages.realization import NATIVE, realization_of
from ..store.markers import Marker
from ..store.store import JobDamage
from ..store.workspaces import WorkspaceHandle


@attrs.frozen
class CollectedJob:
    """One job's results, as a data consumer wants them."""

    job_key: str
    job_id: str
    placement: str
    kind: str
    name: str | None
    workflow: str | None
    step: str | None
    failure: dict[str, Any] | None
    payload: str
    workdir: str | None
    data: str | None
    state: dict[str, Any]
    declarations: dict[str, Any]
    damage: str | None = None
    #: What runs the job: ``native``, ``language`` (with ``language``: ``jobflow``) or ``httk-v1``.
    workflow_realization: str = NATIVE
    language: str | None = None


@attrs.frozen
class JobRecord:
    """One job exactly as stored: marker name, frame document and job.json document."""

    marker: str
    kind: str
    placement: str
    frame: dict[str, Any] | None
    job: dict[str, Any] | None
    damage: str | None = None


def _read_json(handle: WorkspaceHandle, path: str) -> Any:
    """A runner-written document, or ``None`` when it is absent, malformed, or not a small regular file."""
    try:
        return codec.decode(handle.fs.read_document(path), path)
    except (OSError, codec.DocumentError):
        return None


def _markers(
    handle: WorkspaceHandle, kinds: Sequence[StateKind] | None, placement: str | None
) -> Iterator[Marker]:
    chosen = kinds if kinds else [kind for kind in StateKind if kind in TERMINAL_KINDS]
    for kind in chosen:
        for marker in handle.store.iter_markers(kind):
            if placement is None or placement_matches(marker.placement, (placement,)):
                yield marker


def _workdir(handle: WorkspaceHandle, marker: Marker, mode: str | None) -> str | None:
    if mode == "isolated":
        attempts = sorted(entry.path for entry in handle.fs.scandir(handle.layout.job_attempts(marker.job_id)))
        return f"{attempts[-1]}/workdir" if attempts else None
    path = handle.layout.persistent_workdir(marker.job_id)
    return path if handle.fs.exists(path) else None


def collect(
    handle: WorkspaceHandle, *, kinds: Sequence[StateKind] | None = None, placement: str | None = None
) -> Iterator[CollectedJob]:
    """Summaries of the terminal jobs (or of ``kinds``), streamed in marker order."""
    for marker in _markers(handle, kinds, placement):
        payload = handle.layout.payload(marker.placement, str(marker.key))
        damage = None
        try:
            view = handle.store.read_job(marker)
            frame, spec = view.frame, view.spec
        except JobDamage as error:
            frame, spec, damage = None, None, str(error)
        observed: dict[str, Any] = {}
        for entry in handle.fs.scandir(f"{payload}/.httk-job/declarations"):
            if entry.name.endswith(".json"):
                observed[entry.name[:-5]] = _read_json(handle, entry.path)
        declarations = {**(spec.declarations if spec else {}), **observed}
        data = f"{handle.layout.data_dir(marker.job_id)}/current"
        realization = realization_of(spec.runner_source, spec.runner_path) if spec else None
        yield CollectedJob(
            job_key=str(marker.key),
            job_id=marker.job_id,
            placement=marker.placement,
            kind=marker.kind.value,
            name=spec.name if spec else None,
            workflow=spec.workflow if spec else None,
            step=frame.step if frame else None,
            failure=codec.unstructure(frame.failure) if frame else None,
            payload=payload,
            workdir=_workdir(handle, marker, spec.workdir_mode if spec else None),
            data=data if spec is not None and spec.data_mode == "transactional" else None,
            state=_read_json(handle, f"{payload}/.httk-job/state.json") or {},
            declarations=declarations,
            damage=damage,
            workflow_realization=realization.kind if realization else NATIVE,
            language=realization.language if realization else None,
        )


def collect_raw(
    handle: WorkspaceHandle, *, kinds: Sequence[StateKind] | None = None, placement: str | None = None
) -> Iterator[JobRecord]:
    """The stored documents of the terminal jobs (or of ``kinds``)."""
    for marker in _markers(handle, kinds, placement):
        damage = None
        frame = None
        if marker.generation:
            try:
                frame = handle.store.reader.read(marker.ref)
            except Exception as error:  # noqa: BLE001 - a damaged frame is reported in the record
                damage = str(error)
        job = _read_json(handle, f"{handle.layout.payload(marker.placement, str(marker.key))}/job.json")
        yield JobRecord(marker.name, marker.kind.value, marker.placement, frame, job, damage)
