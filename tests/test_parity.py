"""One campaign, once in Python and once in Bash, through the real manager: everything left behind is equal.

The campaign exercises the authoring surface of the parity table: a declaration
observed and refined, job state set, merged and read back, run-log notes,
headlines and file attachments, a supervised program and its report, a workdir
batch, transactional data put and removed, three spawned children gathered with
``all_terminal``, a child that fails, an advance with state, and a terminal
failure of the campaign. Each language runs in its own workspace; the two
workspaces are compared file by file — payloads with their ``.httk-job/``,
workdirs with their run logs, data directories, the outcome of every attempt,
the markers and the state frames — after replacing only identifiers (uuids,
job keys, attempt ids, the workspace root, the runner reference) and timestamps
(spec 002: "a Bash runner and a Python runner publish the same bytes").
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from httk.workflow.bootstrap import build_manager, default_container
from httk.workflow.engine.manager import ManagerConfig
from httk.workflow.operations import inspection
from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
UUID = rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
MARKER = re.compile(r"^(?P<key>[^.]+)\.p(?P<priority>-?\d+)\.g(?P<generation>[0-9a-z]+)\.")
TIMES = re.compile(rb'"(time|created_at|started_at|ended_at|duration|claimed_at)":-?[0-9][0-9.eE+-]*')
RUNNER = re.compile(rb'"runner":\{[^{}]*\}')
ATTEMPT_NOISE = {"context.json", "stdout.log", "stderr.log", "runner"}

PYTHON_RUNNER = '''\
"""The parity campaign in Python."""

from httk.workflow import ChildSpec, Runner
from httk.workflow.supervision import ProcessSupervisor

run = Runner("parity")


@run.step
def start(a):
    a.declare("workflow", {"outputs": {"items": 3}})
    a.state["phase"] = "start"
    a.log.append("start", "spawning 3 items")
    a.log.append("plan", "3 items", kind="headline")
    (a.workdir / "plan.txt").write_text("items 0 1 2\\n")
    a.put("plan.txt", "plan.txt")
    (a.workdir / "incar.src").write_text("ENCUT = 520\\n")
    with a.workdir_batch() as batch:
        batch.write("INCAR", (a.workdir / "incar.src").read_bytes())
        batch.remove("incar.src")
    ProcessSupervisor(["sh", "-c", "echo prepared"], report_path="prepare-report.json").run()
    for item in range(3):
        a.spawn(ChildSpec(step="work", inputs={"item": item}, maximum_attempts_per_activation=1), label=f"item-{item}")
    a.gather("collect", when="all_terminal", on_impossible="triage")


@run.step
def work(a):
    item = a.input("item")
    if item == 1:
        a.fail("work_failed", f"item {item} failed", details={"item": item})
        return
    (a.workdir / "result.txt").write_text(f"item {item} value {item * 10}\\n")
    a.log.append("result", "item result", kind="files", files=["result.txt"])
    a.state["value"] = item * 10
    a.put("result.txt", f"results/item-{item}.txt")
    a.succeed()


@run.step
def collect(a):
    succeeded = [child.label for child in a.children.succeeded]
    lines = [f"{child.label}: {(child.workdir / 'result.txt').read_text()}" for child in a.children.succeeded]
    (a.workdir / "summary.txt").write_text("".join(lines))
    a.put("summary.txt", "summary.txt")
    a.remove("plan.txt")
    a.state.merge({"phase": "collect", "succeeded": succeeded})
    failed = [child.label for child in a.children.failed]
    if failed:
        a.advance("triage", state={"failed": failed})
    else:
        a.succeed()


@run.step
def triage(a):
    failed = a.state["failed"]
    a.declare("workflow", {**a.declaration("workflow"), "failed": len(failed)})
    a.log.append("triage", f"{len(failed)} of 3 items failed", kind="headline")
    a.fail("campaign_incomplete", "not every item succeeded", details={"failed": failed})


if __name__ == "__main__":
    raise SystemExit(run.main())
'''

BASH_RUNNER = r"""#!/usr/bin/env bash
# The parity campaign in Bash.
set -euo pipefail
source "$HTTK_WORKFLOW_SHELL_LIB"

httk_workflow_runner parity start work collect triage

