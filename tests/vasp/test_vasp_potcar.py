from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from test_vasp_support import FEO_POSCAR, SI_POSCAR, make_library, potcar_text

from httk.workflow.vasp import PotcarError, assemble_potcar, read_potcar_bytes


@pytest.fixture
def library(tmp_path):
    return make_library(tmp_path)


def poscar(tmp_path, text):
    path = tmp_path / "POSCAR"
    path.write_text(text, encoding="utf-8")
    return path


def test_assembly_in_species_order_with_provenance(tmp_path, library):
    result = assemble_potcar(library, poscar=poscar(tmp_path, FEO_POSCAR), output=tmp_path / "POTCAR")
    assert [(c.species, c.variant, c.titel, c.zval) for c in result.choices] == [
        ("Fe", "Fe_pv", "PAW_PBE Fe_pv 01Jan2000", 14.0),
        ("O", "O", "PAW_PBE O 01Jan2000", 6.0),
    ]
    assert result.choices[0].source == str(library / "Fe_pv" / "POTCAR.gz")
    written = (tmp_path / "POTCAR").read_bytes()
    assert written == (potcar_text("Fe", "Fe_pv", 14.0) + potcar_text("O", "O", 6.0)).encode()
    assert result.sha256 == hashlib.sha256(written).hexdigest()
    assert result.choices[1].sha256 == hashlib.sha256(potcar_text("O", "O", 6.0).encode()).hexdigest()
    assert result.nelect([1, 1]) == 20.0
    provenance = json.loads((tmp_path / "POTCAR.provenance.json").read_text())
    assert provenance["format"] == "httk-workflow-potcar-provenance" and provenance["format_version"] == 1
    assert provenance["sha256"] == result.sha256
    assert [c["variant"] for c in provenance["choices"]] == ["Fe_pv", "O"]


def test_explicit_variants_win(tmp_path, library):
    result = assemble_potcar(library, poscar(tmp_path, FEO_POSCAR), tmp_path / "POTCAR", variants={"O": "O_h"})
    assert [c.variant for c in result.choices] == ["Fe_pv", "O_h"]


@pytest.mark.parametrize(
    ("variants", "match"),
    [({"O": "O_missing"}, "explicit variant"), ({"Zn": "Zn"}, "not in the POSCAR")],
)
def test_bad_variants(tmp_path, library, variants, match):
    with pytest.raises(PotcarError, match=match):
        assemble_potcar(library, poscar(tmp_path, FEO_POSCAR), tmp_path / "POTCAR", variants=variants)


def test_missing_species_names_what_was_tried(tmp_path, library):
    with pytest.raises(PotcarError, match="tried Zn, Zn_pv, Zn_sv"):
        assemble_potcar(library, poscar(tmp_path, SI_POSCAR.replace("Si\n2", "Zn\n2")), tmp_path / "POTCAR")


def test_species_label_naming_a_variant(tmp_path, library):
    result = assemble_potcar(library, poscar(tmp_path, FEO_POSCAR.replace("Fe O", "Fe O_h")), tmp_path / "POTCAR")
    assert result.choices[1].variant == "O_h"


def test_repeated_species_are_concatenated_in_order(tmp_path, library):
    text = SI_POSCAR.replace("Si\n2\n", "Si O Si\n1 1 1\n").replace("0.25 0.25 0.25\n", "0.25 0.25 0.25\n0.5 0.5 0.5\n")
    result = assemble_potcar(library, poscar(tmp_path, text), tmp_path / "POTCAR")
    assert [c.variant for c in result.choices] == ["Si", "O", "Si"]


def test_no_species_line_is_refused(tmp_path, library):
    with pytest.raises(PotcarError, match="species line"):
        assemble_potcar(library, poscar(tmp_path, SI_POSCAR.replace("Si\n2\n", "2\n")), tmp_path / "POTCAR")


@pytest.mark.skipif(shutil.which("gzip") is None and shutil.which("uncompress") is None, reason="no gzip/uncompress")
def test_legacy_z_is_read_through_an_external_program(tmp_path, library):
    assert b"TITEL  = PAW_PBE Mn" in read_potcar_bytes(library / "Mn" / "POTCAR.Z")
    result = assemble_potcar(library, poscar(tmp_path, SI_POSCAR.replace("Si\n2", "Mn\n2")), tmp_path / "POTCAR")
    assert result.choices[0].zval == 7.0


def test_z_without_any_decompressor(tmp_path, library, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(PotcarError, match="neither gzip nor uncompress"):
        read_potcar_bytes(library / "Mn" / "POTCAR.Z")
