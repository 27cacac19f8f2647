"""A path whose names are not UTF-8: refused where a document would record it, printed as escapes elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_support import Cli
from disk_support import disk_snapshot
from httk.workflow.cli.entry import _escape

#: The byte 0xff in a file name, as the OS hands it to Python (a lone surrogate).
UNDECODABLE = os.fsdecode(b"ws\xff")


def test_a_workspace_path_that_is_not_utf8_is_refused_at_init_and_nothing_is_written(tmp_path):
    cli = Cli(tmp_path)
    before = disk_snapshot(tmp_path)
    assert cli.refused("workspace", "init", str(tmp_path / UNDECODABLE), "--name", "ws") == (
        f"error: {tmp_path}/ws\\xff: the path is not UTF-8, which no workspace document can record; choose a path "
        "whose names are UTF-8")
    assert disk_snapshot(tmp_path) == before


def test_the_console_script_prints_an_undecodable_name_as_escapes_on_a_strict_utf8_stream(tmp_path):
    """A workspace moved to such a path still answers: the byte prints as ``\\xff``, never a traceback."""
    Cli(tmp_path)("workspace", "init", str(tmp_path / "good"), "--name", "good")
    os.rename(tmp_path / "good", os.fsencode(tmp_path) + b"/ws\xff")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}
    script = Path(sys.executable).parent / "httk"
    done = subprocess.run([str(script), "workflow", "workspace", "status", os.fsencode(tmp_path) + b"/ws\xff"],
                          env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(b"workspace good at " + os.fsencode(tmp_path) + b"/ws\\xff (")
    # --json: valid JSON whose path gives the original bytes back.
    done = subprocess.run([str(script), "workflow", "workspace", "status", os.fsencode(tmp_path) + b"/ws\xff",
                           "--json"], env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert os.fsencode(json.loads(done.stdout)["path"]) == os.fsencode(tmp_path) + b"/ws\xff"
    # An error line on stderr escapes the byte the same way.
    done = subprocess.run([str(script), "workflow", "job", "show", os.fsencode(tmp_path) + b"/ws\xff", "nosuch"],
                          env=env, capture_output=True, check=False)
    assert done.returncode == 2 and b"/ws\\xff" in done.stderr and b"Traceback" not in done.stderr, done.stderr


def test_the_escapes_name_each_undecodable_byte_and_any_other_unencodable_character():
    error = UnicodeEncodeError("ascii", "a\udcffb\u00e9", 1, 4, "unencodable")
    assert _escape(error) == ("\\xffb\\xe9", 4)
