"""Refusals of settings, policy, format.json and job.json: one line, exit 2, and nothing written.

``slurm.*`` and ``manager.workers`` are judged when ``workspace settings set`` writes
them, by the rule the batch script applies at run time; policy values Python's JSON
parser accepts but JSON cannot carry (NaN, Infinity, 1e999) are refused; format.json's
``durable`` must be a boolean; job.json's priority must fit a marker name and its
``claim``/``workdir``/``data`` objects have no unknown members. Spec: 000 "Application
settings", "Workspace policy", "Submit a job".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from httk.workflow import codec
from httk.workflow.adapters.batch import slurm
from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.bootstrap import default_container
from httk.workflow.ports import BatchSystemError
from httk.workflow.protocol import JobSpec
from httk.workflow.store.policy import PolicyError
from httk.workflow.workspace import Workspace


def tree(path: str | Path) -> dict[str, bytes | None]:
    """Every name below ``path`` with its bytes (``None`` for a directory): the disk, to compare."""
    root = Path(path)
    return {str(item.relative_to(root)): None if item.is_dir() else item.read_bytes() for item in root.rglob("*")}


def refused(cli, workspace: str | Path, *args: str) -> str:
    """Run a command that must be refused: exit 2, one ``error:`` line, and ``workspace`` unchanged on disk."""
    before = tree(workspace)
    result = cli(*args, code=2)
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert tree(workspace) == before
    return result.stderr


# -- slurm.* and manager.workers at settings set ---------------------------------------------------
def test_good_slurm_and_worker_settings_are_stored(cli, workspace):
    for name, value in [
        ("slurm.account", "proj-1"), ("slurm.partition", "batch,debug"), ("slurm.time_limit", '"1-00:00:00"'),
        ("slurm.time_limit", "90"), ("slurm.nodes", '"1-4"'), ("slurm.cpus_per_task", "8"),
        ("slurm.reservation", "null"), ("manager.workers", "4"),
    ]:  # fmt: skip
        cli("workspace", "settings", "set", workspace, name, value)
    assert cli.json("workspace", "settings", "show", workspace) == {
        "slurm.account": "proj-1", "slurm.partition": "batch,debug", "slurm.time_limit": 90, "slurm.nodes": "1-4",
        "slurm.cpus_per_task": 8, "slurm.reservation": None, "manager.workers": 4,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("slurm.cpus_per_task", "0", "setting slurm.cpus_per_task must be a positive integer, not 0"),
        ("slurm.cpus_per_task", '"8"', "setting slurm.cpus_per_task must be a positive integer, not '8'"),
        ("slurm.partition", "two words", "setting slurm.partition must be a Slurm name"),
        ("slurm.account", "7", "setting slurm.account must be a Slurm name"),
        ("slurm.time_limit", "tomorrow", "setting slurm.time_limit must be minutes or [D-]HH:MM:SS"),
        ("slurm.nodes", "true", "setting slurm.nodes must be a positive integer or a range"),
        ("slurm.reservation", '"r\\nx"', "setting slurm.reservation must be a Slurm name"),
        ("manager.workers", "0", "setting manager.workers must be a positive integer, not 0"),
        ("manager.workers", '"4"', "setting manager.workers must be a positive integer, not '4'"),
        ("manager.workers", "true", "setting manager.workers must be a positive integer, not True"),
        ("manager.workers", "2.5", "setting manager.workers must be a positive integer, not 2.5"),
    ],
)
def test_a_bad_batch_or_worker_setting_is_refused_when_set(cli, workspace, name, value, message):
    cli("workspace", "settings", "set", workspace, "vasp.command", "vasp_std")
    stderr = refused(cli, workspace, "workspace", "settings", "set", workspace, name, value)
    assert stderr.startswith(f"error: {message}")


def test_an_unknown_slurm_setting_is_refused_with_the_known_ones(cli, workspace):
    stderr = refused(cli, workspace, "workspace", "settings", "set", workspace, "slurm.partiton", "batch")
    assert stderr == (
        "error: unknown Slurm setting 'slurm.partiton'; the slurm.* settings are the batch directives "
        "slurm.account, slurm.cpus_per_task, slurm.nodes, slurm.partition, slurm.qos, slurm.reservation, "
        "slurm.time_limit\n"
    )


def test_the_library_facade_applies_the_same_rule(workspace):
    handle = Workspace(workspace, ports=default_container().ports())
    before = tree(workspace)
    with pytest.raises(PolicyError, match="setting slurm.nodes must be a positive integer or a range"):
        handle.set_setting("slurm.nodes", 0)
    with pytest.raises(PolicyError, match="setting manager.workers must be a positive integer"):
        handle.set_setting("manager.workers", -1)
    assert tree(workspace) == before


def test_the_run_time_check_is_the_same_validator():
    # A settings.json written by hand still meets the directive rule when the script is composed.
    for name, value in [("slurm.cpus_per_task", 0), ("slurm.time_limit", "tomorrow")]:
        with pytest.raises(BatchSystemError) as at_set:
            slurm.SlurmBatchSystem.check_setting(name, value)
        with pytest.raises(BatchSystemError) as at_run:
            slurm.SlurmBatchSystem(LocalTransport()).compose_script("/ws", {name: value}, [], ["httk"])
        assert str(at_set.value) == str(at_run.value)


# -- policy values JSON cannot carry ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lease_seconds", "NaN", "policy lease_seconds: NaN is not a finite JSON number; give a positive number"),
        ("lease_seconds", "Infinity", "policy lease_seconds: Infinity is not a finite JSON number"),
        ("visibility_deadline_seconds", "1e999", "policy visibility_deadline_seconds: Infinity is not a finite"),
        ("visibility_deadline_seconds", "-Infinity", "policy visibility_deadline_seconds: -Infinity is not"),
        ("lease_seconds", "1" + "0" * 400, "policy lease_seconds: an integer of 401 digits is too large"),
        ("lease_seconds", "1" + "0" * 5000, "policy lease_seconds: Exceeds the limit (4300 digits)"),
        ("retention.trash_days", "NaN", "policy retention.trash_days: NaN is not a finite JSON number"),
        ("retention.journal_days", "1e999", "policy retention.journal_days: Infinity is not a finite JSON number"),
    ],
)
def test_policy_values_json_cannot_carry_are_refused(cli, workspace, key, value, message):
    # "--": a value such as -Infinity is not an option.
    assert refused(cli, workspace, "workspace", "policy", "set", "--", workspace, key, value).startswith(
        f"error: {message}"
    )


# -- format.json durable ----------------------------------------------------------------------------
@pytest.mark.parametrize("durable", ["false", 0, 1, None, "yes"])
def test_a_non_boolean_durable_is_refused_when_attaching(cli, workspace, payload, durable):
    format_file = Path(workspace, ".httk-workflow", "format.json")
    document = json.loads(format_file.read_text())
    document["durable"] = durable
    format_file.write_bytes(codec.encode(document))
    expected = f"error: {format_file} @ $.durable: expected true or false, got {codec.type_name(durable)} "
    assert refused(cli, workspace, "workspace", "status", workspace).startswith(expected)
    assert refused(cli, workspace, "job", "submit", workspace, str(payload), "--placement", "p").startswith(
        expected
    )


# -- job.json members and priority --------------------------------------------------------------------
def write_job(directory: Path, **changes: object) -> Path:
    """A payload whose job.json is the canonical document with ``changes`` merged into it (by hand)."""
    directory.mkdir(parents=True)
    document = JobSpec(name="demo", workflow="demo", runner_path="run.py").to_document()
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    (directory / "job.json").write_bytes(codec.encode(document))
    (directory / "run.py").write_text("print('hello')\n")
    return directory


@pytest.mark.parametrize(
    ("changes", "member", "problem"),
    [
        ({"priority": 10**250}, "$.priority", "invalid priority: outside the 64-bit range [-2**63, 2**63 - 1]"),
        ({"priority": -(2**63) - 1}, "$.priority", "invalid priority: outside the 64-bit range [-2**63, 2**63 - 1]"),
        ({"data": {"mdoe": "transactional"}}, "$.data.mdoe", "unknown member; known: mode"),
        ({"workdir": {"mode": "isolated", "keep": True}}, "$.workdir.keep", "unknown member; known: mode"),
        ({"claim": {"capabilites": ["gpu"]}}, "$.claim.capabilites", "unknown member; known: capabilities, pool"),
    ],
)
def test_a_bad_job_json_is_refused_at_submission_before_anything_is_written(
    cli, workspace, tmp_path, changes, member, problem
):
    payload = write_job(tmp_path / "payload", **changes)
    stderr = refused(cli, workspace, "job", "submit", workspace, str(payload), "--placement", "p")
    assert stderr == f"error: {payload / 'job.json'} @ {member}: {problem}\n"


def test_the_largest_priorities_are_accepted(cli, workspace, tmp_path):
    for priority in (2**63 - 1, -(2**63)):
        payload = write_job(tmp_path / f"payload{priority}", priority=priority)
        key = cli("job", "submit", workspace, str(payload), "--placement", "p").stdout.strip()
        assert cli.json("job", "show", workspace, key)["priority"] == priority


@pytest.mark.parametrize(("key", "value"), [("retention.attempt_control_days", '"abc"'), ("retention", "[1]")])
def test_bad_retention_policy_is_refused_and_gc_still_runs(cli, workspace, key, value):
    cli.refused("workspace", "policy", "set", workspace, key, value)
    assert cli.json("workspace", "gc", workspace)["retention"] == {}


@pytest.mark.parametrize("name", ["a b", "../x", "A.B", ""])
def test_odd_setting_names_are_refused(cli, workspace, name):
    cli.refused("workspace", "settings", "set", workspace, name, "1")
