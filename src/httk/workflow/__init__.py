"""httk-workflow: a filesystem-native workflow task manager for high-throughput computational science.

The root exports only the runner-authoring names of the spec (001 "Native
runner helpers"). Every name and submodule is resolved lazily on first use, so a
runner that imports :class:`Runner` pays for the SDK alone, and the manager,
the CLI and the ``Workspace`` facade are imported only by code that asks for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .domain.model import Failure
    from .protocol import JobSpec, prepare_job_payload, prepare_job_payloads
    from .runtime import ChildResult, ChildSpec, JobState, RunnerRef
    from .sdk import Attempt, Runner
    from .workspace import Workspace

__all__ = [
    "Attempt",
    "ChildResult",
    "ChildSpec",
    "Failure",
    "JobSpec",
    "JobState",
    "Runner",
    "RunnerRef",
    "Workspace",
    "prepare_job_payload",
    "prepare_job_payloads",
    "protocol",
    "runtime",
    "runtime_utils",
    "supervision",
]

#: Root name -> the submodule that defines it.
_NAMES = {
    "Runner": "sdk",
    "Attempt": "sdk",
    "ChildSpec": "runtime",
    "RunnerRef": "runtime",
    "ChildResult": "runtime",
    "JobState": "runtime",  # spec 002 rows JobState.read/set/delete/merge name it at the root
    "JobSpec": "protocol",
    "prepare_job_payload": "protocol",
    "prepare_job_payloads": "protocol",
    "Failure": "domain.model",
    "Workspace": "workspace",
}
#: The dependency-free VASP helpers (spec 001 "VASP files"), defined in ``httk.workflow.vasp``.
_VASP_NAMES = (
    "DEFAULT_KPOINT_CENTERING",
    "VASP_RESTART_ARTIFACTS",
    "PotcarAssembly",
    "PotcarChoice",
    "VaspPreparationOptions",
    "apply_vasp_remedy",
    "assemble_potcar",
    "automatic_kpoint_grid",
    "calculate_nbands",
    "clean_vasp_outputs",
    "contcar_to_poscar",
    "derive_seed",
    "extract_vasp_results",
    "job_remedy_history_path",
    "plan_vasp_remedy",
    "prepare_vasp_inputs",
    "rattle_poscar",
    "read_incar",
    "read_poscar_header",
    "register_remedy_policy",
    "remedy_policy_names",
    "run_vasp",
    "suggested_magnetic_moments",
    "update_incar",
    "validate_vasp_workdir",
    "write_automatic_kpoints",
)
_NAMES.update({name: "vasp" for name in _VASP_NAMES})
__all__ += [*_VASP_NAMES, "vasp"]
_SUBMODULES = frozenset({"protocol", "runtime", "runtime_utils", "supervision", "vasp"})


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # resolve once; later lookups do not reach __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
