"""A job a transfer took away is not "no such job": the refusal says where it went and how to reach it."""

from __future__ import annotations

from pathlib import Path


def test_a_transferred_job_is_named_with_where_it_went(cli, tmp_path: Path, payload):
    source, destination = str(tmp_path / "here"), str(tmp_path / "there")
    cli("workspace", "init", source)
    cli("workspace", "init", destination)
    key = cli.json("job", "submit", source, str(payload), "--placement", "p", "--tag", "si")["job_key"]
    cli("transfer", source, destination, "--job", key)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    for command in ("show", "why", "log"):
        line = cli.refused("job", command, source, key[:8])
        assert line.startswith(f"error: no job matches selector {key[:8]!r} in workspace {source}: transfer "), line
        assert (f"took job {key} to {destination}; see it there with 'httk workflow job show {destination} {key}', "
                f"or bring it back with 'httk workflow transfer {destination} {source} --job {key}'") in line, line
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before  # read only
    cli("job", "show", destination, key)  # the hint's command works
    # A selector no job ever had is refused as before, without a clause.
    assert cli.refused("job", "show", source, "ffff") == f"error: no job matches selector 'ffff' in workspace {source}"
    # Back home, the job is found again; sent away once more, the newest transfer names where it is.
    cli("transfer", destination, source, "--job", key)
    cli("job", "show", source, key)
    third = str(tmp_path / "third")
    cli("workspace", "init", third)
    cli("transfer", source, third, "--job", key)
    assert f"took job {key} to {third};" in cli.refused("job", "show", source, key)
