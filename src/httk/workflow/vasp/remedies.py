"""Bounded, planned, explicitly applied remedies for diagnosed VASP failures.

A *policy* maps each diagnosis code to an ordered ladder of *rungs* and ranks
the codes by ``precedence``. :func:`plan_vasp_remedy` reads the run report,
walks the ladder of the highest-ranked diagnosed code from above the highest
rung the history already applied for that code, skips every rung that cannot
execute in this calculation directory, and returns the first remaining one (or ``None``
when every ladder is exhausted). Planning writes nothing;
:func:`apply_vasp_remedy` performs the edits and appends the remedy to the
JSON history, which is how the escalation continues across attempts.

Built-in rungs (INCAR rungs need an INCAR; "default" is VASP's default):

================  ===========================================================  ==================================
rung              edit                                                          skipped when
================  ===========================================================  ==================================
reduce_potim      POTIM halved (default 0.5)                                    the result would be below 0.05
switch_ibrion_1   IBRION = 1 (quasi-Newton)                                     IBRION is already 1
promote_contcar   CONTCAR copied over POSCAR (old one kept as POSCAR.orig)      CONTCAR missing, empty, unparsable
algo_normal       ALGO = Normal (blocked Davidson)                              ALGO already Normal (or unset)
algo_all          ALGO = All                                                    ALGO already All
bump_bands        NBANDS = bump_nbands(NBANDS)                                  INCAR has no integer NBANDS
switch_to_gamma   KPOINTS mesh centering Monkhorst-Pack → Gamma                 KPOINTS missing, not an MP mesh
ismear_0          ISMEAR = 0, plus SIGMA = 0.05 if SIGMA is unset               ISMEAR already 0
reduce_amix       AMIX = 0.1, BMIX = 0.01                                       AMIX already <= 0.1
tighten_symprec   SYMPREC = 1e-08                                               SYMPREC already <= 1e-08
isym_0            ISYM = 0                                                      ISYM already 0
================  ===========================================================  ==================================
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ._io import PathLike, in_workdir, write_json
from .incar import IncarError, bump_nbands, read_incar, update_incar
from .kpoints import read_kpoint_mesh, set_kpoint_centering
from .poscar import PoscarError, contcar_to_poscar, read_poscar_header
from .run import RUN_REPORT_NAME, read_vasp_run_report

DEFAULT_REMEDY_POLICY = "reviewed-v1"
HISTORY_FORMAT = "httk-workflow-vasp-remedy-history"
LEGACY_HISTORY_NAME = "vasp-remedies.json"
"""The pre-0.2 history location, in the calculation directory; read while the job-scoped file does not exist."""


class RemedyError(ValueError):
    """A policy, history, or remedy that cannot be used."""


@attrs.frozen
class VaspRemedy:
    """One planned rung: which code it treats, what it edits, and why.

    ``incar`` maps tags to new values (``None`` removes the tag);
    ``kpoints_centering`` is the new mesh centering or ``None``.
    """

    policy: str
    code: str
    rung: str
    description: str
    incar: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)
    kpoints_centering: str | None = None
    promote_contcar: bool = False


@attrs.frozen
class RemedyPolicy:
    """A registered policy: ladders per diagnosis code and the order codes are treated in."""

    name: str
    sequences: Mapping[str, tuple[str, ...]]
    precedence: tuple[str, ...]


_Edit = tuple[str, dict[str, Any], str | None, bool]  # description, incar, centering, promote
_Rung = Callable[[Path], "_Edit | None"]


def _tags(workdir: Path) -> dict[str, str] | None:
    try:
        return read_incar(workdir / "INCAR")
    except (FileNotFoundError, IncarError):
        return None


def _number(tags: dict[str, str], tag: str, default: float) -> float | None:
    try:
        return float(tags[tag].split()[0]) if tag in tags else default
    except (ValueError, IndexError):
        return None


def _incar_rung(build: Callable[[dict[str, str]], tuple[str, dict[str, Any]] | None]) -> _Rung:
    def rung(workdir: Path) -> _Edit | None:
        tags = _tags(workdir)
        built = build(tags) if tags is not None else None
        return None if built is None else (built[0], built[1], None, False)

    return rung


def _reduce_potim(tags: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    potim = _number(tags, "POTIM", 0.5)
    if potim is None or potim / 2 < 0.05:
        return None
    return f"halve POTIM {potim} -> {potim / 2}", {"POTIM": round(potim / 2, 6)}


def _set_if(tag: str, value: Any, differs: Callable[[str | None], bool], why: str) -> _Rung:
    return _incar_rung(lambda tags: (why, {tag: value}) if differs(tags.get(tag)) else None)


def _bump_bands(tags: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    try:
        current = int(tags["NBANDS"].split()[0])
    except (KeyError, ValueError, IndexError):
        return None
    new = bump_nbands(current)
    return f"raise NBANDS {current} -> {new}", {"NBANDS": new}


def _ismear_0(tags: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    if _number(tags, "ISMEAR", 1) == 0:
        return None
    edits: dict[str, Any] = {"ISMEAR": 0}
    if "SIGMA" not in tags:
        edits["SIGMA"] = 0.05
    return "Gaussian smearing instead of the tetrahedron or Methfessel-Paxton method", edits


def _below(tags: dict[str, str], tag: str, default: float, limit: float) -> bool:
    value = _number(tags, tag, default)
    return value is not None and value <= limit


def _promote_contcar(workdir: Path) -> _Edit | None:
    contcar = workdir / "CONTCAR"
    try:
        if contcar.stat().st_size == 0:
            return None
        read_poscar_header(contcar)
    except (OSError, PoscarError):
        return None
    return "restart from the last geometry (CONTCAR -> POSCAR)", {}, None, True


def _switch_to_gamma(workdir: Path) -> _Edit | None:
    try:
        mesh = read_kpoint_mesh(workdir / "KPOINTS")
    except FileNotFoundError:
        return None
    if mesh is None or mesh.centering != "Monkhorst-Pack":
        return None
    return "Gamma-centred k-point mesh", {}, "Gamma", False


def _first_letter(value: str | None) -> str:
    return (value or "").strip()[:1].lower()


REMEDY_RUNGS: Mapping[str, _Rung] = {
    "reduce_potim": _incar_rung(_reduce_potim),
    "switch_ibrion_1": _set_if("IBRION", 1, lambda v: (v or "").split()[:1] != ["1"], "quasi-Newton ionic steps"),
    "promote_contcar": _promote_contcar,
    "algo_normal": _set_if("ALGO", "Normal", lambda v: v is not None and _first_letter(v) != "n", "Davidson"),
    "algo_all": _set_if("ALGO", "All", lambda v: (v or "").strip().lower() != "all", "all-band minimisation"),
    "bump_bands": _incar_rung(_bump_bands),
    "switch_to_gamma": _switch_to_gamma,
    "ismear_0": _incar_rung(_ismear_0),
    "reduce_amix": _incar_rung(
        lambda tags: None if _below(tags, "AMIX", 0.4, 0.1) else ("gentler mixing", {"AMIX": 0.1, "BMIX": 0.01})
    ),
    "tighten_symprec": _incar_rung(
        lambda tags: None if _below(tags, "SYMPREC", 1e-5, 1e-8) else ("tighter symmetry tolerance", {"SYMPREC": 1e-8})
    ),
    "isym_0": _set_if("ISYM", 0, lambda v: _first_letter(v) != "0", "symmetry off"),
}
"""Rung name -> a check that returns the edit for a calculation directory, or ``None`` when it cannot apply."""

REVIEWED_V1_SEQUENCES: Mapping[str, tuple[str, ...]] = {
    "too_few_bands": ("bump_bands",),
    "tetrahedron": ("switch_to_gamma", "ismear_0"),
    "ibzkpt": ("switch_to_gamma", "tighten_symprec"),
    "rotation_matrix": ("tighten_symprec", "isym_0"),
    "zbrent": ("reduce_potim", "switch_ibrion_1", "promote_contcar"),
    "brmix": ("reduce_amix",),
    "subspace_matrix": ("algo_normal", "algo_all"),
    "edddav": ("algo_normal", "algo_all"),
    "eddrmm": ("algo_normal", "algo_all", "reduce_potim"),
    "electronic_unconverged": ("algo_normal", "algo_all"),
}
"""The ``reviewed-v1`` ladders; its precedence is this order (structural errors before SCF trouble)."""

_POLICIES: dict[str, RemedyPolicy] = {}


def register_remedy_policy(
    name: str,
    sequences: Mapping[str, Sequence[str]],
    precedence: Sequence[str],
    *,
    replace: bool = False,
) -> RemedyPolicy:
    """Register a policy under ``name``; return it.

    Every rung must be a key of :data:`REMEDY_RUNGS`, every code must have a
    non-empty ladder, and ``precedence`` must list exactly the codes of
    ``sequences``, each once. An existing name is refused unless ``replace``.
    """
    if not isinstance(name, str) or not name.strip():
        raise RemedyError(f"a policy name must be a non-empty string, got {name!r}")
    if name in _POLICIES and not replace:
        raise RemedyError(f"remedy policy {name!r} is already registered (pass replace=True to redefine it)")
    ladders: dict[str, tuple[str, ...]] = {}
    for code, rungs in sequences.items():
        ladder = (rungs,) if isinstance(rungs, str) else tuple(rungs)
        unknown = [rung for rung in ladder if rung not in REMEDY_RUNGS]
        if unknown or not ladder:
            raise RemedyError(
                f"policy {name!r}, code {code!r}: unknown or missing rungs {unknown}; known: {', '.join(REMEDY_RUNGS)}"
            )
        ladders[code] = ladder
    order = tuple(precedence)
    if len(set(order)) != len(order) or set(order) != set(ladders):
        raise RemedyError(f"policy {name!r}: precedence must list each code of sequences exactly once")
    policy = RemedyPolicy(name=name, sequences=ladders, precedence=order)
    _POLICIES[name] = policy
    return policy


def remedy_policy_names() -> list[str]:
    """The registered policy names, sorted."""
    return sorted(_POLICIES)


def get_remedy_policy(name: str) -> RemedyPolicy:
    """The registered policy ``name``; an unknown name is refused naming the registered ones."""
    try:
        return _POLICIES[name]
    except KeyError:
        raise RemedyError(f"unknown remedy policy {name!r}; registered: {', '.join(remedy_policy_names())}") from None


register_remedy_policy(DEFAULT_REMEDY_POLICY, REVIEWED_V1_SEQUENCES, tuple(REVIEWED_V1_SEQUENCES))


def job_remedy_history_path(payload: PathLike) -> Path:
    """Where a job keeps its remedy history: ``<payload>/.httk-job/vasp-remedies.json``, beside the job state."""
    return Path(payload) / ".httk-job" / "vasp-remedies.json"


def _history_target(workdir: Path, history_path: PathLike | None) -> Path:
    return workdir / LEGACY_HISTORY_NAME if history_path is None else in_workdir(workdir, history_path)


def read_remedy_history(workdir: PathLike, history_path: PathLike | None = None) -> list[dict[str, Any]]:
    """The applied remedies, oldest first.

    ``history_path`` is resolved against ``workdir`` when relative; ``None``
    means ``<workdir>/vasp-remedies.json``. While the named file does not exist
    the legacy ``<workdir>/vasp-remedies.json`` is read instead.
    """
    directory = Path(workdir)
    for candidate in (_history_target(directory, history_path), directory / LEGACY_HISTORY_NAME):
        if candidate.is_file():
            document = json.loads(candidate.read_text(encoding="utf-8"))
            if not isinstance(document, dict) or document.get("format") != HISTORY_FORMAT:
                raise RemedyError(f"{candidate} is not an {HISTORY_FORMAT} document")
            entries = document.get("entries")
            if not isinstance(entries, list):
                raise RemedyError(f"{candidate}: entries must be a list")
            return entries
    return []


def _diagnosis(workdir: Path, report: Mapping[str, Any] | PathLike | None) -> list[str]:
    if report is None or not isinstance(report, Mapping):
        document = read_vasp_run_report(in_workdir(workdir, report if report is not None else RUN_REPORT_NAME))
    else:
        document = dict(report)
    codes = document.get("diagnosis", [])
    if not isinstance(codes, list) or not all(isinstance(code, str) for code in codes):
        raise RemedyError("the run report's diagnosis must be a list of code strings")
    return codes


def plan_vasp_remedy(
    workdir: PathLike = ".",
    report: Mapping[str, Any] | PathLike | None = None,
    policy: str = DEFAULT_REMEDY_POLICY,
    history_path: PathLike | None = None,
) -> VaspRemedy | None:
    """The next applicable remedy for the diagnosis of ``report``, or ``None`` when the ladders are exhausted.

    ``report`` is a run-report mapping or path (default
    ``<workdir>/vasp-run-report.json``). Diagnosed codes are taken in the
    policy's precedence order (codes the policy does not know are ignored);
    a code's ladder resumes above the highest rung the history applied for
    that code, and a rung that cannot execute in ``workdir`` is skipped.
    Writes nothing.
    """
    chosen = get_remedy_policy(policy)
    directory = Path(workdir)
    present = set(_diagnosis(directory, report))
    applied = {(entry.get("code"), entry.get("rung")) for entry in read_remedy_history(directory, history_path)}
    for code in chosen.precedence:
        if code not in present:
            continue
        ladder = chosen.sequences[code]
        # Escalation only moves up: a rung below the highest one applied stays behind, even if it became
        # applicable again (algo_all makes algo_normal applicable).
        done = [index for index, rung in enumerate(ladder) if (code, rung) in applied]
        for rung in ladder[max(done) + 1 if done else 0 :]:
            edit = REMEDY_RUNGS[rung](directory)
            if edit is None:
                continue
            description, incar, centering, promote = edit
            return VaspRemedy(
                policy=policy, code=code, rung=rung, description=description, incar=incar,
                kpoints_centering=centering, promote_contcar=promote,
            )
    return None


def apply_vasp_remedy(workdir: PathLike, remedy: VaspRemedy, history_path: PathLike | None = None) -> Path:
    """Apply ``remedy`` in ``workdir`` and append it to the history; return the history path.

    Order: CONTCAR promotion, INCAR edits (:func:`update_incar`), KPOINTS
    centering. A step that cannot execute raises :class:`RemedyError` before
    the history is touched. The history keeps any entries found at the legacy
    location when the job-scoped file is written for the first time.
    """
    directory = Path(workdir)
    if remedy.promote_contcar and not contcar_to_poscar(directory):
        raise RemedyError(f"{remedy.rung}: no usable CONTCAR in {directory}")
    if remedy.incar:
        if not (directory / "INCAR").is_file():
            raise RemedyError(f"{remedy.rung}: no INCAR in {directory}")
        update_incar(remedy.incar, directory / "INCAR")
    if remedy.kpoints_centering is not None:
        try:
            set_kpoint_centering(remedy.kpoints_centering, directory / "KPOINTS")
        except (OSError, ValueError) as error:
            raise RemedyError(f"{remedy.rung}: {error}") from None
    entries = read_remedy_history(directory, history_path)
    entries.append(attrs.asdict(remedy))
    target = _history_target(directory, history_path)
    write_json(target, {"format": HISTORY_FORMAT, "format_version": 1, "entries": entries})
    return target
