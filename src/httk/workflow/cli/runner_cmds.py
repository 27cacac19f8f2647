"""``httk workflow runner``: publish a runner into the workspace runner store.

Publication is content addressed: identical bytes are a no-op, different bytes
under a used name need ``--replace`` (live jobs keep the digest they pinned).
Spec: 000 "Share one runner between many jobs".
"""

from __future__ import annotations

import os

import click

from ..store.runners import publish_runner
from .context import AppContext, pass_app
from .remote_refs import LocalPaths, remote_aware
from .render import EXIT_CODES, Group, emit_json


@click.group("runner", cls=Group)
def runner() -> None:
    """Manage the workspace runner store.

    \b
    Example:
      httk workflow runner publish ./relax.py --workspace runs --name relax.py
    """


@runner.command("publish", epilog=EXIT_CODES)
@click.argument("path")
@click.option(
    "--workspace",
    "workspace",
    metavar="WORKSPACE",
    help="The workspace (default: the project's recorded default, else the per-user default); REMOTE:WS "
    "sends PATH there and publishes it into that workspace.",
)
@click.option("--name", help="The name to store it under (default: the basename of PATH).")
@click.option("--replace", is_flag=True, help="Replace a stored name whose content differs.")
@click.option("--json", "as_json", is_flag=True, help="Print the reference as JSON only (it is JSON anyway).")
@pass_app
@remote_aware(("runner", "publish"), local_paths=[LocalPaths("path", kind="tree", required=True)])
def publish(app: AppContext, path: str, workspace: str | None, name: str | None, replace: bool, as_json: bool) -> None:
    """Publish a runner file or directory and print the reference to embed in job.json.

    With ``--workspace REMOTE:WS`` the local PATH is sent to the remote and published
    into its workspace there (the name defaults to PATH's basename, as here).

    \b
    Examples:
      httk workflow runner publish ./relax.py --workspace runs --name relax.py
      httk workflow runner publish ./relax.py --workspace kappa:runs --name relax.py
    """
    handle = app.open_workspace(workspace, create=True)
    source = app.absolute(path)
    reference = publish_runner(
        handle.fs,
        handle.layout,
        source,
        name or os.path.basename(source),
        replace=replace,
        durable=handle.durable,
    )
    emit_json(reference)
