from __future__ import annotations

import pytest
from test_vasp_support import INCAR

from httk.workflow.vasp import (
    IncarError,
    bump_nbands,
    calculate_nbands,
    format_incar_value,
    format_magmom,
    parse_incar,
    read_incar,
    suggested_magnetic_moments,
    update_incar,
    write_incar,
)


def test_read_incar_understands_statements_comments_and_case(tmp_path):
    path = tmp_path / "INCAR"
    path.write_text(INCAR + "PREC = Accurate ; \\\n  LREAL = .FALSE.\n# ISMEAR = 1\n", encoding="utf-8")
    assert read_incar(path) == {
        "SYSTEM": "test", "ISPIN": "2", "ISYM": "2", "ENCUT": "400", "NBANDS": "16",
        "PREC": "Accurate", "LREAL": ".FALSE.",
    }
    assert list(read_incar(path))[:3] == ["SYSTEM", "ISPIN", "ISYM"]


@pytest.mark.parametrize(
    ("text", "match"), [("ENCUT 400\n", "no '='"), ("1BAD = 3\n", "invalid tag")]
)
def test_malformed_statements(text, match):
    with pytest.raises(IncarError, match=match):
        parse_incar(text)


def test_first_assignment_wins():
    assert parse_incar("ENCUT = 400\nENCUT = 500\n") == {"ENCUT": "400"}


@pytest.mark.parametrize(
    ("updates", "expected_text"),
    [
        ({"ISPIN": 1}, "SYSTEM = test   ! a comment\nISPIN = 1 ; ISYM = 2\nencut = 400  # lower-case tag\n"
                       "NBANDS = 16\n"),
        ({"isym": None}, "SYSTEM = test   ! a comment\nISPIN = 2\nencut = 400  # lower-case tag\nNBANDS = 16\n"),
        ({"ENCUT": 520.0}, "SYSTEM = test   ! a comment\nISPIN = 2 ; ISYM = 2\nENCUT = 520.0 # lower-case tag\n"
                           "NBANDS = 16\n"),
        ({"NBANDS": None, "LWAVE": False}, "SYSTEM = test   ! a comment\nISPIN = 2 ; ISYM = 2\n"
                                           "encut = 400  # lower-case tag\nLWAVE = .FALSE.\n"),
    ],
)
def test_update_incar_rewrites_statements(tmp_path, updates, expected_text):
    path = tmp_path / "INCAR"
    path.write_text(INCAR, encoding="utf-8")
    update_incar(updates, path)
    assert path.read_text() == expected_text


def test_update_removes_stale_duplicates(tmp_path):
    path = tmp_path / "INCAR"
    path.write_text("ISPIN = 2 ; ISYM = 2\nISPIN = 1\n", encoding="utf-8")
    assert update_incar({"ISPIN": 2, "ENCUT": 520}, path) == {"ISPIN": "2", "ISYM": "2", "ENCUT": "520"}
    assert path.read_text() == "ISPIN = 2 ; ISYM = 2\nENCUT = 520\n"


def test_update_creates_a_missing_file_and_refuses_bad_values(tmp_path):
    path = tmp_path / "INCAR"
    assert update_incar({"ENCUT": 520}, path) == {"ENCUT": "520"}
    for bad in ({"SYSTEM": 'a;"b"'}, {"SYSTEM": "a # b"}, {"SYSTEM": "a ! b"}, {"X-Y": 1}, {"encut": 1, "ENCUT": 2},
                {"A": object()}):
        with pytest.raises(IncarError):
            update_incar(bad, path)
    assert path.read_text() == "ENCUT = 520\n"


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, ".TRUE."), (False, ".FALSE."), (3, "3"), (0.05, "0.05"), (1e-8, "1e-08"), ([1, 2.5], "1 2.5"),
     (" Fast ", "Fast")],
)
def test_format_incar_value(value, text):
    assert format_incar_value(value) == text


def test_write_incar(tmp_path):
    write_incar({"encut": 520, "ISMEAR": 0}, tmp_path / "INCAR")
    assert (tmp_path / "INCAR").read_text() == "ENCUT = 520\nISMEAR = 0\n"


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((8, 2), {}, 8),  # ceil(10/2)=5 + max(1, 3)=3 -> 8; 0.6*8 -> 5
        ((100, 10), {}, 60),  # 51 + 5 = 56 < ceil(0.6*100) = 60
        ((200, 2), {}, 120),  # 101 + 3 = 104 < ceil(0.6*200) = 120
        ((8, 2), {"magnetization": 4.0}, 10),
        ((8, 2), {"noncollinear": True}, 16),
        ((7, 1), {}, 7),  # NINT(9)/2 = 4 (integer division) + 3; INT(4.2) = 4
    ],
)
def test_calculate_nbands(args, kwargs, expected):
    assert calculate_nbands(*args, **kwargs) == expected


