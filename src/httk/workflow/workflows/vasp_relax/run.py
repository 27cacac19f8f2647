#!/usr/bin/env python3
"""The shipped VASP runner: prepare the inputs, run VASP, escalate through the reviewed remedies.

One program serves ``vasp-relax`` and ``vasp-static``: the ``workflow.json``
beside this file names the workflow, declares its inputs and carries the
default INCAR, so a relaxation and a static run differ only in their documents.

Steps:

``prepare``
    POSCAR from the staged ``structure`` input; INCAR from the document's
    defaults with the ``incar`` input merged over them (a ``null`` removes a
    default tag); KPOINTS as an automatic ``Monkhorst-Pack`` mesh of
    ``kpoint_density``; POTCAR assembled from the ``vasp.potcar_library``
    setting when set, else a staged ``potcar`` input, else — only when
    ``vasp.command`` is the mock VASP — none. A real VASP command without a
    POTCAR source fails here, before any allocation is spent.
``calculate``
    Runs ``vasp.command`` through ``run_vasp`` (``vasp.timeout`` seconds when
    set). A converged run publishes ``vasp-result.json``,
    ``vasp-run-report.json`` and, for a relaxation, ``CONTCAR`` into the job's
    transactional data. Otherwise the next remedy of the ``reviewed-v1`` ladder
    is applied and the step retried; a relaxation that ran out of ionic steps
    (or time) without an error continues from its CONTCAR. At most
    ``max_reruns`` reruns; then, or when no remedy is left, the job fails with
    ``vasp_failed``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from httk.workflow import Runner
from httk.workflow.vasp import (
    IncarError,
    VaspPreparationOptions,
    apply_vasp_remedy,
    clean_vasp_outputs,
    contcar_to_poscar,
    extract_vasp_results,
    job_remedy_history_path,
    plan_vasp_remedy,
    prepare_vasp_inputs,
    read_remedy_history,
    run_vasp,
    validate_vasp_workdir,
    vasp_command,
)

WORKFLOW: dict[str, Any] = json.loads(Path(__file__).with_name("workflow.json").read_text(encoding="utf-8"))
MOCK_VASP_MODULE = "httk.workflow.testing.mock_vasp"
RESULT_FORMAT = "httk-workflow-vasp-result"

run = Runner(WORKFLOW["name"])


def option(a: Any, name: str) -> Any:
    """A job input, else the default ``workflow.json`` declares for it."""
    return a.input(name, WORKFLOW["inputs"][name].get("default"))


def is_mock(argv: list[str]) -> bool:
    """Whether the VASP command is the shipped mock, which needs no POTCAR."""
    return any(arg == MOCK_VASP_MODULE or arg.endswith("/mock_vasp.py") for arg in argv)


def incar_tags(overrides: Any) -> dict[str, Any]:
    """The document's default INCAR with ``overrides`` merged over it, tag names compared case-insensitively."""
    if not isinstance(overrides, dict):
        raise IncarError(f"the incar input must be an object of INCAR tags, got {overrides!r}")
    tags = {tag.upper(): value for tag, value in WORKFLOW.get("incar", {}).items()}
    for tag, value in overrides.items():
        if value is None:
            tags.pop(tag.upper(), None)
        else:
            tags[tag.upper()] = value
    return tags


@run.step
def prepare(a: Any) -> None:
    workdir = a.workdir
    structure = option(a, "structure")
    command = a.setting("vasp.command")
    if not command:
        a.fail(
            "vasp_command_missing",
            "no VASP command: set it in this job's workspace ('httk workflow workspace settings set WORKSPACE "
            "vasp.command \"srun vasp_std\"'), then 'httk workflow job request WORKSPACE JOB continue --operator "
            "\"$USER\"'",
        )
        return
    try:
        argv = vasp_command(command)
        validate_vasp_workdir(workdir)
        if structure != "POSCAR":
            shutil.copyfile(workdir / structure, workdir / "POSCAR")
        library = a.setting("vasp.potcar_library")
        if not library and not (workdir / "POTCAR").is_file() and not is_mock(argv):
            a.fail(
                "vasp_potcar_missing",
                "no POTCAR source: set the vasp.potcar_library setting ('httk workflow workspace settings set "
                "WORKSPACE vasp.potcar_library /path/to/potpaw_PBE') or stage one with --input potcar=POTCAR",
            )
            return
        density = option(a, "kpoint_density")
        options = VaspPreparationOptions(
            incar_tags=incar_tags(option(a, "incar")),
            kpoint_density=float(density) if density is not None else None,
            potcar_library=library or None,
            potcar_variants=option(a, "potcar_variants") or None,
            magnetic=bool(option(a, "magnetic")),
            magnetic_moments=a.setting("vasp.magnetic_moments"),
        )
        prepared = prepare_vasp_inputs(workdir, options)
    except (OSError, ValueError) as error:  # every helper error (POSCAR, INCAR, POTCAR, workdir) is a ValueError
        a.fail("vasp_inputs_invalid", f"cannot prepare the VASP inputs: {error}")
        return
    potcar = [choice.variant for choice in prepared.potcar.choices] if prepared.potcar else None
    a.state.merge({"kpoint_grid": list(prepared.grid) if prepared.grid else None, "potcar": potcar, "reruns": 0})
    a.advance("calculate")


