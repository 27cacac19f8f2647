"""How ``REMOTE:PATH`` is recognized, and the error a remote command refuses with.

Every command asks whether its workspace argument names a remote
(:func:`split_reference`), so this is kept apart from the remote registry
(:mod:`.remotes`, which re-exports both): a local command recognizes a local
path without importing the registry, its templates and their settings. The
decision is made from the text alone: no file is consulted, so a remote
reference is recognized before anything touches the local filesystem (a local
path with a colon is spelled ``./a:b``). Spec: 000 "Running on a remote".
"""

from __future__ import annotations

import re

import attrs

#: ``REMOTE:PATH``: a remote's name (as :mod:`.remotes` allows it), a colon, anything (''= the remote's default).
_REFERENCE = re.compile(r"([a-z0-9][a-z0-9._-]{0,47}):(.*)", re.DOTALL)


class RemoteError(ValueError):
    """A remote that is missing, misnamed or misconfigured; the message names it and the fix."""


@attrs.frozen
class RemoteReference:
    """``REMOTE:PATH`` split: the remote's name and the path or workspace name there ('' = its default)."""

    remote: str
    path: str

    def __str__(self) -> str:
        return f"{self.remote}:{self.path}"


def split_reference(reference: str | None) -> RemoteReference | None:
    """``REMOTE:PATH`` as a :class:`RemoteReference`; ``None`` for anything local (text only, no I/O)."""
    if not reference:
        return None
    match = _REFERENCE.fullmatch(reference)
    return RemoteReference(match[1], match[2]) if match else None
