"""``make demo``'s script (examples/defects/demo.sh) as a new user meets it: in private homes, real processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runner_support import BIN, HTTK

DEMO = Path(__file__).resolve().parents[2] / "examples" / "defects" / "demo.sh"


def run_demo(tmp: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(tmp), "XDG_DATA_HOME": str(tmp / "data"), "XDG_CONFIG_HOME": str(tmp / "config"),
           "LC_ALL": "C.UTF-8"}
    return subprocess.run(["bash", str(DEMO)], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_demo_ends_by_telling_what_to_try_next(tmp_path):
    done = run_demo(tmp_path, f"{BIN}{os.pathsep}/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    tail = done.stdout[done.stdout.index("== what to try next"):]
    # httk is not on a new user's PATH after 'make demo': the way to reach it comes first.
    assert ".venv/bin/httk" in tail and "source .venv/bin/activate" in tail
    assert "pip install -e '.[report]'" in tail and "httk workflow workspace report" in tail


def test_a_failing_job_new_stops_the_demo_and_shows_its_error(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "httk").write_text(
        "#!/bin/sh\n"
        'if [ "$2" = job ] && [ "$3" = new ]; then echo "error: --workflow vasp-relax: broken here" >&2; exit 2; fi\n'
        f'exec {HTTK} "$@"\n')
    (shim / "httk").chmod(0o755)
    done = run_demo(tmp_path, f"{shim}{os.pathsep}{BIN}{os.pathsep}/usr/bin:/bin")
    assert done.returncode == 2
    assert "error: --workflow vasp-relax: broken here" in done.stderr
    assert "== submitted vasp-relax job" not in done.stdout
