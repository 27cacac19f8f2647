"""Publishing an operator request: the client side of ``job pause|continue|cancel|override-step``.

A request captures the job's exact marker (kind, generation, record reference)
when it is made, so a delayed request can never mutate a newer state. Before
anything is written the client asks the domain's
:func:`~httk.workflow.domain.requests.plan_request` what the request does to that
exact state, and refuses one the plan says can never apply; the manager's request
pass (:mod:`httk.workflow.engine.requests`) computes the same plan again and
applies it. A published request is written to ``requests/tmp`` and renamed into
``requests/ready``. Spec: 000 "Inspect and control".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import codec
from ..domain.requests import ACTIONS, RequestPlan, plan_request
from ..engine.requests import RequestDocument
from ..ports import Signer
from ..store.store import JobView
from ..store.workspaces import WorkspaceHandle


class RequestError(ValueError):
    """A request refused before publication; nothing was written."""


def plan_for(view: JobView, action: str, step: str | None) -> RequestPlan:
    """The domain's plan of ``action`` against the exact state ``view`` holds."""
    policy = view.spec.retry_policy if view.spec is not None else None
    return plan_request(action, view.marker.kind, view.frame, policy, step=step)


def publish_request(
    handle: WorkspaceHandle,
    view: JobView,
    action: str,
    *,
    operator: str,
    reason: str,
    step: str | None = None,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
    signer: Signer | None = None,
) -> dict[str, Any]:
    """Validate and publish one request (``requests/tmp`` → ``requests/ready``); returns it."""
    if action not in ACTIONS:
        raise RequestError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    if not operator:
        raise RequestError("--operator is required (who is asking), e.g. --operator \"$USER\"")
    if action == "override_step" and not step:
        raise RequestError("override_step needs --step STEP")
    if action != "override_step" and step is not None:
        raise RequestError("--step is only meaningful with override_step")
    # The request is pinned to this exact state, so a plan refused now is refused forever.
    plan = plan_for(view, action, step)
    if not plan.applies:
        raise RequestError(f"cannot {action} job {view.marker.key}: {plan.refusal}")
    if action == "override_step":
        recorded = view.frame.runner_steps
        if recorded is None:
            if warn:
                warn(f"note: job {view.marker.key} has no recorded runner_steps yet; {step!r} cannot be "
                     "pre-validated (the runner refuses it at the next attempt if it does not implement it)")
        elif step not in recorded:
            message = f"step {step!r} is not one of the recorded runner steps: {', '.join(recorded)}"
            if not force:
                raise RequestError(message + " (pass --force if the runner was changed to add it)")
            if warn:
                warn(f"note: {message}; publishing anyway because of --force")
    marker = view.marker
    request_id = handle.ports.ids.new_id()
    record = RequestDocument(
        request_id=request_id,
        action=action,
        job_id=marker.job_id,
        job_key=str(marker.key),
        placement=marker.placement,
        kind=marker.kind.value,
        generation=marker.generation,
        record_ref=marker.ref,
        marker=marker.name,
        executor=view.spec.executor if view.spec is not None else "path",
        operator=operator,
        reason=reason,
        step=step,
        force=force,
        created_at=handle.ports.clock.now(),
    )
    document: dict[str, Any] = codec.unstructure(record)
    if signer is not None:
        # A detached signature over the canonical JSON of everything else: attribution, not authorization.
        document["signature"] = signer.sign(codec.dumps(document).encode("utf-8"))
    layout = handle.layout
    temp = f"{layout.requests}/tmp/{request_id}.json"
    handle.fs.write_new(temp, codec.encode(document), durable=handle.durable)
    handle.fs.rename(temp, f"{layout.requests}/ready/{request_id}.json", durable=handle.durable)
    return document
