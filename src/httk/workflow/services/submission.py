"""Submission: a prepared payload becomes a job at a placement.

Order is what makes it crash-safe: validate, copy the payload into the control
tree's staging area, rename it into place (never over an existing name), and
only then publish the generation-0 ``submitted`` marker. A crash before the
marker leaves an orphan payload that no manager sees: the workspace reads back
as before the submission, never between. Spec: 000 "Submit a job".
"""

from __future__ import annotations

import posixpath

import attrs

from .. import codec
from ..domain.model import JobKey, ValidationError, check_placement, check_tag
from ..protocol import JOB_FILE, JobSpec, parse_job_bytes
from .markers import Marker
from .workspaces import WorkspaceHandle


class SubmissionError(ValueError):
    """A payload or placement that cannot be submitted; nothing was written."""


@attrs.frozen
class Submitted:
    marker: Marker
    payload: str
    spec: JobSpec


def submit(
    workspace: WorkspaceHandle,
    payload: str,
    placement: str,
    *,
    move: bool = False,
    tag: str | None = None,
    job_id: str | None = None,
) -> Submitted:
    """Submit the payload directory ``payload`` at ``placement`` and return the new job."""
    fs = workspace.fs
    source = posixpath.normpath(payload)
    try:
        placement = check_placement(placement)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    info = fs.lstat(source)
    if info is None or not info.is_dir:
        raise SubmissionError(f"{source}: not a payload directory (expected a directory holding job.json)")
    job_file = f"{source}/{JOB_FILE}"
    try:
        data = fs.read_bytes(job_file)
    except FileNotFoundError:
        raise SubmissionError(f"{job_file}: missing; prepare the payload with prepare_job_payload first") from None
    try:
        spec = parse_job_bytes(data, job_file)
    except codec.DocumentError as error:
        raise SubmissionError(str(error)) from None
    chosen_tag = tag if tag is not None else spec.tag
    try:
        if chosen_tag is not None:
            check_tag(chosen_tag)
        key = JobKey(job_id or workspace.ports.ids.new_id(), chosen_tag)
    except ValidationError as error:
        raise SubmissionError(str(error)) from None
    destination = workspace.layout.payload(placement, str(key))
    if fs.exists(destination):
        raise SubmissionError(f"{destination}: already exists")
    durable = workspace.durable
    if move:
        fs.rename(source, destination, durable=durable)
    else:
        staging = f"{workspace.layout.tmp}/submit-{key.job_id}"
        fs.rmtree(staging)
        fs.copy_tree(source, staging, durable=durable)
        fs.rename(staging, destination, durable=durable)
    marker = workspace.store.create_submitted(placement, key, spec.priority)
    return Submitted(marker, destination, spec)
