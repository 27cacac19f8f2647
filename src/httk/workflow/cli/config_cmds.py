"""``httk workflow config``: the operator's own installation settings (the identity key).

Spec: 000 "Inspect and control" (operator identity).
"""

from __future__ import annotations

import click

from ..bootstrap import create_operator_identity
from .context import AppContext, pass_app
from .render import EXIT_CODES, Group, emit_json


@click.group("config", cls=Group)
def config() -> None:
    """This installation's operator settings.

    \b
    Example:
      httk workflow config init
    """


@config.command("init", epilog=EXIT_CODES)
@click.option("--force", is_flag=True, help="Replace an existing operator identity key.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@pass_app
def init(app: AppContext, force: bool, as_json: bool) -> None:
    """Create the operator identity key that signs job requests (Ed25519, private key mode 0600).

    \b
    Example:
      httk workflow config init
    """
    created = create_operator_identity(app.environ, force=force)
    if as_json:
        emit_json(created)
        return
    click.echo(f"operator identity {created['key_id']} written to {created['private_key']}")
