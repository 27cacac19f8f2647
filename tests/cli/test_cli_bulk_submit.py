"""``job submit WORKSPACE PAYLOAD... / --from-file LIST``: a batch on the command line.

Each job is printed as ``job submit`` prints one (a key per line, or one JSON object per
line); a refusal is one ``error:`` line with exit 2 and the workspace tree unchanged.
"""

from __future__ import annotations

import errno
import io
import json
import sys
from pathlib import Path

import pytest
from dependency_injector import providers

from disk_support import names_below as tree
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.cli import bulk_submit
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import httk


@pytest.fixture
def payloads(tmp_path, make_payload):
    return [make_payload(tmp_path / "src" / f"p{index}", tag="bulk", name=f"job{index}") for index in range(4)]


def listed(cli, workspace):
    return cli.json("job", "list", workspace, "--kind", "submitted")


def test_many_positionals_after_the_workspace_submit_one_job_each(cli, workspace, payloads):
    result = cli("job", "submit", workspace, *map(str, payloads), "--placement", "camp/a")
    keys = result.stdout.split()
    assert len(keys) == 4 and all(key.startswith("bulk--") for key in keys)
    assert result.stderr == ""  # no progress bar: stderr is not a terminal
    assert sorted(job["job_key"] for job in listed(cli, workspace)) == sorted(keys)
    for key, payload in zip(keys, payloads, strict=True):
        job_json = Path(workspace) / "camp/a" / key / "job.json"
        assert job_json.read_bytes() == (payload / "job.json").read_bytes()


def test_from_file_and_stdin_list_one_payload_per_line(cli, workspace, payloads, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    listing = tmp_path / "list.txt"
    listing.write_text(f"src/p0\n\n  {payloads[1]}  \n")
    result = cli("job", "submit", workspace, str(payloads[2]), "--from-file", str(listing), "--placement", "a")
    assert len(result.stdout.split()) == 3
    result = cli.runner.invoke(
        httk, ["workflow", "job", "submit", workspace, "--from-file", "-", "--placement", "b", "--json"],
        input="src/p3\n", obj=AppContext(cli.container), env=cli.env)
    assert result.exit_code == 0, result.stderr
    [line] = result.stdout.splitlines()
    record = json.loads(line)
    assert record["placement"] == "b" and record["payload"] == f"{workspace}/b/{record['job_key']}"
    assert len(listed(cli, workspace)) == 4


def test_json_prints_one_object_per_job_as_one_submit_does(cli, workspace, payloads):
    single = cli.json("job", "submit", workspace, str(payloads[0]), "--placement", "one")
    lines = cli("job", "submit", workspace, *map(str, payloads[1:]), "--placement", "many", "--json").stdout
    records = [json.loads(line) for line in lines.splitlines()]
    assert len(records) == 3
    assert all(sorted(record) == sorted(single) for record in records)
    assert [record["priority"] for record in records] == [0, 0, 0]


def test_one_bad_payload_refuses_the_batch_and_writes_nothing(cli, workspace, payloads):
    (payloads[2] / "job.json").write_text('{"format": "httk-workflow-job"}')
    before = tree(workspace)
    error = cli.refused("job", "submit", workspace, *map(str, payloads), "--placement", "camp/a")
    assert f"{payloads[2]}/job.json" in error and "payload 3 of 4; none of the 4 was submitted" in error
    assert tree(workspace) == before


def test_a_list_naming_nothing_and_an_unreadable_list_are_refused(cli, workspace, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    assert "names no payload; list one payload directory per line" in cli.refused(
        "job", "submit", workspace, "--from-file", str(empty), "--placement", "a")
    assert "--from-file" in cli.refused(
        "job", "submit", workspace, "--from-file", str(tmp_path / "missing.txt"), "--placement", "a")


def test_a_batch_for_a_remote_workspace_is_refused_naming_what_to_do(cli, payloads):
    error = cli.refused("job", "submit", "kappa:runs", *map(str, payloads[:2]), "--placement", "a")
    assert error.startswith("error: kappa:runs: a batch goes to a local workspace only")


def test_help_shows_a_batch_example(cli):
    text = cli("job", "submit", "--help").stdout
    assert "[WORKSPACE] PAYLOAD..." in text and "--from-file LIST" in text
    assert "job submit WS ./p1 ./p2 ./p3 --placement" in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_is_drawn_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with bulk_submit.progress_bar(3) as progress:
        assert progress is None
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with bulk_submit.progress_bar(3) as progress:
        for phase in ("checking", "reserving", "copying", "publishing"):
            progress(phase, 3)
    drawn = terminal.getvalue()
    assert "publishing" in drawn and "12/12" in drawn


class MarkersRunOut(PosixFilesystem):
    """A disk that fills up after ``room`` more markers."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def create_empty(self, path: str, *, durable: bool) -> None:
        if "/state/submitted/" in path:
            self.room -= 1
            if self.room < 0:
                raise OSError(errno.ENOSPC, "No space left on device", path)
        super().create_empty(path, durable=durable)


def test_a_batch_that_fails_part_way_prints_its_jobs_and_exits_1_not_2(cli, workspace, payloads):
    """Exit 2 says nothing was written; here the first jobs exist, so the batch exits 1."""
    cli.container.fs.override(providers.Object(MarkersRunOut(room=2)))
    cli.container.ports.reset()
    cli.container.workspaces.reset()
    result = cli("job", "submit", workspace, *map(str, payloads), "--placement", "camp/a", code=1)
    keys = result.stdout.split()
    assert len(keys) == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot submit {payloads[2]} at placement 'camp/a': No space left on device")
    assert line.endswith("the first 2 of 4 jobs were submitted, the other 2 were not (submit those payloads again)")
    cli.container.fs.reset_override()
    cli.container.ports.reset()
    cli.container.workspaces.reset()
    assert sorted(job["job_key"] for job in listed(cli, workspace)) == sorted(keys)
    assert sorted(path.name for path in (Path(workspace) / "camp/a").iterdir()) == sorted(keys)
    assert "1  a batch failed part way" in cli("job", "submit", "--help").stdout
