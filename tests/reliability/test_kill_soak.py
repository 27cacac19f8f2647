"""A kill -9 soak with real processes (issue 10, "A standing campaign in the test suite").

One to three ``httk workflow run`` managers (short leases) serve one real
workspace of transactional jobs: parents that spawn children and gather them,
and jobs that advance through several steps. Every step of every job reads the
committed ``counter`` of its data and stages ``counter + 1``, so a transaction
applied twice, or lost, shows in the count; every attempt holds an exclusive
``flock`` on its persistent workdir, so two live attempts of one job are seen.
Managers are SIGKILLed at random moments and restarted (runners outlive them by
design) until the profile's kills are done and every job is terminal. Then:

- every job is terminal exactly once: one marker, one terminal frame in its chain
  (or quarantined with a reason), and here every job succeeds;
- no transaction applied twice: the counter equals the steps, the committed
  attempts put 1..N once each, and every replaced copy in the trash holds the
  value before its own put (never a copy of itself);
- no concurrent run of one job, and exactly the spawned children exist;
- nothing written outside the workspace;
- every manager exit designed: ``0`` (idle) unless this test killed it, and no traceback;
- ``workspace fsck`` clean, or clean after ``--repair``.

The ``ci`` profile kills 10 times in one round; ``soak`` runs 10 rounds of 10
(``HTTK_RELIABILITY_PROFILE=soak``). Figures: docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from reliability_support import BASE_SEED, KILLS, PROFILE

from httk.workflow.domain.lifecycle import TERMINAL_KINDS, StateKind
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.workspace import Workspace

BIN = Path(sys.executable).parent
HTTK = str(BIN / "httk")
KILLS_PER_ROUND = 10
ROUND_SECONDS = 300.0

RUNNER = r'''
import fcntl, os, random, time
from httk.workflow import ChildSpec, Runner

run = Runner("soak")
_held = []


def guard(a):
    """Hold an exclusive lock on the job's workdir for the whole attempt; a second live attempt is recorded."""
    fd = os.open(os.path.join(a.workdir, ".soak-lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        with open(os.path.join(a.workdir, "violations.log"), "a") as out:
            out.write(f"attempt {a.context.attempt_id} of step {a.step} ran while another attempt did\n")
        fcntl.flock(fd, fcntl.LOCK_EX)
    _held.append(fd)
    time.sleep(random.uniform(0.02, 0.3))


def bump(a):
    """Stage the committed counter plus one: applied exactly once, or the count is off."""
    path = a.data / "counter"
    value = int(path.read_text()) if path.exists() else 0
    staged = a.workdir / f"counter-{a.context.attempt_id}"
    staged.write_text(f"{value + 1}\n")
    a.put(staged, "counter")
    return value + 1


@run.step
def main(a):
    guard(a)
    kids = a.input("kids", 0)
    if kids:
        for index in range(kids):
            a.spawn(ChildSpec(step="main", inputs={"steps": 2}, maximum_attempts_per_activation=20),
                    label=f"k{index}")
        bump(a)
        a.gather("gathered")
    elif bump(a) < a.input("steps"):
        a.advance("main")
    else:
        a.succeed()


@run.step
def gathered(a):
    guard(a)
    got = len(a.children.succeeded)
    if got != a.input("kids"):
        a.fail("lost_children", f"{got} of {a.input('kids')} children succeeded")
        return
    bump(a)
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
'''


@attrs.define
class Started:
    """One manager process and what became of it."""

    popen: subprocess.Popen[bytes]
    stderr: Path
    killed: bool = False
    status: int | None = None


class Soak:
    """One round: a real workspace, a stream of jobs, managers killed and restarted."""

    def __init__(self, tmp: Path, rng: random.Random) -> None:
        self.tmp, self.rng = tmp, rng
        self.root = tmp / "ws"
        self.logs = tmp / "logs"
        self.logs.mkdir()
        (tmp / "outside").mkdir()
        (tmp / "outside" / "secret.txt").write_text("outside\n")
        (tmp / "cwd").mkdir()
        self.workspace = Workspace.init(self.root)  # durable, the default
        runner = tmp / "soak.py"
        runner.write_text(RUNNER)
        self.runner = self.workspace.publish_runner(runner, "soak.py")
        self.env = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp / "home"), "LC_ALL": "C.UTF-8",
                    "XDG_DATA_HOME": str(tmp / "xdg"), "XDG_CONFIG_HOME": str(tmp / "xdg-config"),
                    "PYTHONUNBUFFERED": "1"}
        self.expected: dict[str, int] = {}  # job id -> counter it must end with (parents: 2)
        self.kids: dict[str, int] = {}  # parent id -> children it spawns
        self.managers: list[Started] = []
        self.kills = 0
        self._jobs = 0

    # -- work and managers ---------------------------------------------------------------------
    def submit_wave(self, parents: int, steppers: int) -> None:
        for index in range(parents + steppers):
            self._jobs += 1
            kids = 3 if index < parents else 0
            inputs = {"kids": kids} if kids else {"steps": 3}
            spec = JobSpec(name=f"soak{self._jobs}", workflow="soak", runner_path="soak.py",
                           runner_source="workspace", runner_sha256=self.runner["sha256"], inputs=inputs,
                           data_mode="transactional", maximum_attempts_per_activation=20)
            payload = self.tmp / "payloads" / str(self._jobs)
            prepare_job_payload(payload, spec, durable=False)
            job_id = self.workspace.submit(payload, f"soak/w{self._jobs % 3}").job_id
            self.expected[job_id] = 2 if kids else 3
            if kids:
                self.kids[job_id] = kids

    def start(self) -> None:
        number = len(self.managers)
        stderr = self.logs / f"{number}.stderr"
        lease = self.rng.choice(("1", "1.5", "2"))
        argv = [HTTK, "workflow", "run", str(self.root), "--lease-seconds", lease, "--workers", "2"]
        with open(self.logs / f"{number}.stdout", "wb") as out, open(stderr, "wb") as err:
            popen = subprocess.Popen(argv, stdout=out, stderr=err, env=self.env, cwd=self.tmp / "cwd",
                                     start_new_session=True)
        self.managers.append(Started(popen, stderr))

    def live(self) -> list[Started]:
        for manager in self.managers:
            if manager.status is None and manager.popen.poll() is not None:
                manager.status = manager.popen.returncode
        return [manager for manager in self.managers if manager.status is None]

    def kill_one(self) -> None:
        victim = self.rng.choice(self.live())
        victim.killed = True
        os.kill(victim.popen.pid, signal.SIGKILL)
        victim.popen.wait(10)
        self.kills += 1

    def markers(self) -> dict[str, list[Any]]:
        store = Workspace(self.root).handle.store
        found: dict[str, list[Any]] = {}
        for kind in StateKind:
            for marker in store.iter_markers(kind):
                found.setdefault(marker.job_id, []).append(marker)
        return found

    def all_terminal(self) -> bool:
        return all(marker.kind in TERMINAL_KINDS for markers in self.markers().values() for marker in markers)

    def run(self, kills: int) -> None:
        """Keep 1-3 managers serving, kill one every 0.1-1.2 s, until ``kills`` and every job is terminal."""
        deadline = time.monotonic() + ROUND_SECONDS
        want = self.rng.randint(1, 3)
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"the round did not finish within {ROUND_SECONDS:.0f}s: {self._stuck()}")
            live = self.live()
            if self.kills >= kills and self.all_terminal():
                break
            if self.kills < kills and not live and self.all_terminal():
                self.submit_wave(1, 2)  # the work ran out before the kills: more of it
            if self.rng.random() < 0.2:
                want = self.rng.randint(1, 3)
            for _ in range(want - len(live)):
                self.start()
            time.sleep(self.rng.uniform(0.1, 1.2))
            if self.kills < kills and self.live():
                self.kill_one()
        for manager in self.live():
            manager.status = manager.popen.wait(60)
        final = subprocess.run([HTTK, "workflow", "run", str(self.root), "--lease-seconds", "1"], env=self.env,
                               capture_output=True, text=True, timeout=120, check=False)
        assert final.returncode == 0 and "Traceback" not in final.stderr, f"the last manager: {final.stderr[-800:]}"
        self._wait_for_runners()

    def _stuck(self) -> str:
        stuck = {job: [marker.relative_path() for marker in markers]
                 for job, markers in self.markers().items() if any(m.kind not in TERMINAL_KINDS for m in markers)}
        return f"{len(stuck)} job(s) not terminal, e.g. {list(stuck.items())[:3]}; kills {self.kills}"

    def _wait_for_runners(self, timeout: float = 30.0) -> None:
        """Runners outlive a killed manager by design; all of them must be gone once every job is terminal."""
        needle = f"HTTK_WORKFLOW_WORKSPACE_DIR={self.root}".encode()
        deadline = time.monotonic() + timeout
        while True:
            alive = []
            for name in os.listdir("/proc"):
                try:
                    if name.isdigit() and needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                        stat = Path(f"/proc/{name}/stat").read_bytes()
                        if stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X"):
                            alive.append(int(name))
                except OSError:
                    continue
            if not alive:
                return
            if time.monotonic() > deadline:
                for pid in alive:
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"runner processes {alive} outlived every job being terminal")
            time.sleep(0.2)

    def cleanup(self) -> None:
        for manager in self.live():
            manager.popen.kill()
            manager.popen.wait(10)
        try:
            self._wait_for_runners(timeout=0)
        except AssertionError:
            pass

    # -- the invariants ---------------------------------------------------------------------------
    def check(self) -> dict[str, Any]:
        handle = Workspace(self.root).handle
        layout, reader = handle.layout, handle.store.reader
        problems: list[str] = []
        markers = self.markers()
        quarantined = _quarantined(Path(layout.quarantine))
        parents: dict[str, list[str]] = {}
        takeovers = commits = attempts = 0
        for job_id, found in markers.items():
            if len(found) != 1:
                problems.append(f"job {job_id} has {len(found)} markers")
                continue
            marker = found[0]
            chain, ref = [], marker.ref
            while ref and ref != "init":
                chain.append(reader.read(ref))
                ref = chain[-1].get("previous_record_ref")
            terminal = [frame["generation"] for frame in chain if frame["kind"] in {k.value for k in TERMINAL_KINDS}]
            if terminal != [marker.generation]:
                problems.append(f"job {job_id}: terminal frames at generations {terminal}, marker g{marker.generation}")
            # A takeover is a frame whose ``takeover`` evidence its predecessor did not carry.
            takeovers += sum(1 for index, frame in enumerate(chain) if frame.get("takeover") and (
                index + 1 == len(chain) or chain[index + 1].get("takeover") != frame["takeover"]))
            if marker.kind != StateKind.SUCCEEDED:
                problems.append(f"job {job_id} ended {marker.kind.value}: {chain[0].get('failure') if chain else ''}")
            payload = Path(handle.store.payload_dir(marker))
            link = payload / ".httk-job" / "parent.json"
            if link.exists():
                parents.setdefault(json.loads(link.read_text())["job_id"], []).append(job_id)
            workdir = Path(layout.persistent_workdir(job_id))
            if (workdir / "violations.log").exists():
                problems.append(f"job {job_id}: {(workdir / 'violations.log').read_text().strip()}")
            applied, runs = self._ledger(handle, job_id, problems)
            commits += applied
            attempts += runs
            expected = self.expected.get(job_id, 2)  # a child advances twice
            counter = Path(layout.data_dir(job_id)) / "current" / "counter"
            value = int(counter.read_text()) if counter.exists() else 0
            if value != expected:
                problems.append(f"job {job_id}: counter {value}, expected {expected}")
        for job_id in self.expected:
            if job_id not in markers and job_id not in quarantined:
                problems.append(f"job {job_id} has no marker and no quarantine record")
        for parent, kids in self.kids.items():
            if len(parents.get(parent, [])) != kids:
                problems.append(f"parent {parent} has {len(parents.get(parent, []))} children, spawned {kids}")
        for number, manager in enumerate(self.managers):
            text = manager.stderr.read_text(errors="replace")
            if "Traceback" in text:
                problems.append(f"manager {number} printed a traceback: {text[-600:]}")
            if not manager.killed and manager.status != 0:
                problems.append(f"manager {number} exited {manager.status}: {text[-300:]}")
        assert not problems, f"{len(problems)} invariant(s) broken:\n" + "\n".join(problems[:20])
        return {"jobs": len(markers), "children": sum(len(kids) for kids in parents.values()), "attempts": attempts,
                "commits": commits, "takeovers": takeovers, "quarantined": len(quarantined),
                "managers": len(self.managers), "kills": self.kills}

    def _ledger(self, handle: Any, job_id: str, problems: list[str]) -> tuple[int, int]:
        """Each committed attempt put ``counter + 1`` once; a replaced copy holds the value before it."""
        attempts = Path(handle.layout.job_attempts(job_id))
        trash = Path(handle.layout.data_dir(job_id)) / "trash"
        values, runs = [], 0
        for control in sorted(attempts.iterdir()) if attempts.exists() else []:
            runs += 1
            if not (control / "commit" / "ops" / "op-0001").exists():
                continue
            value = int((control / "outcome.ready" / "transaction" / "files" / "op-0001").read_text())
            values.append(value)
            replaced = trash / control.name / "op-0001"
            before = int(replaced.read_text()) if replaced.exists() else 0
            if before != value - 1:
                problems.append(f"job {job_id} attempt {control.name} put {value} over {before}")
        if sorted(values) != list(range(1, len(values) + 1)):
            problems.append(f"job {job_id}: committed puts {sorted(values)}")
        return len(values), runs


def _quarantined(directory: Path) -> dict[str, str]:
    """job id -> reason of every marker fsck quarantined (each must carry one)."""
    out = {}
    for audit in directory.rglob("*.audit.json") if directory.exists() else []:
        record = json.loads(audit.read_text())
        assert record.get("message") or record.get("code"), f"quarantined without a reason: {audit}"
        out[record["job_key"].rpartition("--")[2]] = record.get("message", "")
    return out


def _outside(tmp: Path) -> dict[str, str]:
    """Every name below the test's directory except the workspace and the managers' logs."""
    found = {}
    for path in sorted(tmp.rglob("*")):
        relative = path.relative_to(tmp)
        if relative.parts[0] in ("ws", "logs", "payloads"):
            continue
        found[str(relative)] = "dir" if path.is_dir() else path.read_bytes().hex()[:32]
    return found


def _fsck(soak: Soak) -> str:
    """``workspace fsck``: clean, or clean after ``--repair``; returns which."""
    def fsck(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([HTTK, "workflow", "workspace", "fsck", str(soak.root), "--json", *extra],
                              env=soak.env, capture_output=True, text=True, timeout=120, check=False)

    first = fsck()
    if first.returncode == 0 and json.loads(first.stdout)["clean"]:
        return "clean"
    repaired = fsck("--repair")
    again = fsck()
    assert again.returncode == 0 and json.loads(again.stdout)["clean"], (
        f"fsck not clean after --repair:\n{first.stdout[-800:]}\n{repaired.stdout[-800:]}\n{again.stdout[-800:]}")
    return f"repaired ({', '.join(sorted({p['code'] for p in json.loads(first.stdout)['problems']}))})"


@pytest.mark.soak
def test_managers_killed_at_random_moments_lose_nothing_and_run_nothing_twice(tmp_path: Path):
    rounds = max(1, KILLS // KILLS_PER_ROUND)
    broken: list[str] = []
    for number in range(rounds):
        seed = BASE_SEED * 1000 + number
        directory = tmp_path / f"round{number}"
        directory.mkdir()
        soak = Soak(directory, random.Random(f"soak:{seed}"))
        started = time.monotonic()
        figures: dict[str, Any] = {}
        try:
            soak.submit_wave(3, 6)
            before = _outside(directory)
            soak.run(min(KILLS_PER_ROUND, KILLS))
            figures = soak.check()
            assert _outside(directory) == before, "something was written outside the workspace"
            figures["fsck"] = _fsck(soak)
        except AssertionError as error:  # every round runs; the test fails at the end, listing each broken one
            broken.append(f"round {number} (seed {seed}, {soak.kills} kills): {error}")
            figures["broken"] = 1
        finally:
            soak.cleanup()
        print(f"reliability soak round {number} (profile {PROFILE}, seed {seed}): " + ", ".join(
            f"{value} {name}" for name, value in figures.items()) + f", {time.monotonic() - started:.0f}s")
    assert not broken, f"{len(broken)} of {rounds} soak rounds broke an invariant:\n" + "\n".join(
        text[:1500] for text in broken)
