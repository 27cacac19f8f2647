from __future__ import annotations

import json

import pytest
from test_vasp_support import SI_POSCAR, make_workdir

from httk.workflow.vasp import (
    RemedyError,
    apply_vasp_remedy,
    job_remedy_history_path,
    plan_vasp_remedy,
    read_incar,
    read_kpoint_mesh,
    read_remedy_history,
    register_remedy_policy,
    remedy_policy_names,
    write_automatic_kpoints,
)


def report(*codes):
    return {"format": "httk-workflow-vasp-run-report", "format_version": 1, "diagnosis": list(codes)}


def ladder(workdir, codes, history_path=None, policy="reviewed-v1"):
    """Plan and apply until exhausted; return the rungs in order."""
    rungs = []
    while (remedy := plan_vasp_remedy(workdir, report(*codes), policy=policy, history_path=history_path)) is not None:
        apply_vasp_remedy(workdir, remedy, history_path=history_path)
        rungs.append(remedy.rung)
        assert len(rungs) < 20
    return rungs


def test_zbrent_ladder_progresses_across_calls(tmp_path):
    workdir = make_workdir(tmp_path, incar="IBRION = 2 ; NSW = 50\n")
    (workdir / "CONTCAR").write_text(SI_POSCAR.replace("0.25 0.25 0.25", "0.26 0.25 0.25"))
    history = job_remedy_history_path(tmp_path / "payload")
    assert history == tmp_path / "payload" / ".httk-job" / "vasp-remedies.json"
    first = plan_vasp_remedy(workdir, report("zbrent"), history_path=history)
    assert (first.rung, first.incar) == ("reduce_potim", {"POTIM": 0.25})
    assert plan_vasp_remedy(workdir, report("zbrent"), history_path=history) == first  # planning writes nothing
    apply_vasp_remedy(workdir, first, history_path=history)
    assert read_incar(workdir / "INCAR")["POTIM"] == "0.25"
    assert ladder(workdir, ["zbrent"], history) == ["switch_ibrion_1", "promote_contcar"]
    assert read_incar(workdir / "INCAR") == {"IBRION": "1", "NSW": "50", "POTIM": "0.25"}
    assert (workdir / "POSCAR.orig").is_file()
    entries = read_remedy_history(workdir, history)
    assert [(e["code"], e["rung"]) for e in entries] == [
        ("zbrent", "reduce_potim"), ("zbrent", "switch_ibrion_1"), ("zbrent", "promote_contcar")
    ]
    assert json.loads(history.read_text())["format"] == "httk-workflow-vasp-remedy-history"


@pytest.mark.parametrize(
    ("incar", "kpoints", "codes", "expected"),
    [
        ("NBANDS = 16\n", False, ["too_few_bands"], ["bump_bands"]),
        ("ENCUT = 400\n", False, ["too_few_bands"], []),  # no NBANDS: bump_bands cannot execute
        ("ISMEAR = -5\n", True, ["tetrahedron"], ["switch_to_gamma", "ismear_0"]),
        ("ISMEAR = -5\n", False, ["tetrahedron"], ["ismear_0"]),  # no KPOINTS staged
        ("ALGO = Fast\n", False, ["subspace_matrix"], ["algo_normal", "algo_all"]),
        ("ENCUT = 400\n", False, ["edddav"], ["algo_all"]),  # unset ALGO already is Normal
        ("ALGO = Fast\n", False, ["eddrmm"], ["algo_normal", "algo_all", "reduce_potim"]),
        ("ENCUT = 400\n", False, ["brmix"], ["reduce_amix"]),
        ("SYMPREC = 1e-3\n", True, ["ibzkpt"], ["switch_to_gamma", "tighten_symprec"]),
        ("ENCUT = 400\n", False, ["rotation_matrix"], ["tighten_symprec", "isym_0"]),
        ("NBANDS = 16\n", False, ["brmix", "too_few_bands"], ["bump_bands", "reduce_amix"]),  # precedence
        ("ENCUT = 400\n", False, ["unknown_code"], []),
        ("ENCUT = 400\n", False, [], []),
    ],
)
def test_reviewed_ladders(tmp_path, incar, kpoints, codes, expected):
    workdir = make_workdir(tmp_path, incar=incar)
    if kpoints:
        write_automatic_kpoints((4, 4, 4), workdir / "KPOINTS")
    assert ladder(workdir, codes) == expected