# VASP 5.4.4 main.F: MAX(NINT(NELECT+2)/2 + MAX(NIONS/2,3), INT(0.6*NELECT)) + NMAG, NMAG = (ΣMAGMOM+1)/2,
# the whole doubled for a noncollinear run; Fortran integer division truncates, NINT rounds halves away from 0.
@pytest.mark.parametrize(
    ("nelect", "nions", "magnetization", "noncollinear", "expected"),
    [
        (100, 2, 10, False, 65),  # the row: max(51 + 3, 60) + 5 (the old ceil rule gave 60)
        (432, 16, 40, True, 558),  # the worst row: 2 * (max(217 + 8, 259) + 20) (the old rule gave 520)
        (100, 2, -10, False, 65),  # the sign only names the majority channel
        (100, 2, 0.9, False, 60),  # INT((0.9 + 1) / 2) = 0
        (100, 2, 1.0, False, 61),  # INT(2 / 2) = 1
        (7.4, 1, 0, False, 7),  # NINT(9.4) = 9 -> 9 / 2 = 4 (truncated), + 3 (the old ceil rule gave 8)
        (7.5, 1, 0, False, 8),  # NINT(9.5) = 10, halves away from zero
        (51, 1, 0, False, 30),  # 26 + 3 = 29 < INT(30.6) = 30 (the old rule took ceil: 31)
        (5, 7, 0, False, 6),  # NINT(7) / 2 = 3; NIONS / 2 = 3 -> 6
        (10, 6, 0, False, 9),  # 6 + MAX(3, 3) = 9 vs INT(6.0) = 6
        (20, 1, 0, False, 14),  # 11 + 3 = 14 vs INT(12.0)
        (30, 1, 0, False, 19),  # 16 + 3 = 19 vs INT(18.0)
        (40, 1, 0, False, 24),  # 21 + 3 = 24 vs INT(24.0) = 24: a tie
        (50, 1, 0, False, 30),  # 26 + 3 = 29 < INT(30.0) = 30
        (8, 2, 4, True, 20),  # 2 * (max(5 + 3, 4) + 2)
    ],
)
def test_calculate_nbands_follows_vasp_544(nelect, nions, magnetization, noncollinear, expected):
    assert calculate_nbands(nelect, nions, magnetization=magnetization, noncollinear=noncollinear) == expected


def test_calculate_nbands_refuses_nonsense():
    with pytest.raises(ValueError):
        calculate_nbands(0, 1)


@pytest.mark.parametrize(
    ("args", "expected"), [((16,), 20), ((100,), 110), ((100, 1.5), 150), ((16, 1.1, 4, 8), 24)]
)
def test_bump_nbands(args, expected):
    assert bump_nbands(*args) == expected


def test_suggested_magnetic_moments_and_magmom():
    moments = suggested_magnetic_moments(["Fe_pv", "O", "Gd"], [2, 3, 1])
    assert moments == [5.0, 5.0, 0.6, 0.6, 0.6, 7.0]
    assert format_magmom(moments) == "2*5.0 3*0.6 1*7.0"
    assert suggested_magnetic_moments(["Si"], [2], table={"Si": 0.0}) == [0.0, 0.0]
    with pytest.raises(ValueError):
        suggested_magnetic_moments(["Fe"], [1, 2])


WANNIER_INCAR = '''SYSTEM = "a ; b"   ! quoted: the ';' is part of the value
LWANNIER90 = .TRUE. ; NBANDS = 24
WANNIER90_WIN = "
num_wann = 4   ! wannier90's own comment, inside the quotes
begin projections
Si: sp3 ; # not a statement either
end projections
"
ENCUT = 400
'''


def test_quoted_values_are_literal_across_separators_comments_and_lines():
    tags = parse_incar(WANNIER_INCAR)
    assert tags == {
        "SYSTEM": "a ; b", "LWANNIER90": ".TRUE.", "NBANDS": "24",
        "WANNIER90_WIN": "\nnum_wann = 4   ! wannier90's own comment, inside the quotes\nbegin projections\n"
                         "Si: sp3 ; # not a statement either\nend projections\n",
        "ENCUT": "400",
    }


def test_an_unclosed_quote_is_refused_naming_its_line():
    with pytest.raises(IncarError, match=r"line 2: a quoted value is never closed"):
        parse_incar('ENCUT = 400\nSYSTEM = "open\nISMEAR = 0\n')


def test_update_keeps_quoted_statements_and_leaves_no_stale_assignment(tmp_path):
    path = tmp_path / "INCAR"
    path.write_text(WANNIER_INCAR + "NBANDS = 30\n", encoding="utf-8")
    tags = update_incar({"NBANDS": 32, "SYSTEM": "c ; d"}, path)
    text = path.read_text()
    assert text.count("NBANDS") == 1 and 'SYSTEM = "c ; d"' in text
    assert tags["NBANDS"] == "32" and tags["SYSTEM"] == "c ; d"
    assert tags["WANNIER90_WIN"] == parse_incar(WANNIER_INCAR)["WANNIER90_WIN"]


@pytest.mark.parametrize("value", ["a ; b", "line one\nline two", "x;y;z"])
def test_values_that_need_quotes_are_written_quoted_and_read_back(tmp_path, value):
    write_incar({"SYSTEM": value, "ENCUT": 520}, tmp_path / "INCAR")
    assert read_incar(tmp_path / "INCAR") == {"SYSTEM": value, "ENCUT": "520"}
