"""Every job-level command on ``REMOTE:WS``, against the ``local`` remote template.

The "remote" httk is this venv's console script run by LocalTransport; it inherits
the CliRunner's environment, so it shares the test's private XDG homes and the same
command run locally must print exactly what it prints forwarded. Commands that name
local files upload them into a directory below the workspace's .httk-workflow/tmp,
which is gone afterwards.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from remote_support import HTTK, write_payload

from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.adapters.transport_ssh import SshTransport
from httk.workflow.cli.context import AppContext
from httk.workflow.cli.main import taskmanager
from httk.workflow.ports import TransportError
from httk.workflow.protocol import JobSpec, prepare_job_payload

FAILING_RUNNER = """from httk.workflow import Runner

run = Runner("demo")


@run.step
def main(a):
    print("about to fail", flush=True)
    a.fail("boom", message="the step failed on purpose")


if __name__ == "__main__":
    raise SystemExit(run.main())
"""

SI_POSCAR = "Si2\n5.43\n0 .5 .5\n.5 0 .5\n.5 .5 0\nSi\n2\nDirect\n0 0 0\n.25 .25 .25\n"


@pytest.fixture
def here(cli, tmp_path):
    """A ``local`` remote named ``here`` whose httk is this venv's."""
    cli("remote", "add", "here", "--template", "local")
    cli("remote", "configure", "here", "--set", f"httk_command={HTTK}")
    return "here"


@pytest.fixture
def ws(cli, tmp_path):
    path = tmp_path / "ws"
    cli("workspace", "init", str(path), "--name", "runs")
    return path


def uploads_left(ws: Path) -> list[str]:
    return sorted(name for name in os.listdir(ws / ".httk-workflow" / "tmp") if name.startswith("httk-upload."))


def same(cli, ws: Path, *args: str, code: int = 0):
    """Run ``args`` locally and with ``here:`` before the workspace path; both must agree exactly."""
    local = cli(*args, code=code)
    forwarded = cli(*[f"here:{arg}" if arg == str(ws) else arg for arg in args], code=code)
    assert (forwarded.stdout, forwarded.stderr) == (local.stdout, local.stderr), args
    return local


def test_read_commands_print_what_they_print_locally(cli, here, ws, tmp_path):
    key = cli("job", "submit", str(ws), str(write_payload(tmp_path / "p1")), "--placement", "a/b").stdout.strip()
    w = str(ws)
    same(cli, ws, "job", "list", w)
    same(cli, ws, "job", "list", w, "--json", "--kind", "submitted", "--placement", "a")
    same(cli, ws, "job", "show", w, key)
    same(cli, ws, "job", "show", w, key, "--json")
    same(cli, ws, "job", "log", w, key, "--limit", "1")
    same(cli, ws, "job", "why", w, key, "--json")
    same(cli, ws, "workspace", "status", w)
    same(cli, ws, "workspace", "managers", w)
    same(cli, ws, "workspace", "gc", w, "--dry-run")
    same(cli, ws, "workspace", "policy", "show", w)
    same(cli, ws, "workspace", "settings", "show", w, "--json")
    same(cli, ws, "workflow", "list", w)
    same(cli, ws, "workflow", "show", "vasp-static", w, "--json")
    same(cli, ws, "collect", w, "--kind", "submitted")
    same(cli, ws, "collect", w, "--kind", "submitted", "--raw")
    # A registered name is resolved by the remote's registry (here: the same one).
    assert cli("job", "list", "here:runs", "--json").stdout == cli("job", "list", str(ws), "--json").stdout
    # workspace list REMOTE: asks the remote for its names.
    assert cli("workspace", "list", "here:").stdout == cli("workspace", "list").stdout
    assert cli("workspace", "list", "here:", "--json").stdout == cli("workspace", "list", "--json").stdout