def test_applied_edits(tmp_path):
    workdir = make_workdir(tmp_path, incar="NBANDS = 16 ; ISMEAR = -5\n")
    write_automatic_kpoints((4, 4, 4), workdir / "KPOINTS")
    ladder(workdir, ["too_few_bands", "tetrahedron"])
    assert read_incar(workdir / "INCAR") == {"NBANDS": "20", "ISMEAR": "0", "SIGMA": "0.05"}
    assert read_kpoint_mesh(workdir / "KPOINTS").centering == "Gamma"


def test_report_is_read_from_the_workdir_by_default(tmp_path):
    workdir = make_workdir(tmp_path, incar="NBANDS = 8\n")
    (workdir / "vasp-run-report.json").write_text(json.dumps(report("too_few_bands")))
    assert plan_vasp_remedy(workdir).rung == "bump_bands"


def test_legacy_history_is_read_until_the_job_file_exists(tmp_path):
    workdir = make_workdir(tmp_path, incar="ALGO = Fast\n")
    legacy = plan_vasp_remedy(workdir, report("edddav"))
    apply_vasp_remedy(workdir, legacy)  # history_path=None: the pre-0.2 workdir file
    assert (workdir / "vasp-remedies.json").is_file()
    job_history = job_remedy_history_path(tmp_path / "payload")
    following = plan_vasp_remedy(workdir, report("edddav"), history_path=job_history)
    assert following.rung == "algo_all"
    apply_vasp_remedy(workdir, following, history_path=job_history)
    assert [e["rung"] for e in read_remedy_history(workdir, job_history)] == ["algo_normal", "algo_all"]


def test_relative_history_resolves_against_the_workdir(tmp_path):
    workdir = make_workdir(tmp_path, incar="NBANDS = 8\n")
    remedy = plan_vasp_remedy(workdir, report("too_few_bands"), history_path="h/r.json")
    assert apply_vasp_remedy(workdir, remedy, history_path="h/r.json") == workdir / "h" / "r.json"
    assert plan_vasp_remedy(workdir, report("too_few_bands"), history_path="h/r.json") is None


def test_policy_registry(tmp_path):
    assert "reviewed-v1" in remedy_policy_names()
    with pytest.raises(RemedyError, match="registered: .*reviewed-v1"):
        plan_vasp_remedy(tmp_path, report(), policy="nope")
    with pytest.raises(RemedyError, match="already registered"):
        register_remedy_policy("reviewed-v1", {"zbrent": ["reduce_potim"]}, ["zbrent"])
    with pytest.raises(RemedyError, match="unknown or missing rungs"):
        register_remedy_policy("t-bad-rung", {"zbrent": ["fly"]}, ["zbrent"])
    with pytest.raises(RemedyError, match="precedence"):
        register_remedy_policy("t-bad-order", {"zbrent": ["reduce_potim"]}, ["brmix"])
    register_remedy_policy("t-gentle", {"zbrent": ["promote_contcar", "reduce_potim"]}, ["zbrent"], replace=True)
    workdir = make_workdir(tmp_path, incar="IBRION = 2\n")
    assert ladder(workdir, ["zbrent"], policy="t-gentle") == ["reduce_potim"]  # no CONTCAR: promotion skipped


def test_apply_refuses_what_it_cannot_do(tmp_path):
    workdir = make_workdir(tmp_path, incar="NBANDS = 8\n")
    remedy = plan_vasp_remedy(workdir, report("too_few_bands"))
    (workdir / "INCAR").unlink()
    with pytest.raises(RemedyError, match="no INCAR"):
        apply_vasp_remedy(workdir, remedy)
    assert read_remedy_history(workdir) == []
