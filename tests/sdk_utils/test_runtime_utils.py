"""runtime_utils: whitelisted arithmetic, JSON templates, and compression against real files."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import time

import pytest

from httk.workflow.runtime_utils import (
    compress_files,
    decompress_files,
    evaluate_expression,
    render_template,
)

# -- evaluate_expression -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 // 2", 3),
        ("7 / 2", 3.5),
        ("-7 % 3", 2),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("-(3)", -3),
        ("+4", 4),
        ("1.5e3", 1500.0),
        ("abs(-2)", 2),
        ("min(3, 1, 2)", 1),
        ("max(1, 2.5)", 2.5),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("floor(2.7)", 2),
        ("ceil(2.1)", 3),
        ("sqrt(16)", 4.0),
        ("log(8, 2)", 3.0),
        ("exp(0)", 1.0),
        ("  natoms * 8 + nspin  ", 34),
    ],
)
def test_expressions_evaluate_like_python(expression, expected):
    result = evaluate_expression(expression, {"natoms": 4, "nspin": 2})
    assert result == expected
    assert type(result) is type(expected)


def test_integers_stay_exact():
    assert evaluate_expression("10 ** 30 + 1") == 10**30 + 1
    assert evaluate_expression("x * 2", {"x": 3}) == 6
    assert isinstance(evaluate_expression("x * 2", {"x": 3}), int)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("a.b", "Attribute"),
        ("__import__('os')", "unknown function '__import__'"),
        ("open('f')", "unknown function 'open'"),
        ("(lambda: 1)()", "unsupported call target"),
        ("x[0]", "Subscript"),
        ("1 < 2", "Compare"),
        ("1 if 1 else 2", "IfExp"),
        ("'text'", "unsupported literal"),
        ("True", "unsupported literal"),
        ("y + 1", "unknown name 'y'"),
        ("1 << 4", "BinOp"),
        ("abs(x=1)", "positional arguments only"),
        ("sqrt(1, 2)", "takes 1 arguments"),
        ("min()", "takes 1 or more arguments"),
        ("1 +", "invalid expression"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "function 'sqrt'"),
        ("exp(10000)", "function 'exp'"),
        ("1e999", "non-finite"),
        ("2.0 ** 5000", "overflows"),
    ],
)
def test_everything_else_is_refused_naming_the_construct(expression, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate_expression(expression)


@pytest.mark.parametrize(
    "expression", ["9 ** 9 ** 9", "2 ** 100000", "(10 ** 1000) ** 1000", " * ".join(["10 ** 9999"] * 40)]
)
def test_huge_integers_are_refused_promptly(expression):
    started = time.monotonic()
    with pytest.raises(ValueError, match="exceeds"):
        evaluate_expression(expression)
    assert time.monotonic() - started < 2.0


def test_deep_nesting_is_refused_not_crashing():
    with pytest.raises(ValueError):
        evaluate_expression("-" * 100_000 + "1")


def test_non_numeric_variables_are_refused():
    with pytest.raises(ValueError, match="variable 'flag'"):
        evaluate_expression("flag + 1", {"flag": True})


# -- render_template -----------------------------------------------------------------------


def test_render_template_with_dotted_lookup_and_output(tmp_path):
    template = tmp_path / "INCAR.tmpl"
    template.write_text(
        "SYSTEM = {{ name }}\nENCUT = {{ settings.encut }}\nMAGMOM = {{settings.magmom.1}}\n"
        "FLAGS = {{ flags }}\nLITERAL = {{ not a placeholder }} {{ }} {{1abc}}\n"
    )
    values = {"name": "Si", "settings": {"encut": 520, "magmom": [1.0, 2.5]}, "flags": {"b": True, "a": None}}
    output = tmp_path / "out" / "INCAR"
    text = render_template(template, values, output)
    assert text == (
        'SYSTEM = Si\nENCUT = 520\nMAGMOM = 2.5\nFLAGS = {"a":null,"b":true}\n'
        "LITERAL = {{ not a placeholder }} {{ }} {{1abc}}\n"
    )
    assert output.read_text() == text
    assert [p.name for p in output.parent.iterdir()] == ["INCAR"]


def test_render_template_reads_values_from_a_json_file(tmp_path):
    (tmp_path / "t").write_text("{{ a.0.b }}")
    (tmp_path / "v.json").write_text(json.dumps({"a": [{"b": "x"}]}))
    assert render_template(tmp_path / "t", str(tmp_path / "v.json")) == "x"


def test_render_template_keeps_line_endings(tmp_path):
    (tmp_path / "t").write_bytes(b"a\r\n{{ x }}\r\n")
    render_template(tmp_path / "t", {"x": 1}, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"a\r\n1\r\n"


def test_render_template_missing_member_names_placeholder_and_line(tmp_path):
    template = tmp_path / "job.tmpl"
    template.write_text("first\nsecond {{ settings.kpoints }}\n")
    with pytest.raises(KeyError) as caught:
        render_template(template, {"settings": {"encut": 1}}, tmp_path / "out")
    message = str(caught.value)
    assert f"{template}:2" in message
    assert "{{ settings.kpoints }}" in message
    assert "'kpoints'" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("placeholder", "problem"),
    [("{{ a.5 }}", "index 5 out of range"), ("{{ a.x }}", "array, not indexable"), ("{{ s.x }}", "string")],
)
def test_render_template_bad_paths_are_key_errors(tmp_path, placeholder, problem):
    (tmp_path / "t").write_text(placeholder)
    with pytest.raises(KeyError, match=problem):
        render_template(tmp_path / "t", {"a": [1], "s": "text"})


def test_render_template_values_file_must_be_an_object(tmp_path):
    (tmp_path / "t").write_text("x")
    (tmp_path / "v.json").write_text("[1]")
    with pytest.raises(ValueError, match="expected an object"):
        render_template(tmp_path / "t", tmp_path / "v.json")


# -- compress_files / decompress_files -----------------------------------------------------

OPENERS = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}


@pytest.mark.parametrize("method", ["gz", "bz2", "xz"])
@pytest.mark.parametrize("remove", [False, True])
def test_compress_decompress_roundtrip(tmp_path, method, remove):
    sources = [tmp_path / "OUTCAR", tmp_path / "vasprun.xml"]
    contents = [b"energy line\n" * 5000, os.urandom(70_000)]
    for path, data in zip(sources, contents, strict=True):
        path.write_bytes(data)
    sources[0].chmod(0o640)

    outputs = compress_files(sources, method=method, remove=remove)
    assert outputs == [tmp_path / f"OUTCAR.{method}", tmp_path / f"vasprun.xml.{method}"]
    for output, data in zip(outputs, contents, strict=True):
        with OPENERS[method](output, "rb") as handle:
            assert handle.read() == data
    assert all(path.exists() != remove for path in sources)
    assert outputs[0].stat().st_mode & 0o777 == 0o640
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]

    if not remove:
        for path in sources:
            path.unlink()
    restored = decompress_files(outputs, remove=remove)
    assert restored == sources
    assert [path.read_bytes() for path in restored] == contents
    assert all(path.exists() != remove for path in outputs)


def test_gzip_output_is_deterministic(tmp_path):
    (tmp_path / "a").write_bytes(b"same")
    first = compress_files([tmp_path / "a"])[0].read_bytes()
    (tmp_path / "a.gz").unlink()
    os.utime(tmp_path / "a", (1, 1))
    assert compress_files([tmp_path / "a"])[0].read_bytes() == first


def test_compress_refuses_to_overwrite_and_changes_nothing(tmp_path):
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    (tmp_path / "b.xz").write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="b.xz"):
        compress_files([tmp_path / "a", tmp_path / "b"], method="xz", remove=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "b.xz"]
    assert (tmp_path / "b.xz").read_bytes() == b"precious"


def test_decompress_refuses_to_overwrite(tmp_path):
    (tmp_path / "a").write_bytes(b"new")
    compress_files([tmp_path / "a"], method="bz2")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        decompress_files([tmp_path / "a.bz2"], remove=True)
    assert (tmp_path / "a").read_bytes() == b"new"
    assert (tmp_path / "a.bz2").exists()


def test_refusals(tmp_path):
    (tmp_path / "a.zip").write_bytes(b"x")
    with pytest.raises(ValueError, match="unknown compression suffix"):
        decompress_files([tmp_path / "a.zip"])
    with pytest.raises(ValueError, match="unknown compression method"):
        compress_files([tmp_path / "a.zip"], method="zip")
    with pytest.raises(FileNotFoundError):
        compress_files([tmp_path / "missing"])
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="not valid gz data"):
        decompress_files([tmp_path / "bad.gz"], remove=True)
    assert (tmp_path / "bad.gz").exists()
    assert not (tmp_path / "bad").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
