"""The ``local`` remote end to end: LocalTransport, the adapter check, and a manager started by LocalBatchSystem.

The "remote" httk is this venv's console script; it inherits the CliRunner's
environment, so it shares the test's private XDG homes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from dependency_injector import providers
from remote_support import local_remote, wait_until, write_payload

from httk.workflow.adapters.batch.local import LocalBatchSystem
from httk.workflow.adapters.plugins import BATCH_SYSTEMS, EntryPointCatalog
from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.ports import TransportError


def test_local_transport_runs_argv_with_input_and_copies_files(tmp_path):
    transport = LocalTransport()
    result = transport.run(["sh", "-c", 'printf "%s|" "$@"; cat; echo oops >&2; exit 3', "sh", "a b", "$HOME"],
                           input="stdin text")
    assert (result.returncode, result.stdout, result.stderr) == (3, "a b|$HOME|stdin text", "oops\n")
    assert transport.run(["cat"]).stdout == ""  # no input: an empty stdin, never ours
    missing = transport.run(["no-such-program-here"])
    assert missing.returncode == 127 and "command not found" in missing.stderr
    with pytest.raises(TransportError, match="did not finish within 0.2 s"):
        transport.run(["sleep", "5"], timeout=0.2)
    source = tmp_path / "a.txt"
    source.write_text("payload\n")
    transport.put(str(source), str(tmp_path / "b.txt"))
    transport.get(str(tmp_path / "b.txt"), str(tmp_path / "c.txt"))
    assert (tmp_path / "c.txt").read_text() == "payload\n"
    with pytest.raises(TransportError, match="cannot copy"):
        transport.put(str(tmp_path / "absent"), str(tmp_path / "d.txt"))


@pytest.fixture
def here(cli, tmp_path):
    """A ``local`` remote named ``here`` whose httk is this venv's."""
    return local_remote(cli, tmp_path)


def test_check_passes_on_this_machine(cli, here, tmp_path):
    report = cli.json("remote", "check", here)
    assert report["ok"] is True, report
    assert [c["name"] for c in report["checks"]] == ["configuration", "connect", "httk", "batch", "workspace_root"]
    assert report["report"]["httk"]["version"]
    assert report["report"]["workspace_root"] == {"path": str(tmp_path), "exists": True, "writable": True}
    text = cli("remote", "check", here).stdout
    assert re.search(r"^ok +httk +\S+/httk version \S+ \(this machine: ", text, re.MULTILINE)


def test_check_names_every_failed_check(cli, here, tmp_path):
    cli("remote", "configure", here, "--set", "httk_command=/nonexistent/httk",
        "--set", f"workspace_root={tmp_path / 'absent'}")
    result = cli("remote", "check", here, code=1)
    assert "FAILED   httk            '/nonexistent/httk' not found there" in result.stdout
    assert f"FAILED   workspace_root  {tmp_path / 'absent'} does not exist" in result.stdout
    assert result.stderr == "remote here: failed checks: httk, workspace_root\n"


@pytest.mark.parametrize("command", [("run", "here:nope"), ("manager", "status", "here:nope")])
def test_a_workspace_name_the_remote_lacks_names_the_remote_once(cli, here, tmp_path, command):
    """The remote's forwarded httk already says 'remote here:'; run and manager status must not say it twice."""
    before = sorted(tmp_path.rglob("*"))
    line = cli.refused(*command)
    assert line == ("error: remote here: nope: neither a directory nor a registered workspace name there; see "
                    "'httk workflow workspace list here:'")
    assert sorted(tmp_path.rglob("*")) == before


