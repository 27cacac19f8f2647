"""``transfer`` to and from a remote workspace: the ``local`` template (always), and the real sshd of tests/infra.

The client runs as a subprocess with private XDG homes; the ``local`` remote's httk
is this venv's, started by LocalTransport with the client's environment, so the
test hook ``HTTK_WORKFLOW_TEST_STOP_AFTER`` can kill the remote side too. The SSH
tests use the ssh user's own httk installation (``CI_HTTK_COMMAND``) and skip, with
the reason, when the infrastructure is not running or that httk predates
``transfer-remote``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dependency_injector import providers
from remote_support import HTTK, wait_until, write_payload

from httk.workflow.adapters.plugins import TRANSPORTS, EntryPointCatalog
from httk.workflow.adapters.transport_local import LocalTransport
from httk.workflow.adapters.transport_ssh import SshTransport
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.workspace import Workspace

BIN = Path(sys.executable).parent


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp), "XDG_DATA_HOME": str(tmp / "xdg"),
            "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "LC_ALL": "C.UTF-8", **extra}


class Client:
    """``httk workflow ...`` as a subprocess of its own (a kill -9 of it must not kill pytest)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def __call__(self, *args: str, code: int | None = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True,
                              env=env_for(self.tmp, **extra), timeout=180, check=False)
        if code is not None and done.returncode != code:
            raise AssertionError(f"exit {done.returncode} != {code} for {args}\nstdout: {done.stdout}\n"
                                 f"stderr: {done.stderr}")
        return done

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


def kinds(root: Path) -> dict[str, str]:
    handle = Workspace(root).handle
    return {str(marker.key.tag): kind.value for kind in StateKind for marker in handle.store.iter_markers(kind)}


@pytest.fixture
def here(tmp_path):
    """A client, its local workspace ``ws`` with one submitted job, and a remote workspace ``here:runs``."""
    client = Client(tmp_path)
    client("remote", "add", "here", "--template", "local")
    client("remote", "configure", "here", "--set", f"httk_command={HTTK}", "--set", f"workspace_root={tmp_path}")
    client("workspace", "init", str(tmp_path / "ws"))
    client("workspace", "init", f"here:{tmp_path / 'runs'}", "--name", "runs")
    payload = write_payload(tmp_path / "payload")
    spec = json.loads((payload / "job.json").read_text())
    spec["tag"] = "demo"
    (payload / "job.json").write_text(json.dumps(spec))
    client("job", "submit", str(tmp_path / "ws"), str(payload), "--placement", "camp")
    return client


def test_there_run_and_back_through_the_local_remote(here, tmp_path):
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    sent = here("transfer", str(ws), "here:runs", "--job", "demo")
    assert sent.stdout.startswith("transferred 1 job (") and f"from {ws} to here:runs" in sent.stdout
    assert kinds(ws) == {} and kinds(runs) == {"demo": "submitted"}
    here("run", str(runs), "--idle-timeout", "60")  # the remote's manager, run here directly
    assert kinds(runs) == {"demo": "succeeded"}
    back = here("transfer", "here:runs", str(ws))  # every stopped job
    assert back.stdout.startswith("transferred 1 job") and kinds(runs) == {} and kinds(ws) == {"demo": "succeeded"}
    events = [entry["event"] for entry in here.json("job", "log", str(ws), "demo")]
    assert events[0] == "submit" and "commit_succeed" in events
    assert events.count("transfer_import") == 2 and events[-1] == "transfer_import"
    # The remote holds the destination ledger of the first transfer and the source ledger of the second.
    roles = {}
    for ledger in (runs / ".httk-workflow" / "transfers").iterdir():
        role = json.loads((ledger / "ledger.json").read_text())["role"]
        final = json.loads((ledger / "steps" / ("6.json" if role == "source" else "3.json")).read_text())
        roles[role] = final["step"]
    assert roles == {"destination": "acknowledged", "source": "retired"}


