"""``httk workflow transfer`` local to local, as real processes: the flow, kill -9 at every step, refusals.

Jobs are run to ``succeeded`` and ``failed`` by a real manager once per module; each
test copies that workspace. The kill tests set ``HTTK_WORKFLOW_TEST_STOP_AFTER`` so
the CLI SIGKILLs itself right after one ledger step, then finish the transfer by
repeating the command (or with ``--resume``) and check that every job is in exactly
one workspace with its whole history.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from httk.workflow.domain.frames import Owner
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.operations import inspection
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.store.runners import publish_runner
from httk.workflow.workspace import Workspace
from runner_support import BIN, HTTK, PRELUDE

#: Every ledger step, in the order a local-to-local transfer publishes them.
STEPS = ["source:planned", "source:detached", "source:bundled", "destination:received", "source:sent",
         "destination:imported", "destination:acknowledged", "source:acknowledged", "source:retired"]


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp), "XDG_DATA_HOME": str(tmp / "xdg"),
            "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "LC_ALL": "C.UTF-8", **extra}


def httk(tmp: Path, *args: str, code: int | None = 0, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=env_for(tmp, **extra),
                          timeout=120, check=False)
    if code is not None and done.returncode != code:
        raise AssertionError(f"exit {done.returncode} != {code} for {args}\nstdout: {done.stdout}\n"
                             f"stderr: {done.stderr}")
    return done


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """``ws-a`` with a succeeded job (persistent workdir), a failed one and a submitted one; ``ws-b`` empty."""
    tmp = tmp_path_factory.mktemp("transfer-template")
    a = Workspace.init(tmp / "ws-a", durable=False)
    Workspace.init(tmp / "ws-b", durable=False)
    bodies = {
        "ok": 'echo done > result.txt\npublish \'"action":"succeed"\'',
        "bad": 'echo "it broke" >&2\npublish \'"action":"fail","failure":{"code":"boom","message":"it broke",'
               '"details":{},"retryable":false}\'',
    }
    for tag, body in bodies.items():
        payload = prepare_job_payload(tmp / "payloads" / tag, JobSpec(name=tag, workflow="ops", runner_path="run.sh",
                                                                       tag=tag), durable=False)
        (payload / "run.sh").write_text(PRELUDE + body + "\n")
        a.submit(payload, f"camp/{tag}")
    httk(tmp, "run", str(tmp / "ws-a"), "--idle-timeout", "30")
    waiting = prepare_job_payload(tmp / "payloads" / "later", JobSpec(name="later", workflow="ops",
                                                                        runner_path="run.sh", tag="later"))
    (waiting / "run.sh").write_text(PRELUDE + "publish '\"action\":\"succeed\"'\n")
    a.submit(waiting, "camp/later")
    return tmp


@pytest.fixture
def world(template, tmp_path) -> Path:
    for name in ("ws-a", "ws-b"):
        shutil.copytree(template / name, tmp_path / name, symlinks=True)
    return tmp_path


def jobs_of(root: Path) -> dict[str, str]:
    """``tag -> kind`` of every job of a workspace (transferring included)."""
    handle = Workspace(root).handle
    out = {}
    for kind in StateKind:
        for marker in handle.store.iter_markers(kind):
            out[str(marker.key.tag)] = kind.value
    return out


def tree(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            out[relative] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[relative] = "dir"
        else:
            out[relative] = path.read_bytes().hex()
    return out


def test_transfer_there_and_back_keeps_the_whole_life(world):
    a, b = world / "ws-a", world / "ws-b"
    done = httk(world, "transfer", str(a), str(b))
    assert done.stdout.startswith("transferred 2 jobs (") and f"from {a} to {b}" in done.stdout
    assert done.stdout.count("\n") == 1  # one summary line
    assert jobs_of(a) == {"later": "submitted"} and jobs_of(b) == {"ok": "succeeded", "bad": "failed"}
    # The workdir, attempt logs and failure travel: `job show` and `job log` at the destination tell the whole story.
    shown = json.loads(httk(world, "job", "show", str(b), "ok", "--json").stdout)
    assert shown["kind"] == "succeeded" and shown["event"] == "transfer_import"
    assert Path(shown["paths"]["workdir"], "result.txt").read_text() == "done\n"
    assert shown["transfer"]["origin"] == "succeeded"
    log = json.loads(httk(world, "job", "log", str(b), "bad", "--json").stdout)
    events = [entry["event"] for entry in log]
    assert events[0] == "submit" and events[-2:] == ["transfer_detach", "transfer_import"]
    assert "commit_fail" in events
    bad = json.loads(httk(world, "job", "show", str(b), "bad", "--json").stdout)
    assert bad["failure"]["code"] == "boom"
    assert "it broke" in Path(bad["paths"]["control"], "stderr.log").read_text()
    # The source kept nothing of them but its ledger and the intact bundle.
    assert not (a / "camp" / "ok").exists() and not list((a / ".httk-workflow" / "attempts").iterdir())
    # Its journal still holds their frames, ending in transfer_retire: fsck knows they left and restores nothing.
    repaired = json.loads(httk(world, "workspace", "fsck", str(a), "--repair", "--json").stdout)
    assert repaired["clean"] is True, repaired
    assert jobs_of(a) == {"later": "submitted"}
    # --json, and back again with an explicit selection.
    report = json.loads(httk(world, "transfer", str(b), str(a), "--job", "ok", "--json").stdout)
    [outcome] = report["transfers"]
    assert outcome["state"] == "retired" and outcome["jobs"][0].startswith("ok--")
    assert report["summary"].startswith("transferred 1 job")
    assert jobs_of(a) == {"later": "submitted", "ok": "succeeded"}
    log = json.loads(httk(world, "job", "log", str(a), "ok", "--json").stdout)
    assert [entry["event"] for entry in log][-4:] == ["transfer_detach", "transfer_import", "transfer_detach",
                                                      "transfer_import"]
    status = json.loads(httk(world, "workspace", "status", str(a), "--json").stdout)
    assert status["counts"]["transferring"] == 0 and status["damage"] == []
    assert json.loads(httk(world, "workspace", "fsck", str(b), "--json").stdout)["clean"] is True


def test_nothing_to_transfer_is_one_line_and_exit_zero(world):
    a, b = world / "ws-a", world / "ws-b"
    done = httk(world, "transfer", str(b), str(a))
    assert done.stdout == f"nothing to transfer from {b} to {a}\n"


def test_a_round_trip_is_an_arrival_not_collected_history(world):
    """Jobs that came back by transfer start their stay at the import: no hole, no horizon; only gc sets one."""
    a, b = world / "ws-a", world / "ws-b"
    before = time.time()
    time.sleep(0.05)
    httk(world, "transfer", str(a), str(b), "--kind", "submitted")
    middle = time.time()
    time.sleep(0.05)
    httk(world, "transfer", str(b), str(a), "--kind", "submitted")
    at = json.loads(httk(world, "workspace", "status", str(a), "--at", f"@{before}", "--json").stdout)
    assert at["history"]["collected"] is False and at["history"]["truncated_jobs"] == 0
    assert at["history"]["complete_since"] is None
    assert (at["counts"]["submitted"], at["counts"]["succeeded"], at["counts"]["failed"]) == (1, 1, 1)
    assert at["arrived_later"]["jobs"] == 1 and at["arrived_later"]["first"] > middle
    # While it was in ws-b, ws-a had it no more.
    assert json.loads(httk(world, "workspace", "status", str(a), "--at", f"@{middle}", "--json").stdout
                      )["counts"]["submitted"] == 0
    since = json.loads(httk(world, "workspace", "diff", str(a), "--since", f"@{before}", "--json").stdout)
    assert since["history"]["collected"] is False
    # ws-b saw the job arrive and leave; before its arrival it was not there, and that is no refusal either.
    there = httk(world, "workspace", "status", str(b), "--at", f"@{before}")
    assert "arrived by transfer later" in there.stderr and "collected" not in there.stderr
    moves = json.loads(httk(world, "workspace", "diff", str(b), "--since", f"@{before}", "--json").stdout)
    assert [(row["from"], row["to"]) for row in moves["transitions"]] == [("arrived", "left")]


def test_nothing_to_transfer_names_the_jobs_the_default_kinds_left_out(world):
    a, b = world / "ws-a", world / "ws-b"
    before = jobs_of(a)
    done = httk(world, "transfer", str(a), str(b), "--placement", "camp/later")
    assert done.stdout == (f"nothing to transfer from {a} to {b}: 1 submitted job not selected (only stopped "
                           "jobs travel by default): add --kind submitted or --job ID\n")
    report = json.loads(httk(world, "transfer", str(a), str(b), "--placement", "camp/later", "--json").stdout)
    assert report["unselected"] == {"submitted": 1} and report["transfers"] == []
    assert jobs_of(a) == before and jobs_of(b) == {}


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_after_every_step_then_repeat_or_resume(world, step):
    a, b = world / "ws-a", world / "ws-b"
    command = ["transfer", str(a), str(b), "--job", "ok", "--job", "bad"]
    scratch = world / "tmp"
    scratch.mkdir()
    killed = httk(world, *command, code=None, HTTK_WORKFLOW_TEST_STOP_AFTER=step, TMPDIR=str(scratch))
    assert killed.returncode == -9, (killed.stdout, killed.stderr)
    # A killed local transfer leaves nothing in $TMPDIR (only a relay between two remotes uses it).
    assert list(scratch.iterdir()) == [], step
    # Every job is somewhere right after the crash (a detached one still counts at the source).
    for tag in ("ok", "bad"):
        assert tag in jobs_of(a) or tag in jobs_of(b), (step, tag)
    # Odd steps resume explicitly, even ones repeat the command as it was.
    again = command + ["--resume"] if STEPS.index(step) % 2 else command
    done = httk(world, *again)
    if step == "source:retired":  # the killed run had done everything: this one moves nothing
        assert "2 jobs already transferred" in done.stdout and "nothing to do" in done.stdout, done.stdout
    else:
        assert "transferred 2 jobs" in done.stdout, done.stdout
    assert jobs_of(a) == {"later": "submitted"}, step
    assert jobs_of(b) == {"ok": "succeeded", "bad": "failed"}, step
    log = json.loads(httk(world, "job", "log", str(b), "ok", "--json").stdout)
    assert [entry["event"] for entry in log][-2:] == ["transfer_detach", "transfer_import"]
    assert json.loads(httk(world, "workspace", "fsck", str(b), "--json").stdout)["clean"] is True


def test_a_killed_transfer_is_named_by_job_why_and_status_and_its_resume_counts_every_job(world):
    a, b = world / "ws-a", world / "ws-b"
    command = ["transfer", str(a), str(b), "--job", "ok", "--job", "bad"]
    killed = httk(world, *command, code=None, HTTK_WORKFLOW_TEST_STOP_AFTER="source:bundled")
    assert killed.returncode == -9
    assert jobs_of(a)["ok"] == "transferring"
    [ledger] = [path.name for path in (a / ".httk-workflow" / "transfers").iterdir()]
    resume = f"httk workflow transfer {a} {b} --resume"
    why = httk(world, "job", "why", str(a), "ok")
    assert f"held by transfer {ledger} to {b}, unfinished at step bundled" in why.stdout, why.stdout
    assert f"'{resume}'" in why.stdout and "nothing to do" not in why.stdout
    status = httk(world, "workspace", "status", str(a))
    assert f"2 jobs held by unfinished transfer {ledger} to {b} (at step bundled): finish it with '{resume}'" \
        in status.stdout, status.stdout
    held = json.loads(httk(world, "workspace", "status", str(a), "--json").stdout)["unfinished_transfers"]
    assert [(entry["transfer_id"], len(entry["jobs"]), entry["resume"]) for entry in held] == [(ledger, 2, resume)]
    done = httk(world, *command[:3], "--resume")
    # Both jobs were in the interrupted transfer: counted by job, not by transfer.
    assert "transferred 2 jobs" in done.stdout and "all of them finished an interrupted transfer" in done.stdout, \
        done.stdout
    assert json.loads(httk(world, "workspace", "status", str(a), "--json").stdout)["unfinished_transfers"] == []


def test_repeating_a_finished_transfer_says_it_was_done_and_moves_nothing(world):
    a, b = world / "ws-a", world / "ws-b"
    first = json.loads(httk(world, "transfer", str(a), str(b), "--job", "ok", "--json").stdout)
    [moved] = first["transfers"]
    assert moved["already"] is False and moved["resumed"] is False
    before = (tree(a), tree(b))
    again = httk(world, "transfer", str(a), str(b), "--job", "ok")
    assert again.stdout == (f"1 job already transferred from {a} to {b} by {moved['transfer_id']}; "
                            "nothing to do\n"), again.stdout
    report = json.loads(httk(world, "transfer", str(a), str(b), "--job", "ok", "--json").stdout)
    [outcome] = report["transfers"]
    assert outcome["already"] is True and outcome["resumed"] is False and outcome["state"] == "retired"
    assert "already transferred" in report["summary"]
    assert (tree(a), tree(b)) == before


def test_after_a_round_trip_the_newest_transfer_says_where_the_job_is(world):
    """A job that went away, came back and went again: repeating names the last transfer, to its destination."""
    a, b, c = world / "ws-a", world / "ws-b", world / "ws-c"
    httk(world, "workspace", "init", str(c))

    def moved(source: Path, destination: Path) -> str:
        report = json.loads(httk(world, "transfer", str(source), str(destination), "--job", "later", "--json").stdout)
        return report["transfers"][0]["transfer_id"]

    moved(a, c)
    moved(c, a)
    moved(a, b)
    moved(b, a)
    last = moved(a, c)
    again = httk(world, "transfer", str(a), str(c), "--job", "later")
    assert again.stdout == f"1 job already transferred from {a} to {c} by {last}; nothing to do\n"
    # Sent on to b instead, it is not "already transferred" there: it is in c, and nothing moves.
    key = inspection.resolve_job(Workspace(c).handle, "later").key
    line = refused(world, str(a), str(b), "--job", "later")
    assert line == (f"error: job {key} is not in {a}: transfer {last} took it to {c}, not to {b}; nothing moved "
                    f"(to move it on: 'httk workflow transfer {c} {b} --job {key}')")
    assert jobs_of(c) == {"later": "submitted"} and "later" not in jobs_of(a) and "later" not in jobs_of(b)


# -- refusals: one line naming the thing and the fix, exit 2, both trees unchanged ------------------
def refused(world: Path, *args: str) -> str:
    a, b = world / "ws-a", world / "ws-b"
    before = (tree(a), tree(b))
    done = httk(world, "transfer", *args, code=2)
    assert (tree(a), tree(b)) == before, "a refused transfer changed a workspace"
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and done.stdout == ""
    return lines[-1]


def test_a_job_a_manager_owns_is_refused_naming_the_owner(world):
    a = world / "ws-a"
    store = Workspace(a).handle.store
    handle = Workspace(a).handle
    marker = inspection.resolve_job(handle, "later")
    marker, frame = store.transition(marker, store.read_job(marker).frame, Event.REGISTER)
    store.transition(marker, frame, Event.CLAIM,
                     owner=Owner(manager_id="m-0123456789ab", host="node7", lease_seconds=900.0, claimed_at=0.0))
    line = refused(world, str(a), str(world / "ws-b"), "--job", "later")
    assert "is claimed under manager m-0123456789ab on node7" in line and "pause it first" in line
    # The command the refusal suggests is accepted as given (it names the required --operator).
    suggested = shlex.split(line[line.index("('") + 2:line.rindex("')")].replace("$USER", "rar"))
    assert suggested[:3] == ["httk", "workflow", "job"], suggested
    assert "pause" in httk(world, *suggested[2:]).stdout


def test_bringing_jobs_home_before_they_stop_names_those_a_manager_owns(world):
    """`transfer kappa:runs default` run too early must not look like everything came home."""
    a, b = world / "ws-a", world / "ws-b"
    store = Workspace(a).handle.store
    marker = inspection.resolve_job(Workspace(a).handle, "later")
    marker, frame = store.transition(marker, store.read_job(marker).frame, Event.REGISTER)
    store.transition(marker, frame, Event.CLAIM,
                     owner=Owner(manager_id="m-0123456789ab", host="node7", lease_seconds=900.0, claimed_at=0.0))
    note = (f"1 claimed job stays at {a}: a manager owns it; transfer again after it stops "
            f"(see 'httk workflow workspace status {a}')")
    alone = httk(world, "transfer", str(a), str(b), "--placement", "camp/later")
    assert alone.stdout == f"nothing to transfer from {a} to {b}; {note}\n"
    report = json.loads(httk(world, "transfer", str(a), str(b), "--placement", "camp/later", "--json").stdout)
    assert report["owned"] == {"claimed": 1} and report["transfers"] == []
    done = httk(world, "transfer", str(a), str(b))  # the stopped ones travel, the claimed one is named
    assert done.stdout.startswith("transferred 2 jobs") and done.stdout.endswith(f"; {note}\n"), done.stdout
    assert jobs_of(a) == {"later": "claimed"} and jobs_of(b) == {"ok": "succeeded", "bad": "failed"}


def test_a_named_job_outside_kind_is_refused_as_outside_placement_is(world):
    a, b = world / "ws-a", world / "ws-b"
    key = inspection.resolve_job(Workspace(a).handle, "bad").key
    line = refused(world, str(a), str(b), "--job", "bad", "--kind", "succeeded", "--kind", "paused")
    assert line == f"error: job {key} is failed, not of --kind succeeded, paused; drop --kind or the job"
    httk(world, "transfer", str(a), str(b), "--job", "bad", "--kind", "failed")
    assert jobs_of(b) == {"bad": "failed"}


def test_destination_already_holding_the_job_is_refused(world):
    a, b = world / "ws-a", world / "ws-b"
    job_id = inspection.resolve_job(Workspace(a).handle, "later").job_id
    payload = prepare_job_payload(world / "copy", JobSpec(name="later", workflow="ops", runner_path="run.sh"))
    (payload / "run.sh").write_text("exit 0\n")
    submit(Workspace(b).handle, str(payload), "elsewhere", job_id=job_id, tag="later")
    line = refused(world, str(a), str(b), "--job", "later")
    assert f"{b} already holds job later--{job_id} (submitted at elsewhere)" in line


def test_a_name_clash_is_refused(world):
    a, b = world / "ws-a", world / "ws-b"
    key = inspection.resolve_job(Workspace(a).handle, "later").key
    (b / "camp" / "later" / str(key)).mkdir(parents=True)
    line = refused(world, str(a), str(b), "--job", "later")
    assert "already exists (a name clash with job later--" in line and "move it away there" in line


def test_a_runner_digest_conflict_is_refused(world):
    a, b = world / "ws-a", world / "ws-b"
    ha, hb = Workspace(a).handle, Workspace(b).handle
    (world / "r1.sh").write_text("exit 0\n")
    (world / "r2.sh").write_text("exit 1\n")
    reference = publish_runner(ha.fs, ha.layout, str(world / "r1.sh"), "shared/run.sh", durable=False)
    publish_runner(hb.fs, hb.layout, str(world / "r2.sh"), "shared/run.sh", durable=False)
    payload = prepare_job_payload(world / "pinned", JobSpec(name="pinned", workflow="ops", tag="pinned",
                                                            runner_path="shared/run.sh", runner_source="workspace",
                                                            runner_sha256=reference["sha256"]))
    submit(ha, str(payload), "camp/pinned")
    line = refused(world, str(a), str(b), "--job", "pinned")
    assert "runner store maps 'shared/run.sh' to sha256" in line and "same name, different bytes" in line
    assert "--replace" in line


def test_an_unknown_remote_and_an_unreachable_host_are_refused(world):
    a = world / "ws-a"
    line = refused(world, str(a), "nowhere:runs", "--job", "later")
    assert line == "error: no remote named 'nowhere'; see 'httk workflow remote list' and 'remote add'"
    httk(world, "remote", "add", "gone", "--template", "ssh-slurm")
    # Port 9 (discard) on this machine: nothing listens, the connection is refused at once.
    httk(world, "remote", "configure", "gone", "--set", "host=127.0.0.1", "--set", "port=9",
         "--set", "connect_timeout=3")
    done = httk(world, "transfer", str(a), "gone:runs", "--job", "later", code=2)
    assert "warning: gone:runs is unreachable" in done.stderr and "its environment was not checked" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: remote gone: ssh 127.0.0.1:9: cannot connect")
    strict = httk(world, "transfer", str(a), "gone:runs", "--job", "later", "--strict-environment", code=2)
    assert "--strict-environment needs its settings: nothing moved" in strict.stderr
    assert not (a / ".httk-workflow" / "transfers").exists() or not list((a / ".httk-workflow" / "transfers").iterdir())


def test_a_waiting_parent_needs_its_children_and_skips_are_listed(world):
    a, b = world / "ws-a", world / "ws-b"
    # A child (placement below camp/) whose parent stays behind and is not finished.
    handle = Workspace(a).handle
    parent = inspection.resolve_job(handle, "later")
    child = prepare_job_payload(world / "child", JobSpec(name="child", workflow="ops", runner_path="run.sh",
                                                         tag="child"))
    (child / "run.sh").write_text("exit 0\n")
    (child / ".httk-job").mkdir(exist_ok=True)
    (child / ".httk-job" / "parent.json").write_text(json.dumps({"job_id": parent.job_id}))
    submit(handle, str(child), "camp/child")
    line = refused(world, str(a), str(b), "--job", "child")
    assert f"is a child of job {parent.key} (submitted), which stays in {a}" in line
    assert f"add --job {parent.key}" in line
    # Chosen by kind and placement instead, the child is skipped with the same reason, and nothing moves.
    done = httk(world, "transfer", str(a), str(b), "--kind", "submitted", "--placement", "camp/child")
    assert done.stdout == f"nothing to transfer from {a} to {b}\n"
    assert done.stderr.startswith("skipped child--") and "which stays in" in done.stderr
    # Both together travel.
    httk(world, "transfer", str(a), str(b), "--job", "child", "--job", "later")
    assert {"child", "later"} <= set(jobs_of(b))


POSCAR = "Si\n5.43\n0 0.5 0.5\n0.5 0 0.5\n0.5 0.5 0\nSi\n2\nDirect\n0 0 0\n0.25 0.25 0.25\n"


def test_the_environment_check_reads_the_destination_never_this_process(world):
    a, b = world / "ws-a", world / "ws-b"
    (world / "POSCAR").write_text(POSCAR)
    httk(world, "job", "new", "--workflow", "vasp-relax", "--input", f"structure={world / 'POSCAR'}", "--tag", "si",
         str(a))
    # This process has HTTK_VASP_COMMAND, the destination has no vasp.command: strict refuses, nothing moves.
    before = (tree(a), tree(b))
    strict = httk(world, "transfer", str(a), str(b), "--job", "si", "--strict-environment", code=2,
                  HTTK_VASP_COMMAND="vasp_std")
    assert (tree(a), tree(b)) == before
    assert strict.stderr.strip().splitlines()[-1] == (
        f"error: job {strict_key(a)}: setting vasp.command resolves to nothing at {b} (no job input, no setting "
        f"there, no declared default); set it with 'httk workflow workspace settings set {b} vasp.command VALUE'; "
        "--strict-environment refuses: nothing moved")
    # The destination's own setting resolves it; the optional ones without a default are only reported.
    httk(world, "workspace", "settings", "set", str(b), "vasp.command", '"srun vasp_std"')
    report = json.loads(httk(world, "transfer", str(a), str(b), "--job", "si", "--strict-environment",
                             "--json").stdout)
    statuses = {entry["setting"]: entry["status"] for entry in report["environment"]}
    assert statuses == {"vasp.command": "destination setting", "vasp.potcar_library": "unset",
                        "vasp.magnetic_moments": "unset", "vasp.timeout": "unset"}
    assert report["warnings"] == [] and jobs_of(b)["si"] == "submitted"


def strict_key(root: Path) -> str:
    return str(inspection.resolve_job(Workspace(root).handle, "si").key)


def test_without_strict_an_unresolved_setting_is_one_warning_and_the_job_travels(world):
    a, b = world / "ws-a", world / "ws-b"
    (world / "POSCAR").write_text(POSCAR)
    httk(world, "job", "new", "--workflow", "vasp-relax", "--input", f"structure={world / 'POSCAR'}", "--tag", "si",
         str(a))
    done = httk(world, "transfer", str(a), str(b), "--job", "si")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "setting vasp.command resolves to nothing" in warnings[0]
    assert jobs_of(b)["si"] == "submitted"
    # The shipped runner came along: the destination's store has it under its name.
    assert (b / ".httk-workflow" / "runners" / "names" / "shipped" / "vasp-relax.json").is_file()


def test_progress_goes_to_a_terminal_only(world):
    import pty

    a, b = world / "ws-a", world / "ws-b"
    master, slave = pty.openpty()
    try:
        done = subprocess.run([HTTK, "workflow", "transfer", str(a), str(b)], stdout=subprocess.PIPE, stderr=slave,
                              env=env_for(world), timeout=120, check=False, text=True)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert done.returncode == 0
    shown = b"".join(chunks).decode()
    assert ": send 2 jobs, " in shown and " / " in shown and ": retire 2 jobs" in shown
    assert done.stdout.startswith("transferred 2 jobs")
    # Without a terminal, stderr stays empty.
    back = httk(world, "transfer", str(b), str(a))
    assert back.stderr == "" and back.stdout.startswith("transferred 2 jobs")