def test_exit_codes_and_errors_come_back_unchanged(cli, here, ws, tmp_path):
    # An unknown job: the remote's one-line refusal, exit 2.
    result = same(cli, ws, "job", "why", str(ws), "no-such-job", code=2)
    assert result.stderr.startswith("error: ")
    # An unreadable job.json: fsck exits 1 there, and so here.
    key = cli("job", "submit", str(ws), str(write_payload(tmp_path / "p1")), "--placement", "p").stdout.strip()
    (ws / "p" / key / "job.json").write_text("{not json")
    same(cli, ws, "workspace", "fsck", str(ws), "--json", code=1)
    same(cli, ws, "job", "show", str(ws), key, code=1)
    # precheck reports a pending job whose runner file is missing: exit 1 both ways.
    broken = tmp_path / "broken"
    prepare_job_payload(broken, JobSpec(name="demo", workflow="demo", runner_path="absent.py"))
    (broken / "absent.py").write_text("print('hello')\n")  # submission refuses a payload lacking it: remove it after
    broken_key = cli("job", "submit", str(ws), str(broken), "--placement", "q").stdout.strip()
    (ws / "q" / broken_key / "absent.py").unlink()
    same(cli, ws, "precheck", str(ws), code=1)


def test_job_submit_uploads_the_payload_and_removes_the_upload(cli, here, ws, tmp_path, monkeypatch):
    payload = write_payload(tmp_path / "payload")
    (payload / "data").mkdir()
    (payload / "data" / "input.txt").write_text("input\n")
    (payload / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (payload / "run.sh").chmod(0o755)
    (payload / "link").symlink_to("data/input.txt")
    monkeypatch.chdir(tmp_path)
    cli.env["TMPDIR"] = str(tmp_path / "no-such-tmp")  # the uploads must go below the workspace
    # A relative payload path keeps its spelling there; an absolute one is uploaded too.
    first = json.loads(cli("job", "submit", "here:runs", "payload", "--placement", "p", "--json").stdout)
    second = json.loads(cli("job", "submit", f"here:{ws}", str(payload), "--placement", "p", "--tag", "t",
                            "--json").stdout)
    for report in (first, second):
        copied = Path(report["payload"])
        assert copied.parent.parent == ws and (copied / "data" / "input.txt").read_text() == "input\n"
        assert stat.S_IMODE((copied / "run.sh").stat().st_mode) == 0o755
        assert os.readlink(copied / "link") == "data/input.txt"
    assert second["job_key"].startswith("t--")
    # The upload lies below the workspace, so --move renames it into place (the local payload stays).
    moved = cli("job", "submit", "here:runs", "payload", "--placement", "m", "--move", "--json")
    assert Path(json.loads(moved.stdout)["payload"]).parent == ws / "m" and (payload / "run.sh").exists()
    assert uploads_left(ws) == []
    assert (payload / "job.json").exists()  # the local payload is left as it was


def test_job_submit_refuses_a_payload_that_is_not_here(cli, here, ws, tmp_path):
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    result = cli("job", "submit", f"here:{ws}", str(tmp_path / "absent"), "--placement", "p", code=2)
    assert result.stderr == (f"error: {tmp_path / 'absent'}: not a payload directory (holding job.json) on this "
                             "machine; name a local one to send to here\n")
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before


def test_job_new_stages_the_local_input_file(cli, here, ws, tmp_path, monkeypatch):
    (tmp_path / "POSCAR").write_text(SI_POSCAR)
    monkeypatch.chdir(tmp_path)
    job_key = cli("job", "new", "here:runs", "--workflow", "vasp-relax", "--input", "structure=POSCAR",
                  "--tag", "silicon").stdout.strip()
    shown = cli.json("job", "show", str(ws), job_key)
    assert shown["job_key"] == job_key and job_key.startswith("silicon--")
    [staged] = [p for p in Path(shown["paths"]["payload"]).rglob("*") if p.is_file() and p.read_text() == SI_POSCAR]
    assert staged.name == "POSCAR"
    # An absolute path is sent as .upload/N/NAME; a value that is no local file is passed on as it is.
    report = json.loads(cli("job", "new", f"here:{ws}", "--workflow", "vasp-relax", "--input",
                            f"structure={tmp_path / 'POSCAR'}", "--json").stdout)
    assert report["staged"] and uploads_left(ws) == []
    refused = cli("job", "new", f"here:{ws}", "--workflow", "vasp-relax", "--input", "structure=NOPE", code=2)
    assert refused.stderr.startswith("error: ") and "NOPE" in refused.stderr


def test_job_new_records_the_local_input_file_not_its_upload(cli, here, ws, tmp_path, monkeypatch):
    """The upload directory is gone after the command: the job's declaration names the file that was sent."""
    (tmp_path / "POSCAR").write_text(SI_POSCAR)
    monkeypatch.chdir(tmp_path)
    sent = json.loads(cli("job", "new", "here:runs", "--workflow", "vasp-relax", "--input", "structure=POSCAR",
                          "--json").stdout)
    local = json.loads(cli("job", "new", "runs", "--workflow", "vasp-relax", "--input", "structure=POSCAR",
                           "--json").stdout)
    assert sent["staged"] == local["staged"] == {"POSCAR": str(tmp_path / "POSCAR")}
    for report in (sent, local):
        declared = json.loads((Path(report["payload"]) / "job.json").read_text())["declarations"]["workflow"]
        assert declared["inputs"]["structure"]["from"] == str(tmp_path / "POSCAR")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "POSCAR").write_text(SI_POSCAR)
    absolute = json.loads(cli("job", "new", "here:runs", "--workflow", "vasp-relax", "--input",
                              f"structure={elsewhere / 'POSCAR'}", "--json").stdout)
    assert absolute["staged"] == {"POSCAR": str(elsewhere / "POSCAR")} and uploads_left(ws) == []


