"""``httk workflow workspace``: init/adopt, status, policy and settings, and the default workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from httk.workflow.cli.defaults import default_workspace_path


def format_document(path: str) -> dict:
    return json.loads((Path(path) / ".httk-workflow" / "format.json").read_text())


def test_init_creates_a_workspace(cli, tmp_path):
    target = tmp_path / "runs" / "alpha"
    result = cli("workspace", "init", str(target), "--name", "alpha")
    assert "initialized workspace 'alpha'" in result.stdout
    document = format_document(str(target))
    assert document["name"] == "alpha" and document["durable"] is True
    assert (target / ".httk-workflow" / "state" / "ready").is_dir()


def test_init_adopts_an_existing_workspace_unchanged(cli, workspace):
    before = format_document(workspace)
    report = cli.json("workspace", "init", workspace)
    assert report["workspace_id"] == before["workspace_id"]
    result = cli("workspace", "init", workspace, "--name", "other")
    assert "adopted" in result.stdout
    assert "keeps its name 'ws'" in result.stderr
    assert format_document(workspace) == before


def test_init_no_durable_and_durable_flags(cli, tmp_path):
    assert cli.json("workspace", "init", str(tmp_path / "fast"), "--no-durable")["durable"] is False
    assert cli.json("workspace", "init", str(tmp_path / "safe"), "--durable")["durable"] is True


def test_init_refuses_a_file(cli, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    result = cli("workspace", "init", str(target), code=2)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "not a directory" in result.stderr


@pytest.mark.parametrize("args", [("Runs",), ("ok", "--name", "Bad Name")])
def test_init_refuses_an_invalid_name_before_writing_anything(cli, tmp_path, args):
    # The directory's basename is the default name: 'Runs' is not a valid tag.
    result = cli("workspace", "init", str(tmp_path / args[0]), *args[1:], code=2)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "invalid workspace name" in result.stderr
    if len(args) == 1:
        assert "--name NAME" in result.stderr and "--name runs" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_status_on_a_non_workspace_is_one_error_line(cli, tmp_path):
    result = cli("workspace", "status", str(tmp_path), code=2)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "workspace init" in result.stderr


def test_status_text_and_json(cli, workspace, payload):
    cli("job", "submit", workspace, str(payload), "--placement", "a/b")
    report = cli.json("workspace", "status", workspace)
    assert report["counts"]["submitted"] == 1 and report["total"] == 1
    assert report["path"] == workspace and report["durable"] is True
    assert report["policy"]["lease_seconds"] == 900.0
    text = cli("workspace", "status", workspace).stdout
    assert "submitted" in text and workspace in text


def test_policy_show_and_set(cli, workspace):
    assert cli.json("workspace", "policy", "show", workspace)["visibility_deadline_seconds"] == 5.0
    cli("workspace", "policy", "set", workspace, "visibility_deadline_seconds", "60")
    cli("workspace", "policy", "set", workspace, "retention.journal_days", "90")
    policy = cli.json("workspace", "policy", "show", workspace)
    assert policy["visibility_deadline_seconds"] == 60
    assert policy["retention"] == {"journal_days": 90}
    assert format_document(workspace)["policy"] == policy
    text = cli("workspace", "policy", "show", workspace).stdout
    assert "retention.journal_days" in text
    cli("workspace", "policy", "set", workspace, "retention.journal_days", "null")
    assert cli.json("workspace", "policy", "show", workspace)["retention"] == {}


def test_policy_refusals_name_the_key_and_write_nothing(cli, workspace):
    before = format_document(workspace)
    unknown = cli("workspace", "policy", "set", workspace, "lease", "10", code=2)
    assert "'lease'" in unknown.stderr and "lease_seconds" in unknown.stderr
    wrong_type = cli("workspace", "policy", "set", workspace, "lease_seconds", '"soon"', code=2)
    assert "lease_seconds" in wrong_type.stderr and "positive number" in wrong_type.stderr
    retention = cli("workspace", "policy", "set", workspace, "retention.forever_days", "1", code=2)
    assert "retention.forever_days" in retention.stderr
    bare = cli("workspace", "policy", "set", workspace, "lease_seconds", "soon", code=2)
    assert "not JSON" in bare.stderr and "quote it as JSON" in bare.stderr
    for result in (unknown, wrong_type, retention, bare):
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert format_document(workspace) == before


def test_settings_set_show_unset(cli, workspace):
    assert cli.json("workspace", "settings", "show", workspace) == {}
    cli("workspace", "settings", "set", workspace, "vasp.command", '"srun -n 32 vasp_std"')
    cli("workspace", "settings", "set", workspace, "vasp.plain", "srun -n 32 vasp_std")
    cli("workspace", "settings", "set", workspace, "manager.workers", "8")
    cli("workspace", "settings", "set", workspace, "vasp.potentials", '{"Si": "Si_GW"}')
    settings = cli.json("workspace", "settings", "show", workspace)
    assert settings == {
        "vasp.command": "srun -n 32 vasp_std",
        "vasp.plain": "srun -n 32 vasp_std",
        "manager.workers": 8,
        "vasp.potentials": {"Si": "Si_GW"},
    }
    assert 'vasp.command = "srun -n 32 vasp_std"' in cli("workspace", "settings", "show", workspace).stdout
    assert "unset" in cli("workspace", "settings", "unset", workspace, "vasp.plain").stdout
    assert "was not set" in cli("workspace", "settings", "unset", workspace, "vasp.plain").stdout
    assert "vasp.plain" not in cli.json("workspace", "settings", "show", workspace)


def test_settings_refuse_a_bad_name(cli, workspace):
    result = cli("workspace", "settings", "set", workspace, "Bad Name", "1", code=2)
    assert "invalid setting name 'Bad Name'" in result.stderr


def test_default_workspace_path_follows_xdg():
    assert default_workspace_path({"XDG_DATA_HOME": "/data"}) == "/data/httk-workflow/workspaces/default"
    home = default_workspace_path({"HOME": "/home/u"})
    assert home == "/home/u/.local/share/httk-workflow/workspaces/default"
    # A relative XDG_DATA_HOME is invalid by the XDG specification and ignored.
    assert default_workspace_path({"XDG_DATA_HOME": "rel", "HOME": "/home/u"}) == home


def test_omitted_workspace_uses_the_default_created_on_first_use(cli, tmp_path, payload):
    data_home = tmp_path / "elsewhere"
    env = {"XDG_DATA_HOME": str(data_home)}
    expected = data_home / "httk-workflow" / "workspaces" / "default"
    # Reading creates nothing (tests/cli/test_cli_default_workspace.py); the first submission does.
    cli("workspace", "status", "--json", env=env, code=2)
    assert not expected.exists()
    key = cli("job", "submit", str(payload), "--placement", "p", env=env).stdout.strip()
    report = json.loads(cli("workspace", "status", "--json", env=env).stdout)
    assert report["path"] == str(expected) and report["name"] == "default"
    assert (expected / ".httk-workflow" / "format.json").is_file()
    jobs = json.loads(cli("job", "list", "--json", env=env).stdout)
    assert [job["job_key"] for job in jobs] == [key]
    assert json.loads(cli("job", "show", key, "--json", env=env).stdout)["job_key"] == key


@pytest.mark.parametrize(
    "args",
    [
        ("workspace", "gc", "{ws}", "--json"),
        ("workspace", "gc", "{ws}", "--dry-run", "--json"),
        ("workspace", "fsck", "{ws}", "--json"),
        ("workspace", "status", "{ws}", "--json"),
        ("workspace", "settings", "show", "{ws}", "--json"),
        ("job", "list", "{ws}", "--json"),
    ],
)
def test_json_output_is_one_value(cli, workspace, args):
    json.loads(cli(*(arg.format(ws=workspace) for arg in args)).stdout)


def test_status_at_before_the_workspace_existed_says_so(cli, workspace):
    """All zeros at an instant before creation is no finding about the jobs: the line says why."""
    text = cli("workspace", "status", workspace, "--at", "@1000000000").stdout
    assert "before this workspace was created (" in text.splitlines()[0]
    assert cli.json("workspace", "status", workspace, "--at", "@1000000000")["before_creation"] is True
    later = cli.json("workspace", "status", workspace, "--at", "@4000000000")
    assert later["before_creation"] is False
    assert "before this workspace" not in cli("workspace", "status", workspace, "--at", "@4000000000").stdout


def test_gc_without_limits_reports_the_placement_mirrors_it_prunes(cli, workspace):
    """No limits set still prunes empty placement mirrors, and says so in the dry run and the run."""
    mirror = Path(workspace) / ".httk-workflow" / "state" / "submitted" / "p" / "q"
    mirror.mkdir(parents=True)
    dry = cli("workspace", "gc", workspace, "--dry-run").stdout
    assert f"would prune placement_mirror: {mirror}\n" in dry and mirror.is_dir()
    assert "nothing is collected" not in dry and "only empty placement mirrors are collected" in dry
    assert dry.splitlines()[-1].endswith("would remove 0 item(s); would prune 2 empty placement mirror(s)")
    done = cli("workspace", "gc", workspace).stdout
    assert f"pruned placement_mirror: {mirror.parent}\n" in done and not mirror.parent.exists()
    assert done.splitlines()[-1].endswith("removed 0 item(s); pruned 2 empty placement mirror(s)")
    assert cli.json("workspace", "gc", workspace)["pruned"] == []
