"""The per-user default workspace: where a command goes when WORKSPACE is omitted.

``$XDG_DATA_HOME/httk-workflow/workspaces/default``, with ``XDG_DATA_HOME``
defaulting to ``~/.local/share`` as the XDG base-directory specification says
(a relative value is ignored, as that specification requires). Spec: 000
"Initialize a workspace".
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping

DEFAULT_WORKSPACE_NAME = "default"


def default_workspace_path(environ: Mapping[str, str]) -> str:
    """The absolute path of the per-user default workspace for ``environ``."""
    data_home = environ.get("XDG_DATA_HOME", "")
    if not data_home or not posixpath.isabs(data_home):
        home = environ.get("HOME") or os.path.expanduser("~")
        data_home = posixpath.join(home, ".local", "share")
    return posixpath.normpath(posixpath.join(data_home, "httk-workflow", "workspaces", DEFAULT_WORKSPACE_NAME))


def data_home(environ: Mapping[str, str]) -> str:
    value = environ.get("XDG_DATA_HOME", "")
    if not value or not posixpath.isabs(value):
        home = environ.get("HOME") or os.path.expanduser("~")
        value = posixpath.join(home, ".local", "share")
    return value


def registry_path(environ: Mapping[str, str]) -> str:
    """Where this user's workspace registry lives."""
    return posixpath.join(data_home(environ), "httk-workflow", "registry.json")


def remotes_dir(environ: Mapping[str, str]) -> str:
    """``$XDG_CONFIG_HOME/httk-workflow/remotes`` (``~/.config`` when unset or relative)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not base or not posixpath.isabs(base):
        base = posixpath.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return posixpath.join(base, "httk-workflow", "remotes")