def test_a_refusal_about_an_uploaded_payload_names_the_local_file(cli, here, ws, tmp_path, monkeypatch):
    payload = write_payload(tmp_path / "pay-typo")
    document = json.loads((payload / "job.json").read_text())
    (payload / "job.json").write_text(json.dumps({**document, "data": {"mdoe": "none"}}))
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    refused = same(cli, ws, "job", "submit", str(ws), str(payload), "--placement", "p", code=2)
    assert refused.stderr.startswith(f"error: {payload}/job.json @ $.data.mdoe: unknown member"), refused.stderr
    monkeypatch.chdir(tmp_path)  # a relative spelling keeps its name there, and is named so
    relative = cli("job", "submit", "here:runs", "pay-typo", "--placement", "p", code=2)
    assert relative.stderr.startswith(f"error: {payload}/job.json @ $.data.mdoe"), relative.stderr
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before


def test_runner_publish_sends_a_file_or_a_directory_there(cli, here, ws, tmp_path, monkeypatch):
    runner = tmp_path / "relax.py"
    runner.write_text("print('relax')\n")
    tree = tmp_path / "relax-runner"
    (tree / "lib").mkdir(parents=True)
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "lib" / "x.txt").write_text("x\n")
    other = tmp_path / "other"
    cli("workspace", "init", str(other))
    monkeypatch.chdir(tmp_path)
    for path, name in ((runner, "relax.py"), (tree, "relax-runner")):
        sent = json.loads(cli("runner", "publish", path.name, "--workspace", "here:runs", "--json").stdout)
        local = json.loads(cli("runner", "publish", str(path), "--workspace", str(other), "--json").stdout)
        assert sent == local and sent["path"] == name  # the same reference: the same bytes under the same name
    assert uploads_left(ws) == []
    # A published name with other bytes is refused there as here, naming the fix.
    runner.write_text("print('changed')\n")
    refused = cli("runner", "publish", "relax.py", "--workspace", "here:runs", code=2)
    assert "--replace" in refused.stderr and refused.stderr.count("\n") == 1
    missing = cli("runner", "publish", "nope.py", "--workspace", "here:runs", code=2)
    assert missing.stderr == ("error: nope.py: not a file or directory on this machine; name a local one to send "
                              "to here\n")


