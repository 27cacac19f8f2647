"""The dependency-free VASP helpers cross-checked against ASE (and pymatgen where installed).

The helpers never import either; these tests do (the ``test`` extra installs
them, so ``make test`` runs them). Figures recorded in docs/vasp_runners.md,
"Cross-checked against ASE and pymatgen", come from these cases: keep them in
step (each test asserts its case count).

ASE's own VASP samples (``ase/test/testdata/vasp``) are read where the installed
``ase`` package keeps them, never copied into this repository; a test that
needs one skips, naming it, when the installed ASE lacks it. The samples of
``tests/data/vasp`` were written for this project (see its README) and are read
by both references here too.
"""

from __future__ import annotations

import importlib.resources
import math
import shutil
from itertools import groupby
from pathlib import Path

import pytest

ase = pytest.importorskip("ase")
np = pytest.importorskip("numpy")

from ase import Atoms, units  # noqa: E402
from ase.build import bulk, molecule  # noqa: E402
from ase.collections import g2  # noqa: E402
from ase.io import read, write  # noqa: E402

from httk.workflow.vasp import (  # noqa: E402
    MATERIALS_PROJECT_MAGNETIC_MOMENTS,
    automatic_kpoint_grid,
    extract_vasp_results,
    parse_incar,
    read_incar,
    read_poscar_header,
    read_vasprun,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "vasp"
DENSITIES = (10, 20, 30, 40, 60)
RNG_SEED = 20261201

BULK = [
    ("Si", "diamond", {}), ("C", "diamond", {}), ("Ge", "diamond", {}), ("Cu", "fcc", {}), ("Al", "fcc", {}),
    ("Au", "fcc", {}), ("Fe", "bcc", {}), ("W", "bcc", {}), ("Na", "bcc", {}), ("Mg", "hcp", {}),
    ("Ti", "hcp", {}), ("Zn", "hcp", {}), ("Po", "sc", {"a": 3.35}),
    ("NaCl", "rocksalt", {"a": 5.64}), ("MgO", "rocksalt", {"a": 4.21}), ("GaAs", "zincblende", {"a": 5.65}),
    ("ZnO", "wurtzite", {"a": 3.25, "c": 5.21}), ("CsCl", "cesiumchloride", {"a": 4.12}),
    ("CaF2", "fluorite", {"a": 5.46}),
]  # fmt: skip


def ase_sample(name: str) -> Path:
    """ASE's test sample ``testdata/vasp/<name>`` where the installed ``ase`` keeps it; skip if it has none."""
    try:
        folder = importlib.resources.files("ase.test") / "testdata" / "vasp"
    except ModuleNotFoundError:
        pytest.skip(f"the installed ASE {ase.__version__} has no ase.test package, so no test sample {name}")
    path = folder / name
    if not isinstance(path, Path) or not path.exists():  # a zipped ASE has no file to hand VASP readers
        pytest.skip(f"the installed ASE {ase.__version__} has no test sample testdata/vasp/{name} on disk")
    return path


def sample(source: str) -> Path:
    """``ase:<name>`` is one of ASE's samples, any other name a file of tests/data/vasp."""
    return ase_sample(source[4:]) if source.startswith("ase:") else DATA / source


def _bulk_structures() -> list[tuple[str, Atoms]]:
    out = []
    for name, kind, lattice in BULK:
        for variant in ({}, {"cubic": True}, {"orthorhombic": True}):
            try:
                atoms = bulk(name, kind, **lattice, **variant)
            except (ValueError, RuntimeError):  # e.g. no cubic cell for hcp
                continue
            out.append((f"{name}-{kind}-{'-'.join(variant) or 'primitive'}", atoms))
            out.append((f"{name}-{kind}-{'-'.join(variant) or 'primitive'}-2x1x3", atoms.repeat((2, 1, 3))))
    return out


def _molecules() -> list[tuple[str, Atoms]]:
    out = []
    for name in g2.names:
        atoms = molecule(name)
        atoms.center(vacuum=4.0)
        out.append((f"molecule-{name}", atoms))
    return out


def _random_cells(count: int) -> list[tuple[str, Atoms]]:
    rng = np.random.default_rng(RNG_SEED)
    symbols = ["H", "Li", "O", "Si", "Fe", "Ni", "Zr", "Ba", "Gd", "U"]
    out = []
    while len(out) < count:
        lengths = rng.uniform(2.0, 15.0, size=3)
        cell = np.diag(lengths) + rng.uniform(-0.45, 0.45, size=(3, 3)) * lengths.min()
        if np.linalg.det(cell) < 0.2 * np.prod(lengths):
            continue  # too flat to be a crystal cell
        species = list(rng.choice(symbols, size=rng.integers(1, 5), replace=False))
        chemical = [s for s in species for _ in range(int(rng.integers(1, 5)))]
        atoms = Atoms(chemical, scaled_positions=rng.uniform(0, 1, size=(len(chemical), 3)), cell=cell, pbc=True)
        out.append((f"random-{len(out)}", atoms))
    return out


_FIXED = _bulk_structures() + _molecules()
STRUCTURES = _FIXED + _random_cells(600 - len(_FIXED))


def _runs(symbols: list[str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    grouped = [(symbol, len(list(group))) for symbol, group in groupby(symbols)]
    return tuple(s for s, _ in grouped), tuple(n for _, n in grouped)


def _write_poscar(tmp_path: Path, atoms: Atoms, index: int) -> tuple[Path, bool, bool]:
    # Vary what ASE writes: Direct or Cartesian, sorted by species or as given, VASP 5 or VASP 4.
    direct, vasp5 = index % 2 == 0, index % 7 != 3
    path = tmp_path / f"POSCAR-{index}"
    write(path, atoms, format="vasp", direct=direct, sort=index % 3 == 0, vasp5=vasp5)
    return path, direct, vasp5


def test_poscar_round_trips_agree_with_ase(tmp_path):
    cases = agreements = 0
    for index, (_name, atoms) in enumerate(STRUCTURES):
        path, direct, vasp5 = _write_poscar(tmp_path, atoms, index)
        header = read_poscar_header(path)
        back = read(path, format="vasp")  # ASE's own reading of the file it wrote
        species, counts = _runs(back.get_chemical_symbols())
        cases += 1
        agreements += (
            header.species == (species if vasp5 else ())
            and header.counts == counts
            and header.cartesian == (not direct)
            and np.allclose(header.cell, back.cell[:], atol=1e-9)
            and math.isclose(header.volume, back.get_volume(), rel_tol=1e-12)
        )
    assert (cases, agreements) == (600, 600)


@pytest.mark.parametrize("comment", ["! counts", "!", "! 3 4"])
def test_a_counts_line_comment_reads_as_ase_reads_it(tmp_path, comment):
    path = tmp_path / "POSCAR"
    write(path, bulk("NaCl", "rocksalt", a=5.64, cubic=True), format="vasp", direct=True)
    lines = path.read_text().splitlines()
    lines[6] += f" {comment}"
    path.write_text("\n".join(lines) + "\n")
    assert read_poscar_header(path).counts == _runs(read(path, format="vasp").get_chemical_symbols())[1]


def _vasp_auto(length: float, reciprocal: np.ndarray) -> tuple[int, ...]:
    # VASP's fully automatic length mode, from ASE's reciprocal cell (rows, no 2π): max(1, int(l|b_i| + 0.5)).
    return tuple(max(1, int(length * float(np.linalg.norm(row)) + 0.5)) for row in reciprocal)


def test_kpoint_grids_are_vasps_rule_on_ases_reciprocal_cell(tmp_path):
    cases = agreements = denser_by_round_up = 0
    for index, (_name, atoms) in enumerate(STRUCTURES):
        header = read_poscar_header(_write_poscar(tmp_path, atoms, index)[0])
        for density in DENSITIES:
            cases += 1
            expected = _vasp_auto(density, atoms.cell.reciprocal())
            agreements += automatic_kpoint_grid(density, header) == expected
            denser_by_round_up += automatic_kpoint_grid(density, header, rounding="up") != expected
    assert cases == len(STRUCTURES) * len(DENSITIES) and agreements == cases
    assert denser_by_round_up > cases // 3  # the old default: more than a third of the grids were denser


def test_si_diamond_at_length_20_is_6x6x6_as_vasp(tmp_path):
    path = tmp_path / "POSCAR"
    silicon = bulk("Si", "diamond", a=5.43)
    write(path, silicon, format="vasp")
    assert automatic_kpoint_grid(20, path) == (6, 6, 6) == _vasp_auto(20, silicon.cell.reciprocal())


INCAR_CHOICES = {
    "encut": [300, 400.5, 520, 600.25], "ediff": [1e-4, 1e-6, 5e-7], "ediffg": [-0.01, -0.05, 1e-3],
    "ismear": [-5, 0, 1], "sigma": [0.01, 0.05, 0.2], "ibrion": [-1, 1, 2, 3], "nsw": [0, 50, 99], "isif": [2, 3, 7],
    "lwave": [True, False], "lcharg": [True, False], "algo": ["Fast", "Normal", "All", "Damped"],
    "prec": ["Normal", "Accurate"], "system": ["NaCl", "NaCl rocksalt test"], "ispin": [1, 2], "kpar": [1, 2, 4],
    "lreal": ["Auto", False], "lorbit": [10, 11], "nelm": [60, 100], "potim": [0.1, 0.5], "amix": [0.1, 0.4],
    "symprec": [1e-5, 1e-8], "nbands": [16, 24], "lasph": [True, False], "npar": [1, 2], "istart": [0, 1],
}  # fmt: skip


def _ase_incars(count: int) -> list[dict]:
    rng = np.random.default_rng(RNG_SEED)
    out = []
    for _ in range(count):
        chosen = {key: values[int(rng.integers(len(values)))] for key, values in INCAR_CHOICES.items()
                  if rng.uniform() < 0.7}
        if rng.uniform() < 0.5:
            chosen["magmom"] = [float(x) for x in rng.choice([0.0, 0.6, 1.0, 5.0], size=8)]
            chosen["ispin"] = 2
        if rng.uniform() < 0.3:
            chosen["ldau_luj"] = {"Na": {"L": -1, "U": 0.0, "J": 0.0}, "Cl": {"L": 1, "U": 2.0, "J": 0.0}}
        out.append(chosen)
    return out


def _tokens(text: str) -> list[float | str]:
    # VASP's value reading: N*x repeats x, .TRUE./.FALSE. are logicals, numbers compare as numbers.
    out: list[float | str] = []
    for token in text.split():
        repeat, _, value = token.rpartition("*") if "*" in token else ("1", "", token)
        try:
            item: float | str = float(value)
        except ValueError:
            item = {".TRUE.": "T", ".FALSE.": "F"}.get(value.upper(), value)
        out.extend([item] * int(repeat))
    return out


def _expected(value: object) -> list[float | str]:
    if isinstance(value, bool):
        return ["T" if value else "F"]
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, list):
        return [item for part in value for item in _expected(part)]
    return str(value).split()


@pytest.mark.filterwarnings("ignore:Loaded VASP_PP_PATH from environment")
def test_incar_files_written_by_ase_read_as_ase_reads_them(tmp_path, monkeypatch):
    from ase.calculators.vasp.create_input import GenerateVaspInput

    monkeypatch.setenv("VASP_PP_PATH", str(ase_sample("fake_pseudos")))  # ASE's own test potentials (Na, Cl)
    atoms = bulk("NaCl", "rocksalt", a=5.64, cubic=True)
    files = tags = agreements = 0
    for index, params in enumerate(_ase_incars(60)):
        writer = GenerateVaspInput()
        writer.set(xc="PBE", **params)
        writer.initialize(atoms)
        directory = tmp_path / f"incar-{index}"
        directory.mkdir()
        writer.write_incar(atoms, directory=str(directory))
        ours = read_incar(directory / "INCAR")
        reader = GenerateVaspInput()
        reader.read_incar(str(directory / "INCAR"))
        theirs = {
            key.upper(): value
            for group in (reader.float_params, reader.exp_params, reader.string_params, reader.int_params,
                          reader.bool_params, reader.list_float_params, reader.list_int_params, reader.special_params)
            for key, value in group.items() if value is not None
        }  # fmt: skip
        files += 1
        for tag, text in ours.items():
            tags += 1
            if tag == "SYSTEM":  # ASE's reader keeps only the first word; compare with what was written
                agreements += text == params["system"]
                continue
            got, want = _tokens(text), _expected(theirs.get(tag))
            agreements += len(got) == len(want) and all(
                math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) if isinstance(a, float) and isinstance(b, float)
                else str(a).lower() == str(b).lower() for a, b in zip(got, want, strict=True)
            )
        assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))
    assert files == 60 and tags > 1000 and agreements == tags


