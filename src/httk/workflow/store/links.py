"""Acting in trees a runner could have written without resolving any link in them.

An attempt's control directory (its ``outcome.ready/`` and the commit ledger) and
a job's data directory are writable by the runner, so a symbolic link there may
have been planted to lead the manager's reads, renames and copies somewhere
else. Before the manager acts on a path in such a tree it checks every name
below the tree's root with :meth:`~httk.workflow.ports.Filesystem.find_symlink`,
and refuses the outcome when one is a link. Spec: docs/workflow_filesystem_api.md
"What a runner may not do".
"""

from __future__ import annotations

from ..ports import Filesystem


class UntrustedLink(ValueError):
    """A symbolic link where the manager follows none; the runner's outcome is refused for it."""

    def __init__(self, link: str, context: str = "") -> None:
        super().__init__(
            f"{context}{link} is a symbolic link; the manager follows no link in an attempt's outcome, "
            "commit ledger or data tree (publish real files and directories)"
        )
        self.link = link


def refuse_links(fs: Filesystem, root: str, *paths: str, context: str = "") -> None:
    """Raise :class:`UntrustedLink` when a name below ``root`` on the way to any of ``paths`` is a link.

    ``context`` prefixes the message (``"op-0002: "``).
    """
    for path in paths:
        link = fs.find_symlink(root, path)
        if link is not None:
            raise UntrustedLink(link, context)