@pytest.mark.parametrize("step", ["destination:received", "destination:imported", "destination:acknowledged"])
def test_the_remote_side_killed_at_a_step_is_finished_or_rolled_back(here, tmp_path, step):
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    first = here("transfer", str(ws), "here:runs", "--job", "demo", code=None, HTTK_WORKFLOW_TEST_STOP_AFTER=step)
    if first.returncode != 0 and first.stdout.startswith("rolled back 1 transfer"):
        # Killed before it decided: nothing moved, and the transfer may simply be repeated.
        assert first.returncode == 2 and kinds(ws) == {"demo": "submitted"} and kinds(runs) == {}, first
        here("transfer", str(ws), "here:runs", "--job", "demo")
    elif first.returncode != 0:
        # Killed after it decided: the client cannot know how far it got, holds it, and the next run finishes it.
        assert first.returncode == 2 and first.stdout.startswith("held 1 transfer"), first
        assert "is held at step sent" in first.stderr and kinds(ws) == {"demo": "transferring"}
        here("transfer", str(ws), "here:runs", "--resume")
    assert kinds(ws) == {} and kinds(runs) == {"demo": "submitted"}, step
    assert here.json("workspace", "fsck", str(runs))["clean"] is True


def test_a_pipx_httk_in_local_bin_serves_a_transfer_without_httk_command(tmp_path):
    """As every forwarded command does, transfer finds ~/.local/bin/httk when httk is not on the PATH there."""
    client = Client(tmp_path)
    bare = {"PATH": "/usr/bin:/bin"}  # no httk on it: only ~/.local/bin/httk, where pipx puts it
    (tmp_path / ".local" / "bin").mkdir(parents=True)
    (tmp_path / ".local" / "bin" / "httk").symlink_to(HTTK)
    client("remote", "add", "here", "--template", "local")
    client("remote", "configure", "here", "--set", f"workspace_root={tmp_path}")
    client("workspace", "init", str(tmp_path / "ws"))
    client("workspace", "init", f"here:{tmp_path / 'runs'}", "--name", "runs", **bare)
    client("job", "submit", str(tmp_path / "ws"), str(write_payload(tmp_path / "payload")), "--placement", "camp")
    sent = client("transfer", str(tmp_path / "ws"), "here:runs", "--kind", "submitted", **bare)
    assert sent.stdout.startswith("transferred 1 job"), sent
    (tmp_path / ".local" / "bin" / "httk").unlink()
    back = client("transfer", "here:runs", str(tmp_path / "ws"), "--kind", "submitted", code=2, **bare)
    # The refusal every forwarded command gives, naming both fixes.
    assert back.stderr.strip().splitlines()[-1] == (
        "error: remote here: no httk there (not on PATH, nor in ~/.local/bin); install it there ('pipx install "
        "httk-workflow') or give its path with 'httk workflow remote configure here --set httk_command=PATH'")
    assert len(kinds(tmp_path / "runs")) == 1


def test_a_refusal_at_the_remote_moves_nothing(here, tmp_path):
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    key = next(iter(Workspace(ws).handle.store.iter_markers(StateKind.SUBMITTED))).key
    (runs / "camp" / str(key)).mkdir(parents=True)
    done = here("transfer", str(ws), "here:runs", "--job", "demo", code=2)
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: here:runs: {runs}/camp/{key} already exists")
    assert kinds(ws) == {"demo": "submitted"} and not (ws / ".httk-workflow" / "transfers").exists()
    assert not (runs / ".httk-workflow" / "transfers").exists()
    missing = here("transfer", str(ws), "here:nope", "--job", "demo", code=2)
    assert "nope: neither a directory nor a registered workspace name" in missing.stderr