@pytest.mark.parametrize("source", ["ase:OUTCAR_example_1", "OUTCAR"])
def test_ases_outcar_reader_and_ours_read_the_same_energy(tmp_path, source):
    shutil.copy(sample(source), tmp_path / "OUTCAR")
    atoms = read(tmp_path / "OUTCAR", format="vasp-out", index=-1)
    results = extract_vasp_results(tmp_path)
    assert results.energy == pytest.approx(atoms.get_potential_energy(force_consistent=True), abs=1e-8)
    assert results.energy_sigma0 == pytest.approx(atoms.get_potential_energy(), abs=1e-8)
    assert results.finished and results.converged


@pytest.mark.parametrize(
    ("source", "converged"),
    [("ase:convergence_OUTCAR_y_y", True), ("ase:convergence_OUTCAR_y_n", False),
     ("ase:convergence_OUTCAR_n_y", True), ("OUTCAR", True), ("OUTCAR.vasp6-unconverged", False)],
)  # fmt: skip
def test_scf_verdicts_agree_with_ases_read_convergence(tmp_path, source, converged):
    from ase.calculators.vasp import Vasp

    shutil.copy(sample(source), tmp_path / "OUTCAR")
    lines = (tmp_path / "OUTCAR").read_text().splitlines(keepends=True)
    assert extract_vasp_results(tmp_path).electronic_converged is Vasp().read_convergence(lines) is converged


