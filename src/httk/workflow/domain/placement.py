"""Placement prefixes: which placements a prefix-restricted manager or walk covers.

Compared whole path component by component, so ``project-a`` covers ``project-a/x``
and not ``project-ab``. Kept apart from :mod:`.scheduling` (which re-exports both
functions) because the store's walks need them and not the scheduling records:
a read command (``workspace status``) then creates none of those attrs classes.
Spec: 000 "Run" (pools, long scans), "Scheduling".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def components(path: str) -> tuple[str, ...]:
    """The non-empty ``/``-separated parts of ``path``."""
    return tuple(part for part in path.split("/") if part)


def placement_matches(placement: str, prefixes: Sequence[str]) -> bool:
    """Whether ``placement`` lies in one of ``prefixes``, compared whole path component by component.

    ``project-a`` matches ``project-a`` and ``project-a/x`` but not ``project-ab``.
    No prefixes (or an empty prefix) means the whole workspace.
    """
    if not prefixes:
        return True
    parts = components(placement)
    for prefix in prefixes:
        wanted = components(prefix)
        if parts[: len(wanted)] == wanted:
            return True
    return False


def may_contain_matches(directory: str, prefixes: Sequence[str]) -> bool:
    """Whether a walk must descend into ``directory``: it is inside a prefix or on the way to one."""
    if not prefixes:
        return True
    parts = components(directory)
    for prefix in prefixes:
        wanted = components(prefix)
        common = min(len(parts), len(wanted))
        if parts[:common] == wanted[:common]:
            return True
    return False


def nearest_placement(placement: str, placements: Iterable[str]) -> str | None:
    """The prefix of ``placements`` closest in spelling to ``placement`` (``None``: none is close)."""
    import difflib  # only when a --placement matched nothing

    prefixes = {"/".join(found.split("/")[:depth]) for found in placements for depth in range(1, found.count("/") + 2)}
    # 0.7: a typo ('cmap' for 'camp', 'si/relx'), not any placement sharing letters.
    close = difflib.get_close_matches(placement, sorted(prefixes), n=1, cutoff=0.7)
    return close[0] if close else None