step_start() {
    local item
    httk_workflow_declare workflow '{"outputs": {"items": 3}}'
    httk_workflow_state_set phase '"start"'
    httk_workflow_runlog_note start "spawning 3 items"
    httk_workflow_runlog_headline plan "3 items"
    printf 'items 0 1 2\n' >plan.txt
    httk_workflow_put plan.txt plan.txt
    printf 'ENCUT = 520\n' >incar.src
    httk_workflow_workdir_apply --write INCAR incar.src --remove incar.src
    httk_workflow_run --report prepare-report.json -- sh -c 'echo prepared'
    for item in 0 1 2; do
        httk_workflow_spawn --label "item-$item" --step work --input "item=$item" \
            --maximum-attempts-per-activation 1 >/dev/null
    done
    httk_workflow_gather collect --when all_terminal --on-impossible triage
}

step_work() {
    local item
    item=$(httk_workflow_input item)
    if ((item == 1)); then
        httk_workflow_fail work_failed "item $item failed" --details "{\"item\": $item}"
        return
    fi
    printf 'item %s value %s\n' "$item" "$((item * 10))" >result.txt
    httk_workflow_runlog_append result "item result" result.txt
    httk_workflow_state_set value "$((item * 10))"
    httk_workflow_put result.txt "results/item-$item.txt"
    httk_workflow_succeed
}

step_collect() {
    local label succeeded="" failed=""
    : >summary.txt
    for label in $(httk_workflow_children --succeeded); do
        { printf '%s: ' "$label"; cat "$(httk_workflow_child "$label" workdir)/result.txt"; } >>summary.txt
        succeeded+="${succeeded:+,}\"$label\""
    done
    httk_workflow_put summary.txt summary.txt
    httk_workflow_remove plan.txt
    httk_workflow_state_merge "{\"phase\": \"collect\", \"succeeded\": [$succeeded]}"
    for label in $(httk_workflow_children --failed); do
        failed+="${failed:+,}\"$label\""
    done
    if [[ -n $failed ]]; then
        httk_workflow_advance triage --state "{\"failed\": [$failed]}"
    else
        httk_workflow_succeed
    fi
}

step_triage() {
    local failed observed labels=()
    failed=$(httk_workflow_state_get failed)
    IFS=, read -ra labels <<<"${failed//[\[\]\"]/}"
    # The declaration reads back as canonical JSON, so one more member goes before its closing brace.
    observed=$(httk_workflow_declaration workflow)
    httk_workflow_declare workflow "${observed%\}},\"failed\":${#labels[@]}}"
    httk_workflow_runlog_headline triage "${#labels[@]} of 3 items failed"
    httk_workflow_fail campaign_incomplete "not every item succeeded" --details "{\"failed\": $failed}"
}