def test_init_status_settings_and_run_through_the_local_batch_system(cli, here, tmp_path):
    path = tmp_path / "runs"
    init = cli("workspace", "init", f"{here}:{path}", "--name", "runs")
    assert init.stdout == f"initialized workspace 'runs' at {path}\n"
    # The remote registered the name; "here:runs" is resolved there.
    assert cli.json("workspace", "status", f"{here}:runs")["path"] == str(path)
    assert cli("workspace", "settings", "set", f"{here}:runs", "manager.workers", "2").stdout == "manager.workers = 2\n"
    assert cli.json("workspace", "settings", "show", f"{here}:runs") == {"manager.workers": 2}
    refused = cli("workspace", "settings", "show", f"{here}:nope", code=2)
    # Named as the user typed it, with the remote's registry to look in (not this machine's).
    assert refused.stderr == (f"error: remote {here}: nope: neither a directory nor a registered workspace name "
                              f"there; see 'httk workflow workspace list {here}:'\n")

    key = cli("job", "submit", str(path), str(write_payload(tmp_path / "payload")), "--placement", "p").stdout.strip()
    submitted = cli("run", f"{here}:runs", "--idle-timeout", "60").stdout
    match = re.fullmatch(rf"submitted local job ([\d.]+) on here: a manager for {re.escape(str(path))}\n", submitted)
    assert match, submitted
    job_id = match[1]
    # What was submitted is kept beside its output, named by the batch job id; no temp file is left.
    script = Path(path, ".httk-workflow", "batch", f"local-{job_id}.sh").read_text()
    assert script.startswith("#!/bin/sh\n") and f"workflow run {path} --workers 2" in script
    assert not [name for name in Path(path, ".httk-workflow", "batch").iterdir() if name.name.startswith(".")]

    def finished():
        report = cli.json("manager", "status", f"{here}:runs", "--job", job_id)
        entry = report["jobs"][job_id]
        return entry if entry["finished"] else None

    assert wait_until(finished, 120, f"local manager {job_id} exiting")["state"] == "EXITED"
    assert cli.json("job", "show", str(path), key)["kind"] == "succeeded"
    log = Path(path, ".httk-workflow", "batch", f"local-{job_id.split('.')[0]}.out").read_text()
    assert "workers 2" in log and "1 succeeded" in log


SI_POSCAR = "Si2\n5.43\n0 .5 .5\n.5 0 .5\n.5 .5 0\nSi\n2\nDirect\n0 0 0\n.25 .25 .25\n"