def test_a_forwarded_commands_fix_hints_name_the_remote(cli, here, ws, tmp_path, monkeypatch):
    """Pasting the fix a remote gives must act there: every workspace in a hint carries 'here:'."""
    key = cli("job", "submit", str(ws), str(write_payload(tmp_path / "p1")), "--placement", "p").stdout.strip()
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    unknown = cli("workspace", "status", "here:nosuch", code=2)
    assert unknown.stderr == ("error: remote here: nosuch: neither a directory nor a registered workspace name "
                              "there; see 'httk workflow workspace list here:'\n")
    # Locally the same mistake names this machine's registry.
    assert cli("workspace", "status", "nosuch", code=2).stderr.endswith("see 'httk workflow workspace list'\n")
    absent = tmp_path / "nosuchdir"
    not_there = cli("workspace", "status", f"here:{absent}", code=2)
    assert f"create it with 'httk workflow workspace init here:{absent}'" in not_there.stderr
    moved = cli("transfer", str(ws), f"here:{absent}", "--job", key, code=2)
    assert f"create it with 'httk workflow workspace init here:{absent}'" in moved.stderr, moved.stderr
    assert not absent.exists()
    # job new sends local files: a missing one is missing here, not at a path on the remote.
    monkeypatch.chdir(tmp_path)
    missing = cli("job", "new", "here:runs", "--workflow", "vasp-relax", "--input", "structure=NOPOSCAR", code=2)
    assert missing.stderr == ("error: --input structure: no file 'NOPOSCAR' on the machine that ran 'job new' (it "
                              "sends the --input files it finds there to remote here); give the path of an existing "
                              "local file\n"), missing.stderr
    local = cli("job", "new", "runs", "--workflow", "vasp-relax", "--input", "structure=NOPOSCAR", code=2)
    assert f"looked at {tmp_path / 'NOPOSCAR'}" in local.stderr
    # Every one refused before writing: the job did not move, no workspace appeared, nothing was added.
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before