@pytest.mark.parametrize("source", ["ase:vasprun_pstress.xml", "vasprun.xml"])
def test_ases_vasprun_reader_and_ours_agree(source):
    atoms = read(sample(source), format="vasp-xml", index=-1)
    run = read_vasprun(sample(source))
    assert run.energy == pytest.approx(atoms.get_potential_energy(force_consistent=True), abs=1e-8)
    assert run.energy_sigma0 == pytest.approx(atoms.get_potential_energy(), abs=1e-8)
    assert np.allclose(run.forces, atoms.get_forces())
    assert np.allclose(-np.array(run.stress) * 0.1 * units.GPa, atoms.get_stress(voigt=False))  # kB -> eV/Å³
    assert np.allclose(run.structure.lattice, atoms.cell[:]) and run.species == tuple(atoms.get_chemical_symbols())
    assert np.allclose(run.structure.positions, atoms.get_scaled_positions())


@pytest.mark.parametrize("source", ["ase:vasprun_pstress.xml", "vasprun.xml"])
def test_pymatgen_reads_vasprun_as_we_do(source):
    outputs = pytest.importorskip("pymatgen.io.vasp")
    vasprun = outputs.Vasprun(str(sample(source)), parse_potcar_file=False)
    run = read_vasprun(sample(source))
    assert run.enthalpy == pytest.approx(vasprun.ionic_steps[-1]["e_fr_energy"])  # pymatgen: the step's <energy>
    assert run.electronic_converged is vasprun.converged_electronic is True
    assert run.ionic_converged is None and vasprun.converged_ionic  # no relaxation: nothing to converge
    assert run.parameters["NELM"] == vasprun.parameters["NELM"]
    assert run.electronic_steps[-1] == len(vasprun.ionic_steps[-1]["electronic_steps"])