def test_run_warns_before_submitting_when_a_pending_job_lacks_a_required_setting(cli, here, tmp_path,
                                                                                  monkeypatch):
    path = tmp_path / "runs"
    cli("workspace", "init", f"{here}:{path}", "--name", "runs")
    (tmp_path / "POSCAR").write_text(SI_POSCAR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HTTK_VASP_COMMAND", raising=False)
    key = cli("job", "new", str(path), "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    # Still submitted when run looks; the manager applies the pause, so it never starts the runner.
    cli("job", "request", str(path), key, "pause", "--operator", "me")
    result = cli("run", f"{here}:runs", "--idle-timeout", "1")
    assert result.stderr == (f"warning: remote {here}: setting vasp.command is required by 1 pending job(s) ({key}) "
                             f"and resolves to nothing: set it with 'httk workflow workspace settings set "
                             f"{here}:{path} vasp.command VALUE', or export HTTK_VASP_COMMAND in the manager's "
                             "environment\n"), result.stderr
    job_id = re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", result.stdout)[1]

    def finished():
        entry = cli.json("manager", "status", f"{here}:runs", "--job", job_id)["jobs"][job_id]
        return entry if entry["finished"] else None

    wait_until(finished, 120, f"local manager {job_id} exiting")
    cli("workspace", "settings", "set", f"{here}:runs", "vasp.command", "mock-vasp")
    quiet = cli("run", f"{here}:runs", "--idle-timeout", "1")
    assert quiet.stderr == ""
    job_id = re.fullmatch(r"submitted local job ([\d.]+) on here: .*\n", quiet.stdout)[1]
    wait_until(finished, 120, f"local manager {job_id} exiting")


def test_manager_status_without_job_asks_about_the_managers_the_workspace_records(cli, here, tmp_path):
    path = tmp_path / "runs"
    cli("workspace", "init", f"{here}:{path}", "--name", "runs")
    none = cli("manager", "status", f"{here}:runs")
    assert none.stdout == (f"no manager jobs recorded in {path}/.httk-workflow/batch on here; "
                           f"submit one with 'httk workflow run {here}:runs'\n")
    assert cli.json("manager", "status", f"{here}:runs")["jobs"] == {}
    # A manager's output file names its job (local-PID.out): a live process stands in for the manager.
    stand_in = subprocess.Popen(["sleep", "60"])
    try:
        batch = path / ".httk-workflow" / "batch"
        batch.mkdir()
        (batch / f"local-{stand_in.pid}.out").write_text("")
        (batch / "unrelated.txt").write_text("")
        found = cli.json("manager", "status", f"{here}:runs")["jobs"]
        assert found == {str(stand_in.pid): {"state": "RUNNING", "finished": False, "succeeded": None}}
        assert f"local job {stand_in.pid} on here: RUNNING" in cli("manager", "status", f"{here}:runs").stdout
    finally:
        stand_in.kill()
        stand_in.wait()


def start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat, as the local batch system's launcher reads it."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_manager_status_without_job_keeps_the_start_time_so_a_reused_pid_is_no_manager(cli, here, tmp_path):
    path = tmp_path / "runs"
    cli("workspace", "init", f"{here}:{path}", "--name", "runs")
    stand_in = subprocess.Popen(["sleep", "60"])
    try:
        batch = path / ".httk-workflow" / "batch"
        batch.mkdir()
        started = start_time(stand_in.pid)
        # The manager's files as 'run' leaves them: its output by pid, the script copy by PID.START.
        (batch / f"local-{stand_in.pid}.out").write_text("")
        (batch / f"local-{stand_in.pid}.{started}.sh").write_text("#!/bin/sh\n")
        job_id = f"{stand_in.pid}.{started}"
        assert cli.json("manager", "status", f"{here}:runs")["jobs"] == {
            job_id: {"state": "RUNNING", "finished": False, "succeeded": None}}
        assert cli("manager", "status", f"{here}:runs").stdout == f"local job {job_id} on here: RUNNING\n"
        # The same pid with another start time is another process: the manager it recorded has exited.
        (batch / f"local-{stand_in.pid}.{started}.sh").rename(batch / f"local-{stand_in.pid}.{int(started) + 1}.sh")
        stale = f"{stand_in.pid}.{int(started) + 1}"
        assert cli.json("manager", "status", f"{here}:runs")["jobs"] == {
            stale: {"state": "EXITED", "finished": True, "succeeded": None}}
    finally:
        stand_in.kill()
        stand_in.wait()


def test_check_looks_up_the_commands_the_batch_system_declares(cli, tmp_path):
    """``remote check`` reads ``commands`` off the batch system's class: one missing there fails ``batch``."""

    class NeedsMore(LocalBatchSystem):
        commands = ("sh", "no-such-scheduler-command")

    catalog = EntryPointCatalog(given={BATCH_SYSTEMS: {"local": NeedsMore}})
    cli.container.plugins.override(providers.Object(catalog))
    local_remote(cli, tmp_path)
    result = cli("remote", "check", "here", code=1)
    assert "FAILED   batch           local: missing no-such-scheduler-command; install" in result.stdout
    report = json.loads(cli("remote", "check", "here", "--json", code=1).stdout)["report"]
    assert report["batch"]["commands"]["no-such-scheduler-command"] is None


def test_init_puts_a_relative_path_below_workspace_root(cli, tmp_path, monkeypatch):
    root, login = tmp_path / "root", tmp_path / "login"
    root.mkdir()
    login.mkdir()
    monkeypatch.chdir(login)  # the local transport's "login directory" is the current one
    here = local_remote(cli, root)
    made = root / "walk-b1"
    assert cli.json("workspace", "init", f"{here}:walk-b1")["path"] == str(made)
    assert (made / ".httk-workflow" / "format.json").is_file() and not (login / "walk-b1").exists()
    assert cli.json("workspace", "status", f"{here}:walk-b1")["path"] == str(made)  # registered there by basename
    nested = cli("workspace", "init", f"{here}:campaign/walk-b2", "--name", "walk-b2").stdout
    assert nested == f"initialized workspace 'walk-b2' at {root / 'campaign' / 'walk-b2'}\n"
    # Every later command names the same directory by that path (not below the login directory).
    assert cli.json("workspace", "status", f"{here}:campaign/walk-b2")["path"] == str(root / "campaign" / "walk-b2")
    assert cli("job", "list", f"{here}:campaign/walk-b2").stdout == "no jobs\n"
    # An absolute path is used as given; workspace_root '' keeps the login directory.
    elsewhere = tmp_path / "elsewhere" / "walk-b3"
    assert cli.json("workspace", "init", f"{here}:{elsewhere}")["path"] == str(elsewhere)
    cli("remote", "configure", here, "--set", "workspace_root=")
    assert cli.json("workspace", "init", f"{here}:walk-b4")["path"] == str(login / "walk-b4")
    assert not (root / "walk-b4").exists()
