"""EntryPointCatalog: the batch systems and transports installed, found through entry points only.

Every batch system and transport, this distribution's own included, is
registered in the entry-point groups ``httk.workflow.batch_systems`` and
``httk.workflow.transports`` (pyproject.toml), so one installed beside the
package works exactly like a first-party one (ARCHITECTURE.md rule 7). Reading
the installed metadata costs start-up time, so nothing is scanned until a
command asks, a group is scanned once per process, and only the one entry named
is imported. Two distributions that register one name differently are refused
rather than one silently shadowing the other. Spec: 000 "Running on a remote".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..ports import BatchSystemError

BATCH_SYSTEMS = "httk.workflow.batch_systems"
TRANSPORTS = "httk.workflow.transports"


def _installed(group: str) -> Iterable[Any]:
    # Imported here: importlib.metadata costs every command that never needs it a noticeable share.
    from importlib.metadata import entry_points

    return entry_points(group=group)


class EntryPointCatalog:
    """Name → class for each entry-point group, loaded on first use.

    ``given`` maps a group to classes that stand in for its entry points (a test's
    doubles); ``entries`` replaces the installed metadata (a test's fake installation).
    """

    def __init__(
        self,
        given: Mapping[str, Mapping[str, type]] | None = None,
        entries: Callable[[str], Iterable[Any]] = _installed,
    ) -> None:
        self._given = {group: dict(classes) for group, classes in (given or {}).items()}
        self._entries = entries
        self._scanned: dict[str, dict[str, Any]] = {}
        self._loaded: dict[tuple[str, str], type] = {}

    def names(self, group: str) -> list[str]:
        """The registered names of ``group``, sorted."""
        return sorted({*self._scan(group), *self._given.get(group, {})})

    def load(self, group: str, name: str) -> type | None:
        """The class registered as ``name`` in ``group`` (imported now), or ``None``."""
        given = self._given.get(group, {})
        if name in given:
            return given[name]
        key = (group, name)
        if key not in self._loaded:
            entry = self._scan(group).get(name)
            if entry is None:
                return None
            self._loaded[key] = entry.load()
        return self._loaded[key]

    # -- the two groups -------------------------------------------------------------------------
    def batch_system_names(self) -> list[str]:
        return self.names(BATCH_SYSTEMS)

    def transport_names(self) -> list[str]:
        return self.names(TRANSPORTS)

    def batch_system(self, name: str) -> type | None:
        return self.load(BATCH_SYSTEMS, name)

    def transport(self, name: str) -> type | None:
        return self.load(TRANSPORTS, name)

    def check_setting(self, name: str, value: Any) -> None:
        """Let the batch system named by the setting's first component refuse it (``slurm.*``: Slurm).

        Raises :class:`~httk.workflow.ports.BatchSystemError`. A name whose first
        component is no batch system (``vasp.command``) is not the batch systems' to judge.
        """
        prefix = name.split(".", 1)[0]
        if "." not in name or prefix not in self.batch_system_names():
            return
        system = self.batch_system(prefix)
        checker = getattr(system, "check_setting", None)
        if checker is not None:
            checker(name, value)

    def _scan(self, group: str) -> dict[str, Any]:
        if group not in self._scanned:
            found: dict[str, Any] = {}
            for entry in self._entries(group):
                known = found.get(entry.name)
                # An editable install can list the same distribution twice: only a different target clashes.
                if known is not None and known.value != entry.value:
                    raise BatchSystemError(
                        f"entry point {entry.name!r} of {group} is registered twice ({known.value} and "
                        f"{entry.value}); uninstall one of the distributions"
                    )
                found[entry.name] = entry
            self._scanned[group] = found
        return self._scanned[group]