httk_workflow_main "$@"
"""


def run_campaign(root: Path, runner_text: str, runner_name: str, members: dict[str, Any] | None = None) -> Workspace:
    """Publish the runner, submit the campaign job, and run a real manager until it is idle.

    ``members`` replace the parity campaign's own JobSpec members (``parameters`` its ``inputs``).
    """
    workspace = Workspace.init(root)
    source = root.parent / f"{root.name}-{runner_name}"
    source.write_text(runner_text, encoding="utf-8")
    reference = workspace.publish_runner(source, name=f"parity/{runner_name}")
    spec: dict[str, Any] = {
        "name": "Parity campaign",
        "workflow": "parity",
        "initial_step": "start",
        "inputs": {"items": 3},
        "data_mode": "transactional",
        "tag": "campaign",
    }
    if members and "parameters" in members:
        del spec["inputs"]
    spec.update(members or {})
    with tempfile.TemporaryDirectory() as scratch:
        payload = prepare_job_payload(
            Path(scratch) / "campaign",
            JobSpec(
                runner_source="workspace",
                runner_path=str(reference["path"]),
                runner_sha256=str(reference["sha256"]),
                **spec,
            ),
        )
        (payload / "input.txt").write_text("structure\n", encoding="utf-8")
        workspace.submit(payload, "project/parity")
    assert build_manager(default_container(), workspace.handle, ManagerConfig(workers=2)).run() == 0
    return workspace


def job_ids(root: Path) -> dict[str, tuple[str, str, int, str]]:
    """job id -> (tag, kind, priority, generation) from the markers, the truth of each job."""
    jobs = {}
    for marker in (root / ".httk-workflow" / "state").rglob("*"):
        if marker.is_file():
            match = MARKER.match(marker.name)
            assert match, marker.name
            tag, _, job_id = match["key"].rpartition("--")
            kind = marker.relative_to(root / ".httk-workflow" / "state").parts[0]
            jobs[job_id] = (tag, kind, int(match["priority"]), match["generation"])
    return jobs


def normalize(data: bytes, root: Path, jobs: dict[str, tuple[str, str, int, str]]) -> bytes:
    """Identifiers and timestamps replaced; every other byte kept."""
    data = data.replace(str(root).encode(), b"<workspace>")
    for job_id, (tag, *_rest) in jobs.items():
        data = data.replace(job_id.encode(), f"<job {tag}>".encode())
    data = re.sub(UUID, b"<uuid>", data)
    data = re.sub(rb"\bm-[0-9a-f]{12}\b", b"<manager>", data)  # a manager id differs per run, like a uuid
    data = TIMES.sub(rb'"\1":"<time>"', data)
    return RUNNER.sub(b'"runner":"<runner>"', data)


def files(base: Path, label: str, root: Path, jobs: dict[str, Any], skip: set[str] = frozenset()) -> dict[str, bytes]:
    found = {}
    for path in sorted(base.rglob("*")):
        relative = path.relative_to(base)
        if path.is_file() and not skip & set(relative.parts):
            name = normalize(f"{label}/{relative.as_posix()}".encode(), root, jobs).decode()
            found[name] = normalize(path.read_bytes(), root, jobs)
    return found


def snapshot(workspace: Workspace) -> dict[str, Any]:
    """Everything a campaign left behind, keyed by job tag instead of job id."""
    root = Path(workspace.path)
    control = root / ".httk-workflow"
    jobs = job_ids(root)
    left: dict[str, Any] = {"markers": sorted(jobs.values()), "files": {}, "frames": {}}
    left["files"].update(files(root / "project", "payloads", root, jobs))
    for job_id, (tag, *_rest) in jobs.items():
        left["files"].update(files(control / "workdirs" / job_id, f"workdirs/{tag}", root, jobs))
        left["files"].update(files(control / "data" / job_id, f"data/{tag}", root, jobs))
        for attempt in sorted((control / "attempts" / job_id).iterdir()):
            label = f"attempts/{tag}/{attempt.name.split('-')[0]}"
            left["files"].update(files(attempt, label, root, jobs, skip=ATTEMPT_NOISE))
        marker = inspection.resolve_job(workspace.handle, job_id)
        left["frames"][tag] = [
            normalize(
                repr([frame.get(key) for key in ("event", "kind", "step", "failure", "join", "runner_steps")]).encode(),
                root,
                jobs,
            )
            for frame in inspection.job_log(workspace.handle, marker)
        ]
    return left


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("parity")
    patch = pytest.MonkeyPatch()
    patch.setenv("HTTK_WORKFLOW_PYTHON", sys.executable)  # the bridge's interpreter, as a deployment sets it
    try:
        return {
            "python": snapshot(run_campaign(base / "python", PYTHON_RUNNER, "run.py")),
            "bash": snapshot(run_campaign(base / "bash", BASH_RUNNER, "run.sh")),
        }
    finally:
        patch.undo()


def test_the_campaign_ran_as_designed(campaigns):
    python = campaigns["python"]
    kinds = {tag: kind for tag, kind, *_ in python["markers"]}
    assert kinds == {"campaign": "failed", "item-0": "succeeded", "item-1": "failed", "item-2": "succeeded"}
    names = set(python["files"])
    payload = "payloads/parity/campaign--<job campaign>"
    for expected in (
        f"{payload}/.httk-job/state.json",
        f"{payload}/.httk-job/declarations/workflow.json",
        f"{payload}/.httk-job/runner-steps.json",
        "payloads/parity/item-1--<job item-1>/job.json",
        "data/campaign/current/summary.txt",
        "data/item-0/current/results/item-0.txt",
        "workdirs/campaign/INCAR",
        "workdirs/campaign/prepare-report.json",
        "workdirs/campaign/.httk-runner/runlog.jsonl",
        "workdirs/item-2/.httk-runner/runlog.jsonl",
        "attempts/campaign/0001/outcome.ready/children/spawn.json",
        "attempts/campaign/0003/outcome.ready/outcome.json",
    ):
        assert expected in names, sorted(names)
    assert "data/campaign/current/plan.txt" not in names and "workdirs/campaign/incar.src" not in names
    assert python["files"]["workdirs/campaign/summary.txt"] == b"item-0: item 0 value 0\nitem-2: item 2 value 20\n"
    assert b"campaign_incomplete" in python["frames"]["campaign"][-1]
    assert b"work_failed" in python["frames"]["item-1"][-1]


def test_normalizing_replaces_only_identifiers_and_timestamps(tmp_path):
    jobs = {"0123abcd-0000-4000-8000-000000000000": ("item-0", "succeeded", 0, "5")}
    raw = (
        b'{"cwd":"' + str(tmp_path).encode() + b'/w","job_id":"0123abcd-0000-4000-8000-000000000000",'
        b'"attempt_id":"ffffffff-0000-4000-8000-000000000000","time":1700000000.25,"energy":-1.5,'
        b'"runner":{"path":"p","sha256":"ab","source":"workspace"}}\n'
    )
    assert normalize(raw, tmp_path, jobs) == (
        b'{"cwd":"<workspace>/w","job_id":"<job item-0>","attempt_id":"<uuid>","time":"<time>","energy":-1.5,'
        b'"runner":"<runner>"}\n'
    )


def test_both_languages_left_the_same_markers_and_frames(campaigns):
    assert campaigns["bash"]["markers"] == campaigns["python"]["markers"]
    assert campaigns["bash"]["frames"] == campaigns["python"]["frames"]


def test_both_languages_left_the_same_files_byte_for_byte(campaigns):
    python, bash = campaigns["python"]["files"], campaigns["bash"]["files"]
    assert sorted(bash) == sorted(python)
    different = [name for name in python if python[name] != bash[name]]
    assert different == [], {name: (python[name], bash[name]) for name in different}


# --------------------------------------------------------------------------- the httk-workflow 2.1 spellings

SEED_PYTHON = """\
from httk.workflow import ChildSpec, Runner

