"""``httk workflow job``: submit (copy, move, refusals), list, show, log and job selectors."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest


def tree(path: str) -> list[str]:
    """Every path below ``path``, relative, sorted (to prove a refusal wrote nothing)."""
    out = []
    for current, dirs, files in os.walk(path):
        for name in dirs + files:
            out.append(os.path.relpath(os.path.join(current, name), path))
    return sorted(out)


def test_submit_copies_by_default(cli, workspace, payload):
    key = cli("job", "submit", workspace, str(payload), "--placement", "project-a/00/17").stdout.strip()
    copied = Path(workspace) / "project-a" / "00" / "17" / key
    assert (copied / "job.json").read_bytes() == (payload / "job.json").read_bytes()
    assert (payload / "job.json").is_file()
    markers = list((Path(workspace) / ".httk-workflow" / "state" / "submitted" / "project-a/00/17").iterdir())
    assert [marker.name.split(".")[0] for marker in markers] == [key]


def test_submit_move_consumes_the_source(cli, workspace, payload):
    report = cli.json("job", "submit", workspace, str(payload), "--placement", "p", "--move", "--tag", "si")
    assert report["job_key"] == f"si--{report['job_id']}" and report["kind"] == "submitted"
    assert not payload.exists()
    assert (Path(report["payload"]) / "run.py").is_file()


@pytest.mark.parametrize("placement", ["../x", "/abs", ".httk-workflow/x", "a/../../b"])
def test_submit_refuses_bad_placements_and_writes_nothing(cli, workspace, payload, placement):
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", placement, code=2)
    assert result.stderr.startswith("error: invalid placement") and result.stderr.count("\n") == 1
    assert tree(workspace) == before
    assert (payload / "job.json").is_file()


def test_submit_refuses_a_payload_without_job_json(cli, workspace, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(empty), "--placement", "p", code=2)
    assert "job.json: missing" in result.stderr
    assert tree(workspace) == before


def test_submit_names_the_malformed_member(cli, workspace, payload):
    document = json.loads((payload / "job.json").read_text())
    document["retry_policy"]["maximum_total_attempts"] = "three"
    (payload / "job.json").write_text(json.dumps(document))
    before = tree(workspace)
    result = cli("job", "submit", workspace, str(payload), "--placement", "p", code=2)
    assert "$.retry_policy.maximum_total_attempts" in result.stderr
    assert tree(workspace) == before


def test_submit_needs_a_payload_and_takes_more_as_a_batch(cli, workspace, payload):
    result = cli("job", "submit", "--placement", "p", code=2)
    assert "expected [WORKSPACE] PAYLOAD" in result.output
    # Three positionals are WORKSPACE PAYLOAD PAYLOAD (a batch): the one that is no payload refuses it.
    result = cli("job", "submit", workspace, str(payload), "extra", "--placement", "p", code=2)
    assert "extra: not a payload directory" in result.output and "none of the 2 was submitted" in result.output


@pytest.fixture
def jobs(cli, workspace, tmp_path, make_payload):
    """Three jobs: si-a and si-b at project-a/00, ge at project-ab."""
    keys = {}
    for tag, placement in (("si-a", "project-a/00"), ("si-b", "project-a/00"), ("ge", "project-ab")):
        source = make_payload(tmp_path / f"payload-{tag}")
        keys[tag] = cli("job", "submit", workspace, str(source), "--placement", placement, "--tag", tag).stdout.strip()
    return keys


def test_list_filters_by_kind_and_placement_prefix(cli, workspace, jobs):
    listed = cli.json("job", "list", workspace)
    assert sorted(job["job_key"] for job in listed) == sorted(jobs.values())
    assert {job["kind"] for job in listed} == {"submitted"}
    in_a = cli.json("job", "list", workspace, "--placement", "project-a")
    assert sorted(job["job_key"] for job in in_a) == sorted([jobs["si-a"], jobs["si-b"]])
    assert cli.json("job", "list", workspace, "--kind", "ready", "--kind", "failed") == []
    assert len(cli.json("job", "list", workspace, "--kind", "submitted")) == 3
    text = cli("job", "list", workspace).stdout
    assert jobs["ge"] in text and "project-ab" in text
    assert "invalid placement" in cli("job", "list", workspace, "--placement", "../x", code=2).stderr


def test_collect_accepts_json_as_the_explicit_spelling_of_its_output(cli, workspace, jobs):
    plain = cli("collect", workspace, "--kind", "submitted").stdout
    assert cli("collect", workspace, "--kind", "submitted", "--json").stdout == plain
    assert len([json.loads(line) for line in plain.splitlines()]) == 3


def test_show_by_uuid_key_and_prefixes(cli, workspace, jobs):
    key = jobs["si-a"]
    job_id = key.split("--", 1)[1]
    for selector in (job_id, key, job_id[:8], "si-a"):
        assert cli.json("job", "show", workspace, selector)["job_key"] == key


def test_ambiguous_prefix_is_refused_listing_the_matches(cli, workspace, jobs):
    result = cli("job", "show", workspace, "si-", code=2)
    assert "ambiguous" in result.stderr and result.stderr.count("\n") == 1
    assert jobs["si-a"] in result.stderr and jobs["si-b"] in result.stderr
    assert jobs["ge"] not in result.stderr


def test_unknown_selector_names_it(cli, workspace, jobs):
    result = cli("job", "log", workspace, "nothing-like-this", code=2)
    assert "no job matches selector 'nothing-like-this'" in result.stderr


def test_show_reports_the_job(cli, workspace, jobs, tmp_path):
    report = cli.json("job", "show", workspace, jobs["ge"])
    payload_dir = Path(workspace) / "project-ab" / jobs["ge"]
    assert report["kind"] == "submitted" and report["generation"] == 0 and report["placement"] == "project-ab"
    assert report["runner"] == {"source": "payload", "path": "run.py", "sha256": None}
    assert report["step"] == "main" and report["initial_step"] == "main"
    assert report["damage"] is None and report["failure"] is None
    budgets = report["budgets"]
    assert budgets["maximum_attempts_per_activation"] == {"limit": 3, "used": 0, "remaining": 3, "exhausted": False}
    assert budgets["maximum_activations"]["used"] == 0
    assert report["paths"]["payload"] == str(payload_dir)
    assert report["paths"]["workdir"] == f"{workspace}/.httk-workflow/workdirs/{report['job_id']}"
    assert report["paths"]["data"] is None
    assert report["job_digest"] == hashlib.sha256((payload_dir / "job.json").read_bytes()).hexdigest()
    text = cli("job", "show", workspace, jobs["ge"]).stdout
    assert "maximum_attempts_per_activation: 0 of 3" in text and str(payload_dir) in text


def test_show_paths_of_an_isolated_transactional_job(cli, workspace, tmp_path, make_payload):
    source = make_payload(tmp_path / "iso", workdir_mode="isolated", data_mode="transactional")
    key = cli("job", "submit", workspace, str(source), "--placement", "p").stdout.strip()
    report = cli.json("job", "show", workspace, key)
    assert report["paths"]["workdir"] is None  # no attempt yet
    assert report["paths"]["data"] == f"{workspace}/.httk-workflow/data/{report['job_id']}/current"


def test_log_of_a_fresh_job_is_its_submission(cli, workspace, jobs):
    entries = cli.json("job", "log", workspace, jobs["si-a"])
    # When it was submitted: its id reservation's time (generation 0 has no frame).
    submitted_at = entries[0]["created_at"]
    assert isinstance(submitted_at, float) and abs(submitted_at - time.time()) < 600
    assert entries == [
        {
            "created_at": submitted_at,
            "event": "submit",
            "generation": 0,
            "job_id": jobs["si-a"].split("--", 1)[1],
            "job_key": jobs["si-a"],
            "kind": "submitted",
            "record_ref": "init",
            "step": "main",
        }
    ]
    text = cli("job", "log", workspace, jobs["si-a"]).stdout
    assert "submit -> submitted" in text and not text.startswith("-")


@pytest.mark.parametrize("selector", ["nonexistent", "../x", "/etc", ""])
def test_unknown_job_selector_is_exit_2(cli, workspace, selector):
    cli.refused("job", "show", workspace, selector)