def disk(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("args", [("dead:runs", "{ws}"), ("dead:runs", "{ws}", "--resume"),
                                  ("dead:runs", "here:runs")])
def test_an_unreachable_source_is_one_line_exit_2_and_writes_nothing(here, tmp_path, args):
    """Bringing jobs home from a remote that cannot be reached: the refusal of a destination, not a traceback."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # released: nothing listens there
    (tmp_path / "known_hosts").write_text("")
    here("remote", "add", "dead", "--template", "ssh-slurm")
    here("remote", "configure", "dead", "--set", "host=127.0.0.1", "--set", f"port={port}",
         "--set", f"known_hosts={tmp_path / 'known_hosts'}")
    before = disk(tmp_path)
    done = here("transfer", *[arg.format(ws=tmp_path / "ws") for arg in args], code=2)
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: remote dead: ssh 127.0.0.1:{port}: cannot connect to port {port} (Connection refused); check the "
        "remote's host and port settings, and that sshd runs there; nothing moved")
    assert disk(tmp_path) == before and kinds(tmp_path / "ws") == {"demo": "submitted"}


# -- the real sshd ---------------------------------------------------------------------------------
@pytest.fixture
def kappa(infra_httk, tmp_path):
    """A client with the ``ssh-slurm`` remote ``kappa`` of the infrastructure, and a fresh remote workspace."""
    transport = SshTransport(infra_httk["CI_SSH_HOST"], port=int(infra_httk["CI_SSH_PORT"]),
                             user=infra_httk["CI_SSH_USER"], key_filename=infra_httk["CI_SSH_KEY"],
                             known_hosts=infra_httk["CI_SSH_KNOWN_HOSTS"], connect_timeout=5.0)
    probe = transport.run([infra_httk["CI_HTTK_COMMAND"], "workflow", "transfer-remote", "--help"])
    if probe.returncode != 0:
        transport.close()
        pytest.skip(f"the ssh user's httk ({infra_httk['CI_HTTK_COMMAND']}) has no 'transfer-remote': it predates "
                    "this checkout; rerun 'make infra'")
    client = Client(tmp_path)
    client("remote", "add", "kappa", "--template", "ssh-slurm")
    client("remote", "configure", "kappa", "--set", f"host={infra_httk['CI_SSH_HOST']}",
           "--set", f"port={infra_httk['CI_SSH_PORT']}", "--set", f"username={infra_httk['CI_SSH_USER']}",
           "--set", f"key_filename={infra_httk['CI_SSH_KEY']}",
           "--set", f"known_hosts={infra_httk['CI_SSH_KNOWN_HOSTS']}",
           "--set", f"httk_command={infra_httk['CI_HTTK_COMMAND']}")
    remote_path = f"{infra_httk['CI_WORK_ROOT']}/transfer-{uuid.uuid4().hex[:12]}"
    client("workspace", "init", f"kappa:{remote_path}")
    client.remote_path = remote_path  # type: ignore[attr-defined]
    client.transport = transport  # type: ignore[attr-defined]
    try:
        yield client
    finally:
        transport.run(["rm", "-rf", remote_path])
        # `workspace init kappa:PATH` registered the basename in the ssh user's registry: forget it too.
        transport.run([infra_httk["CI_HTTK_COMMAND"], "workflow", "workspace", "forget", remote_path.rsplit("/", 1)[1]])
        transport.close()


@pytest.mark.ssh
def test_transfer_over_ssh_there_and_back(kappa, tmp_path):
    ws = tmp_path / "ws"
    kappa("workspace", "init", str(ws))
    payload = prepare_job_payload(tmp_path / "payload", JobSpec(name="demo", workflow="demo", tag="demo",
                                                                runner_path="run.sh"))
    (payload / "run.sh").write_text("exit 0\n")
    (payload / "inputs").mkdir()
    (payload / "inputs" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (payload / "inputs" / "link").symlink_to("big.bin")
    kappa("job", "submit", str(ws), str(payload), "--placement", "camp")
    remote = f"kappa:{kappa.remote_path}"
    sent = kappa("transfer", str(ws), remote, "--job", "demo")
    assert sent.stdout.startswith("transferred 1 job (3.0 MiB)"), sent.stdout
    assert kinds(ws) == {}
    listing = kappa.transport.run(["sh", "-c", f"ls {kappa.remote_path}/camp/*/inputs; "
                                               f"readlink {kappa.remote_path}/camp/*/inputs/link"])
    assert listing.stdout.split() == ["big.bin", "link", "big.bin"], listing
    back = kappa("transfer", remote, str(ws), "--kind", "submitted")
    assert back.stdout.startswith("transferred 1 job (3.0 MiB)"), back.stdout
    assert kinds(ws) == {"demo": "submitted"}
    copy = next((ws / "camp").iterdir()) / "inputs"
    assert (copy / "big.bin").read_bytes() == (payload / "inputs" / "big.bin").read_bytes()
    assert os.readlink(copy / "link") == "big.bin"
    events = [entry["event"] for entry in kappa.json("job", "log", str(ws), "demo")]
    assert events == ["submit", "transfer_detach", "transfer_import", "transfer_detach", "transfer_import"]


def test_one_transport_carries_the_whole_transfer(cli, tmp_path):
    """Every remote command and every file of the bundle goes over one transport, closed once at the end."""
    made: list[CountingTransport] = []

    class Counted(CountingTransport):
        def __init__(self, **options: object) -> None:
            super().__init__(**options)
            made.append(self)

    # The local transport of every remote is the counting one (the entry point's class stands aside).
    cli.container.plugins.override(providers.Object(EntryPointCatalog(given={TRANSPORTS: {"local": Counted}})))
    cli("remote", "add", "here", "--template", "local")
    cli("remote", "configure", "here", "--set", f"httk_command={HTTK}", "--set", f"workspace_root={tmp_path}")
    cli("workspace", "init", str(tmp_path / "ws"))
    cli("workspace", "init", f"here:{tmp_path / 'runs'}")
    cli("job", "submit", str(tmp_path / "ws"), str(write_payload(tmp_path / "payload")), "--placement", "camp")
    made.clear()
    cli("transfer", str(tmp_path / "ws"), f"here:{tmp_path / 'runs'}", "--kind", "submitted")
    [transport] = made
    assert transport.puts >= 3 and transport.runs >= 6 and transport.closed == 1
    assert kinds(tmp_path / "runs") == {"None": "submitted"}


class CountingTransport(LocalTransport):
    def __init__(self, **options: object) -> None:
        super().__init__()
        self.runs = self.puts = self.closed = 0

    def run(self, argv, *, input=None, timeout=None):  # noqa: ANN001, ANN201
        self.runs += 1
        return super().run(argv, input=input, timeout=timeout)

    def put(self, local: str, remote: str) -> None:
        self.puts += 1
        super().put(local, remote)

    def close(self) -> None:
        self.closed += 1


POSCAR = "Si\n5.43\n0 0.5 0.5\n0.5 0 0.5\n0.5 0.5 0\nSi\n2\nDirect\n0 0 0\n0.25 0.25 0.25\n"


@pytest.mark.ssh
@pytest.mark.slurm
def test_the_spec_flow_job_new_transfer_run_on_slurm_transfer_back_collect(kappa, infra_httk, tmp_path):
    """000 "Running on a remote", from `job new` to `collect`, against the real sshd and Slurm."""
    remote = f"kappa:{kappa.remote_path}"
    python = str(Path(infra_httk["CI_HTTK_COMMAND"]).parent / "python")
    kappa("workspace", "settings", "set", remote, "slurm.partition", infra_httk["CI_SLURM_PARTITION"])
    kappa("workspace", "settings", "set", remote, "slurm.time_limit", '"00:10:00"')
    kappa("workspace", "settings", "set", remote, "vasp.command", json.dumps(f"{python} -m "
                                                                           "httk.workflow.testing.mock_vasp"))
    (tmp_path / "POSCAR").write_text(POSCAR)
    job = kappa("job", "new", "--workflow", "vasp-relax", "--input", f"structure={tmp_path / 'POSCAR'}",
                "--tag", "silicon").stdout.split()[-1]
    sent = kappa("transfer", "default", remote, "--job", job)
    assert sent.stdout.startswith("transferred 1 job") and "warning" not in sent.stderr, sent
    submitted = kappa("run", remote, "--workers", "1", "--idle-timeout", "60").stdout
    batch_id = submitted.split()[3]

    def finished():
        entry = kappa.json("manager", "status", remote, "--job", batch_id)["jobs"][batch_id]
        return entry if entry["finished"] else None

    assert wait_until(finished, 300, f"slurm job {batch_id}")["succeeded"] is True
    assert kappa.json("workspace", "status", remote)["counts"]["succeeded"] == 1
    back = kappa("transfer", remote, "default")
    assert back.stdout.startswith("transferred 1 job"), back
    collected = [json.loads(line) for line in kappa("collect").stdout.splitlines()]
    [mine] = [item for item in collected if item["job_id"] == job or item["job_key"].endswith(job)]
    assert mine["kind"] == "succeeded" and mine["workflow"] == "vasp-relax"
    events = [entry["event"] for entry in kappa.json("job", "log", "default", job)]
    assert events[:3] == ["submit", "transfer_detach", "transfer_import"] and events[-1] == "transfer_import"
    assert "commit_succeed" in events