run = Runner("greeter")


@run.step
def start(a):
    a.log.append("note", f"{a.input('greeting')}: one child")
    a.spawn(ChildSpec(step="work", inputs={"name": "alpha", "size": 2}), label="kid")
    a.gather("collect")


@run.step
def collect(a):
    a.advance("done", state={"child": a.children["kid"].label, "greeting": a.input("greeting"),
                             "level": a.inputs["level"], "missing": a.input("missing", "none")})


@run.step
def done(a):
    a.log.append("note", f"done after {a.state['child']}")
    a.succeed()


@run.step
def work(a):
    a.advance("finish", state={"name": a.input("name"), "size": a.input("size")})


@run.step
def finish(a):
    a.log.append("note", f"{a.state['name']} finished")
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
"""

#: The seed spellings of SEED_PYTHON and their httk-workflow 2.1 replacements: the ``parameters=`` keyword
#: of ChildSpec (``Attempt.parameter``/``parameters`` are gone: the parity table of spec 002 has no row for them).
SPELLINGS_21_PYTHON = {"inputs={": "parameters={"}


def respell(text: str, renames: dict[str, str]) -> str:
    """``text`` with every seed spelling of ``renames`` replaced; each one must occur, so none is missed silently."""
    for seed, spelled in renames.items():
        assert seed in text, f"the seed runner no longer uses {seed!r}"
        text = text.replace(seed, spelled)
    return text


#: The same runner as SEED_PYTHON, written in the httk-workflow 2.1 spellings.
SPELLED_21_PYTHON = respell(SEED_PYTHON, SPELLINGS_21_PYTHON)

SEED_BASH = r"""#!/usr/bin/env bash
set -euo pipefail
source "$HTTK_WORKFLOW_SHELL_LIB"

httk_workflow_runner greeter start collect done work finish

step_start() {
    httk_workflow_runlog_note note "$(httk_workflow_input greeting): one child"
    httk_workflow_spawn --label kid --step work --input 'name="alpha"' --input 'size=2' >/dev/null
    httk_workflow_gather collect
}

step_collect() {
    local child greeting level missing
    child=$(httk_workflow_child kid label)
    greeting=$(httk_workflow_input greeting)
    level=$(httk_workflow_input level)
    missing=$(httk_workflow_input missing none)
    httk_workflow_advance done --state \
        "{\"child\": \"$child\", \"greeting\": \"$greeting\", \"level\": $level, \"missing\": \"$missing\"}"
}

step_done() {
    httk_workflow_runlog_note note "done after $(httk_workflow_state_get child)"
    httk_workflow_succeed
}

step_work() {
    local name size
    name=$(httk_workflow_input name)
    size=$(httk_workflow_input size)
    httk_workflow_advance finish --state "{\"name\": \"$name\", \"size\": $size}"
}

step_finish() {
    httk_workflow_runlog_note note "$(httk_workflow_state_get name) finished"
    httk_workflow_succeed
}

