"""``httk workflow runner publish``: content-addressed publication and --replace."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def names_index(workspace: str, name: str) -> Path:
    return Path(workspace) / ".httk-workflow" / "runners" / "names" / f"{name}.json"


def test_publish_prints_the_reference(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    result = cli("runner", "publish", str(runner), "--workspace", workspace, "--name", "relax.py")
    reference = json.loads(result.stdout)
    digest = hashlib.sha256(runner.read_bytes()).hexdigest()
    assert reference == {"path": "relax.py", "sha256": digest, "source": "workspace"}
    stored = Path(workspace) / ".httk-workflow" / "runners" / "objects" / digest / "relax.py"
    assert stored.read_bytes() == runner.read_bytes()


def test_identical_publication_is_a_no_op(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    first = cli.json("runner", "publish", str(runner), "--workspace", workspace)
    index = names_index(workspace, "relax.py")
    stamp = index.stat().st_mtime_ns
    assert cli.json("runner", "publish", str(runner), "--workspace", workspace) == first
    assert index.stat().st_mtime_ns == stamp


def test_different_content_needs_replace(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('one')\n")
    first = cli.json("runner", "publish", str(runner), "--workspace", workspace)
    runner.write_text("print('two')\n")
    refused = cli("runner", "publish", str(runner), "--workspace", workspace, code=2)
    assert "already holds different content" in refused.stderr and "--replace" in refused.stderr
    assert json.loads(names_index(workspace, "relax.py").read_text())["sha256"] == first["sha256"]
    replaced = cli.json("runner", "publish", str(runner), "--workspace", workspace, "--replace")
    assert replaced["sha256"] != first["sha256"]
    assert json.loads(names_index(workspace, "relax.py").read_text())["sha256"] == replaced["sha256"]


def test_publish_a_runner_directory(cli, workspace, tmp_path):
    tree = tmp_path / "relax-runner"
    tree.mkdir()
    (tree / "run.py").write_text("print('x')\n")
    reference = cli.json("runner", "publish", str(tree), "--workspace", workspace, "--name", "relax-runner")
    assert reference["path"] == "relax-runner" and len(reference["sha256"]) == 64


def test_publish_refuses_a_missing_source(cli, workspace, tmp_path):
    result = cli("runner", "publish", str(tmp_path / "nope.py"), "--workspace", workspace, code=2)
    assert result.stderr.startswith("error: ") and "nope.py" in result.stderr


def test_publish_refuses_control_characters_in_the_name_and_writes_nothing(cli, workspace, tmp_path):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    store = Path(workspace) / ".httk-workflow" / "runners"
    before = sorted(store.rglob("*")) if store.exists() else []
    for name in ("relax\n.py", "a/b\x1bc", "tab\there"):
        result = cli("runner", "publish", str(runner), "--workspace", workspace, "--name", name, code=2)
        assert result.stderr.startswith("error: ") and "control character" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (sorted(store.rglob("*")) if store.exists() else []) == before