def test_precheck_blocks_a_job_whose_required_setting_resolves_to_nothing(cli, here, ws, tmp_path, monkeypatch):
    (tmp_path / "POSCAR").write_text(SI_POSCAR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HTTK_VASP_COMMAND", raising=False)
    key = cli("job", "new", "runs", "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    local = cli("precheck", str(ws), code=1)
    assert (f"{key} setting: broken: required setting vasp.command resolves to nothing" in local.stdout
            and f"'httk workflow workspace settings set {ws} vasp.command VALUE'" in local.stdout
            and "HTTK_VASP_COMMAND" in local.stdout), local.stdout
    assert local.stdout.rstrip().endswith("problems found")
    # Forwarded, the fix names the workspace as it is typed here.
    forwarded = cli("precheck", "here:runs", "--json", code=1)
    report = json.loads(forwarded.stdout)
    [missing] = report["settings_missing"]
    assert missing["setting"] == "vasp.command" and missing["jobs"] == [key]
    assert missing["fix"] == f"httk workflow workspace settings set here:{ws} vasp.command VALUE"
    # A job input, the HTTK_ variable or the workspace setting each resolves it.
    monkeypatch.setenv("HTTK_VASP_COMMAND", "mock-vasp")
    assert "vasp.command" not in cli("precheck", str(ws), code=None).stdout
    monkeypatch.delenv("HTTK_VASP_COMMAND")
    cli("workspace", "settings", "set", str(ws), "vasp.command", "mock-vasp")
    assert json.loads(cli("precheck", str(ws), "--json", code=None).stdout)["settings_missing"] == []


def test_job_debug_sends_the_payload_and_returns_its_exit_status(cli, here, ws, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_payload(tmp_path / "good")
    result = cli("job", "debug", f"here:{ws}", "good")
    assert result.stdout.startswith("[debug] submitted ") and " ended succeeded;" in result.stdout
    bad = tmp_path / "bad"
    prepare_job_payload(bad, JobSpec(name="demo", workflow="demo", runner_path="run.py"))
    (bad / "run.py").write_text(FAILING_RUNNER)
    failed = cli("job", "debug", f"here:{ws}", "bad", "--placement", "dbg", code=3)
    assert "about to fail" in failed.stdout + failed.stderr and " ended failed: boom" in failed.stdout
    assert uploads_left(ws) == []


def test_job_request_is_published_there(cli, here, ws, tmp_path):
    key = cli("job", "submit", str(ws), str(write_payload(tmp_path / "p")), "--placement", "p").stdout.strip()
    document = json.loads(cli("job", "request", f"here:{ws}", key, "pause", "--operator", "me", "--reason",
                              "-a reason- with 'quotes' $HOME", "--json").stdout)
    assert document["job_key"] == key and document["action"] == "pause"
    assert document["reason"] == "-a reason- with 'quotes' $HOME"


def test_bad_input_is_one_line_exit_2_and_nothing_written(cli, here, ws, tmp_path, monkeypatch):
    payload = write_payload(tmp_path / "payload")
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    unknown = cli("job", "submit", f"nowhere:{ws}", str(payload), "--placement", "p", code=2)
    assert unknown.stderr == ("error: no remote named 'nowhere' (configured: here); see 'httk workflow remote list' "
                              "and 'remote add'\n")
    cli("remote", "configure", "here", "--set", "httk_command=/nonexistent/httk")
    for args in (["job", "submit", f"here:{ws}", str(payload), "--placement", "p"],
                 ["job", "submit", "here:runs", str(payload), "--placement", "p"], ["job", "list", f"here:{ws}"]):
        missing = cli(*args, code=2)
        assert missing.stdout == "" and missing.stderr == (
            "error: remote here: cannot run httk_command '/nonexistent/httk' there; fix it with 'httk workflow "
            "remote configure here --set httk_command=PATH' (see 'httk workflow remote check here')\n")
    cli("remote", "add", "far", "--template", "ssh-slurm")
    cli("remote", "configure", "far", "--set", "host=127.0.0.1", "--set", "port=1", "--set", "connect_timeout=1")
    unreachable = cli("job", "submit", f"far:{ws}", str(payload), "--placement", "p", code=2)
    assert unreachable.stderr.startswith("error: remote far: ssh 127.0.0.1:1: cannot connect to port 1")
    assert len(unreachable.stderr.splitlines()) == 1
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before


def test_a_pipx_installed_httk_needs_no_httk_command(cli, ws, tmp_path):
    """The default httk is looked for on PATH, then in ~/.local/bin, where pipx puts it."""
    home = tmp_path / "home"
    home.mkdir()
    cli.env.update(HOME=str(home), PATH="/usr/bin:/bin")
    cli("remote", "add", "plain", "--template", "local")
    missing = cli("job", "list", f"plain:{ws}", code=2)
    assert missing.stderr == (
        "error: remote plain: no httk there (not on PATH, nor in ~/.local/bin); install it there ('pipx install "
        "httk-workflow') or give its path with 'httk workflow remote configure plain --set httk_command=PATH'\n")
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "httk").symlink_to(HTTK)
    assert cli("job", "list", f"plain:{ws}").stdout == "no jobs\n"
    checks = {c["name"]: c for c in cli.json("remote", "check", "plain")["checks"]}
    assert checks["httk"]["ok"] is True and checks["httk"]["detail"].startswith(str(home / ".local/bin/httk"))


def test_remote_check_reports_the_workspaces_filesystem(cli, here, ws, tmp_path):
    report = cli.json("remote", "check", here)
    [entry] = [c for c in report["checks"] if c["name"] == "workspace"]
    assert entry["ok"] is True and entry["detail"].startswith(f"runs at {ws} writable, ")
    assert entry["detail"].endswith(" free")
    named = cli("remote", "check", here, str(tmp_path / "absent"), code=1)
    assert (f"FAILED   workspace       {tmp_path / 'absent'} does not exist; create it with 'httk workflow "
            "workspace init here:PATH'") in named.stdout
    assert named.stderr == "remote here: failed checks: workspace\n"
    unregistered = cli("remote", "check", here, "nameless", code=1).stdout
    assert "FAILED   workspace       nameless: no workspace of that name is registered there" in unregistered


@pytest.mark.parametrize("transport", [LocalTransport()])
def test_stream_hands_output_on_before_the_command_ends(transport):
    seen: list[tuple[float, bytes]] = []
    errors: list[bytes] = []
    started = time.monotonic()
    code = transport.stream(["sh", "-c", "echo first; sleep 1; echo second; echo oops >&2; exit 4"],
                            out=lambda data: seen.append((time.monotonic() - started, data)), err=errors.append)
    assert code == 4 and b"".join(data for _, data in seen) == b"first\nsecond\n" and b"".join(errors) == b"oops\n"
    assert seen[0][1] == b"first\n" and seen[0][0] < 0.8


def test_a_closed_pipe_on_our_side_is_not_a_transport_error():
    def closed(data: bytes) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    started = time.monotonic()
    with pytest.raises(BrokenPipeError):
        LocalTransport().stream(["sh", "-c", "echo one; sleep 30"], out=closed, err=closed)
    assert time.monotonic() - started < 10  # the command was stopped, not waited for


def test_workspace_list_takes_only_a_remote_and_a_colon(cli, here, ws):
    assert cli("workspace", "list", "here:runs", code=2).stderr == (
        "error: here:runs: name only the remote here, as 'here:'\n")
    assert cli("workspace", "list", "runs", code=2).stderr == (
        "error: runs: expected a remote followed by a colon, e.g. 'kappa:' (see 'httk workflow remote list')\n")


def test_the_taskmanager_alias_forwards_the_canonical_command(cli, here, ws, tmp_path):
    cli("job", "submit", str(ws), str(write_payload(tmp_path / "p")), "--placement", "p")
    result = CliRunner().invoke(taskmanager, ["status", f"here:{ws}", "--json"], obj=AppContext(cli.container),
                                env=cli.env)
    assert result.exit_code == 0 and json.loads(result.stdout)["counts"]["submitted"] == 1


def test_ssh_config_supplies_port_user_and_known_hosts(cli, tmp_path, monkeypatch):
    """What the remote's settings leave unset comes from ~/.ssh/config (fabric's load_ssh_configs)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        "Host alias\n  HostName 127.0.0.1\n  Port 1\n  User someone\n"
        f"  UserKnownHostsFile {tmp_path / 'absent_known_hosts'} {home / '.ssh' / 'hosts'}\n"
    )
    (home / ".ssh" / "hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    assert SshTransport("alias").where == "someone@alias:1"
    assert SshTransport("alias", port=2, user="me").where == "me@alias:2"  # the remote's own settings win
    with pytest.raises(TransportError, match=r"^ssh someone@alias:1: cannot connect to port 1 \(Connection refused"):
        SshTransport("alias", connect_timeout=2).run(["true"])
    cli.env["HOME"] = str(home)
    cli("remote", "add", "alias", "--template", "ssh-slurm")
    cli("remote", "configure", "alias", "--set", "host=alias", "--set", "connect_timeout=2")
    refused = cli("job", "list", "alias:runs", code=2)
    assert refused.stderr.startswith("error: remote alias: ssh someone@alias:1: cannot connect to port 1 ")


def test_a_missing_workspace_runners_hint_is_a_command_that_works_from_here(cli, here, ws, tmp_path):
    """The fix names the local file (not its upload there) and the workspace as REMOTE:PATH, which sends it."""
    import hashlib
    import shlex

    payload = tmp_path / "pay-ws"
    runner = "from httk.workflow import Runner\n"
    sha256 = hashlib.sha256(runner.encode()).hexdigest()
    prepare_job_payload(payload, JobSpec(name="w", workflow="w", runner_path="relax.py", runner_source="workspace",
                                         runner_sha256=sha256))
    (payload / "relax.py").write_text(runner)
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    refused = cli("job", "submit", f"here:{ws}", str(payload), "--placement", "p", code=2)
    hint = (f"publish it with 'httk workflow runner publish {payload / 'relax.py'} --workspace here:{ws} "
            "--name relax.py', or submit with --allow-missing-runner")
    assert hint in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before
    command = shlex.split(hint.split("'")[1])
    assert command[:3] == ["httk", "workflow", "runner"]
    cli(*command[2:])  # pasted here, it publishes there
    cli("job", "submit", f"here:{ws}", str(payload), "--placement", "p")


def test_uploads_are_named_locally_whatever_the_workspace_spelling_there(cli, here, ws, tmp_path, monkeypatch):
    """A trailing slash or a path through a symbolic link (a cluster's scratch often is one) changes nothing."""
    (tmp_path / "POSCAR").write_text(SI_POSCAR)
    link = tmp_path / "link"
    link.symlink_to(ws)
    payload = write_payload(tmp_path / "pay-typo")
    document = json.loads((payload / "job.json").read_text())
    (payload / "job.json").write_text(json.dumps({**document, "data": {"mdoe": "none"}}))
    monkeypatch.chdir(tmp_path)
    for spelled in (f"{ws}/", str(link), f"{link}/"):
        report = json.loads(cli("job", "new", f"here:{spelled}", "--workflow", "vasp-relax", "--input",
                                "structure=POSCAR", "--json").stdout)
        assert report["staged"] == {"POSCAR": str(tmp_path / "POSCAR")}, spelled
        refused = cli("job", "submit", f"here:{spelled}", "pay-typo", "--placement", "p", code=2)
        assert refused.stderr.startswith(f"error: {payload}/job.json @ $.data.mdoe"), (spelled, refused.stderr)
    assert uploads_left(ws) == []