httk_workflow_main "$@"
"""

#: The same runner as SEED_BASH, written in the httk-workflow 2.1 spellings.
SPELLED_21_BASH = r"""#!/usr/bin/env bash
set -euo pipefail
source "$HTTK_WORKFLOW_BASH_API"

httk_workflow_runner greeter start collect done work finish

step_start() {
    httk_workflow_runlog_note "$(httk_workflow_input greeting): one child"
    httk_workflow_spawn --label kid --step work --input name=alpha --input size=2 >/dev/null
    httk_workflow_gather collect
}

step_collect() {
    httk_workflow_advance done --state "child=$(httk_workflow_child kid label)" \
        --state "greeting=$(httk_workflow_input greeting)" --state "level=$(httk_workflow_input level)" \
        --state "missing=$(httk_workflow_input missing none)"
}

step_done() {
    httk_workflow_runlog_note "done after $(httk_workflow_state_get child)"
    httk_workflow_succeed
}

step_work() {
    httk_workflow_advance finish --state "name=$(httk_workflow_input name)" \
        --state "size=$(httk_workflow_input size)"
}

step_finish() {
    httk_workflow_runlog_note "$(httk_workflow_state_get name) finished"
    httk_workflow_succeed
}

httk_workflow_main "$@"
"""

GREETER = {"name": "Greeter", "workflow": "greeter", "data_mode": "none", "tag": "greeter"}
GREETER_INPUTS = {"greeting": "hello", "level": 3}


@pytest.fixture(scope="module")
def spellings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The greeter job run four times: seed and 2.1 spellings, each in Python and in Bash."""
    base = tmp_path_factory.mktemp("spellings")
    patch = pytest.MonkeyPatch()
    patch.setenv("HTTK_WORKFLOW_PYTHON", sys.executable)
    patch.delenv("HTTK_WORKFLOW_BASH_API", raising=False)  # only the manager may provide it
    seed = {**GREETER, "inputs": GREETER_INPUTS}
    spelled = {**GREETER, "parameters": GREETER_INPUTS}  # JobSpec(parameters=...), the 2.1 keyword
    try:
        return {
            "seed-python": snapshot(run_campaign(base / "seed-python", SEED_PYTHON, "run.py", seed)),
            "2.1-python": snapshot(run_campaign(base / "21-python", SPELLED_21_PYTHON, "run.py", spelled)),
            "seed-bash": snapshot(run_campaign(base / "seed-bash", SEED_BASH, "run.sh", seed)),
            "2.1-bash": snapshot(run_campaign(base / "21-bash", SPELLED_21_BASH, "run.sh", spelled)),
        }
    finally:
        patch.undo()


def test_the_greeter_ran_as_designed(spellings):
    seed = spellings["seed-python"]
    assert {tag: kind for tag, kind, *_ in seed["markers"]} == {"greeter": "succeeded", "kid": "succeeded"}
    files = seed["files"]
    parent, child = "payloads/parity/greeter--<job greeter>", "payloads/parity/kid--<job kid>"
    assert json.loads(files[f"{parent}/.httk-job/state.json"]) == {
        "child": "kid", "greeting": "hello", "level": 3, "missing": "none"
    }
    assert json.loads(files[f"{child}/.httk-job/state.json"]) == {"name": "alpha", "size": 2}
    assert json.loads(files[f"{child}/job.json"])["inputs"] == {"name": "alpha", "size": 2}
    assert json.loads(files[f"{parent}/job.json"])["inputs"] == GREETER_INPUTS
    notes = [json.loads(line) for line in files["workdirs/greeter/.httk-runner/runlog.jsonl"].splitlines()]
    assert [(note["label"], note["message"]) for note in notes] == [
        ("note", "hello: one child"), ("note", "done after kid")
    ]


@pytest.mark.parametrize("variant", ["2.1-python", "seed-bash", "2.1-bash"])
def test_runners_in_the_2_1_spellings_publish_the_seed_spelled_bytes(spellings, variant):
    """Outcomes, job state, the child's job.json, run logs, markers and frames: equal byte for byte."""
    seed, other = spellings["seed-python"], spellings[variant]
    assert other["markers"] == seed["markers"]
    assert other["frames"] == seed["frames"]
    assert sorted(other["files"]) == sorted(seed["files"])
    different = [name for name in seed["files"] if seed["files"][name] != other["files"][name]]
    assert different == [], {name: (seed["files"][name], other["files"][name]) for name in different}
    assert any(name.endswith("outcome.ready/outcome.json") for name in seed["files"])