def test_pymatgen_reads_the_oszicar_as_we_do(tmp_path):
    outputs = pytest.importorskip("pymatgen.io.vasp")
    shutil.copy(DATA / "OSZICAR", tmp_path / "OSZICAR")
    oszicar = outputs.Oszicar(str(tmp_path / "OSZICAR"))
    results = extract_vasp_results(tmp_path)
    free, sigma0 = oszicar.ionic_steps[-1]["F"], oszicar.final_energy  # pymatgen's final_energy is the last E0
    assert free != sigma0 and (results.energy, results.energy_sigma0) == (free, sigma0)
    assert results.ionic_steps == len(oszicar.ionic_steps) == 3
    assert results.electronic_steps == len(oszicar.electronic_steps[-1])


@pytest.mark.parametrize(
    "text",
    [
        'SYSTEM = "a ; b"\nENCUT = 400\n',
        'WANNIER90_WIN = "\nbegin projections\nSi: sp3\nend projections\n"\nLWANNIER90 = .TRUE.\n',
        'SYSTEM = "x = y" ; ISMEAR = 0 ; SIGMA = 0.05\n',
    ],
)
def test_quoted_incar_values_read_as_pymatgen_reads_them(text):
    inputs = pytest.importorskip("pymatgen.io.vasp.inputs")
    theirs = inputs.Incar.from_str(text)
    ours = parse_incar(text)
    assert set(ours) == set(theirs)
    for tag, value in theirs.items():
        if isinstance(value, str):
            assert ours[tag].strip() == value.strip()
        else:
            assert _tokens(ours[tag]) == _expected(value)


def test_the_materials_project_table_is_pymatgens():
    yaml_path = Path(pytest.importorskip("pymatgen.io.vasp").__file__).parent / "VASPIncarBase.yaml"
    yaml = pytest.importorskip("ruamel.yaml")
    magmom = yaml.YAML(typ="safe").load(yaml_path.read_text())["INCAR"]["MAGMOM"]
    elements = {key: float(value) for key, value in magmom.items() if key.isalpha()}
    assert dict(MATERIALS_PROJECT_MAGNETIC_MOMENTS) == elements