def _tail(path: Path, lines: int = 5) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


def _publish_results(a: Any, energy: float | None) -> None:
    workdir = a.workdir
    results = extract_vasp_results(workdir)
    history = read_remedy_history(workdir, job_remedy_history_path(a.payload))
    summary = {
        "format": RESULT_FORMAT,
        "format_version": 1,
        "workflow": WORKFLOW["name"],
        "energy": energy,
        "energy_sigma0": results.energy_sigma0,
        "ionic_steps": results.ionic_steps,
        "electronic_steps": results.electronic_steps,
        "relaxation": results.relaxation,
        "reruns": int(a.state.get("reruns", 0)),
        "remedies": [{"code": entry.get("code"), "rung": entry.get("rung")} for entry in history],
        "kpoint_grid": a.state.get("kpoint_grid"),
        "potcar": a.state.get("potcar"),
    }
    (workdir / "vasp-result.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    a.state.merge({"energy": energy, "converged": True})
    a.put(workdir / "vasp-result.json", "vasp-result.json")
    a.put(workdir / "vasp-run-report.json", "vasp-run-report.json")
    if results.relaxation:
        a.put(workdir / "CONTCAR", "CONTCAR")


@run.step
def calculate(a: Any) -> None:
    workdir = a.workdir
    clean_vasp_outputs(workdir)
    command, timeout = a.setting("vasp.command"), a.setting("vasp.timeout")
    try:
        result = run_vasp(workdir, command, timeout=float(timeout) if timeout else None)
    except (OSError, ValueError) as error:
        a.fail("vasp_unavailable", f"VASP could not be started: {error}", details={"command": command})
        return
    if result.converged:
        _publish_results(a, result.energy)
        a.succeed()
        return
    reruns = int(a.state.get("reruns", 0))
    details = {
        "diagnosis": list(result.diagnosis), "returncode": result.returncode, "timed_out": result.timed_out,
        "reruns": reruns, "stdout_tail": _tail(workdir / "vasp.out"), "stderr_tail": _tail(workdir / "vasp.err"),
    }
    limit = int(option(a, "max_reruns"))
    if reruns >= limit:
        a.fail("vasp_failed", f"VASP did not converge within {limit} reruns", details=details)
        return
    history = job_remedy_history_path(a.payload)
    remedy = plan_vasp_remedy(workdir, history_path=history)
    if remedy is not None:
        apply_vasp_remedy(workdir, remedy, history_path=history)
        a.state.merge({"reruns": reruns + 1})
        a.log.append("remedy", f"{remedy.code}: {remedy.rung} ({remedy.description})")
        a.retry(f"{remedy.code}: applied {remedy.rung}")
        return
    results = extract_vasp_results(workdir)
    unfinished = result.timed_out or (results.finished and not results.reached_accuracy)
    if not result.diagnosis and results.relaxation and unfinished and contcar_to_poscar(workdir):
        # Out of ionic steps (NSW) or time, without an error: the usual answer is to continue from CONTCAR.
        a.state.merge({"reruns": reruns + 1})
        a.log.append("continue", "the relaxation stopped before the required accuracy; continuing from CONTCAR")
        a.retry("relaxation continued from CONTCAR")
        return
    what = ", ".join(result.diagnosis) or (
        "timed out" if result.timed_out else f"exit status {result.returncode}, not converged"
    )
    a.fail("vasp_failed", f"VASP failed ({what}) and no remedy is left", details=details)


if __name__ == "__main__":
    raise SystemExit(run.main())
