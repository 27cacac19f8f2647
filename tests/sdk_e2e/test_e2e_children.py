"""Spawning, gathering and reading children through real attempts.

Spec 001 "Spawning children", "Gathering them" and the ``a.children`` part of
"What an attempt reads"; spec 002 rows ChildSpec, RunnerRef, Attempt.spawn,
Attempt.children, ChildResult, Attempt.gather.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Any

import pytest

GATHER_AND_READ = """
import attrs

from httk.workflow import ChildResult, Failure

run = Runner("e2e")


@run.step
def start(a):
    a.spawn(ChildSpec(step="child", inputs={"ok": True}), label="good")
    a.spawn(ChildSpec(step="child", inputs={"ok": False}, maximum_attempts_per_activation=1), label="bad")
    a.gather("collect", when="all_terminal")


@run.step
def child(a):
    if a.input("ok"):
        (a.workdir / "result.json").write_text(json.dumps({"energy": -1.5}), encoding="utf-8")
        a.succeed()
    else:
        a.fail("child_broke", "this child fails", details={"site": 3})


def describe(child):
    return {
        "type": type(child).__name__,
        "is_child_result": isinstance(child, ChildResult),
        "label": child.label,
        "job_id": child.job_id,
        "job_key": child.job_key,
        "kind": child.kind,
        "succeeded": child.succeeded,
        "failure_is_failure": child.failure is None or isinstance(child.failure, Failure),
        "failure": None if child.failure is None else attrs.asdict(child.failure),
        "payload": str(child.payload),
        "workdir": None if child.workdir is None else str(child.workdir),
        "data": None if child.data is None else str(child.data),
        "payload_is_absolute": child.payload.is_absolute(),
    }


@run.step
def collect(a):
    children = a.children
    try:
        children["nope"]
        missing = None
    except KeyError as error:
        missing = str(error)
    save(a, {
        "count": len(children),
        "labels": list(children.labels),
        "children": [describe(child) for child in children],
        "succeeded": [child.label for child in children.succeeded],
        "failed": [child.label for child in children.failed],
        "by_label": children["good"].label,
        "by_index": children[1].label,
        "contains": ["good" in children, "nope" in children],
        "get_missing": children.get("nope"),
        "missing": missing,
        "result": json.loads((children["good"].workdir / "result.json").read_text(encoding="utf-8")),
        "codes": [child.failure.code for child in children.failed],
    })
    a.advance("after")


@run.step
def after(a):
    save(a, {"count": len(a.children), "labels": list(a.children.labels)})
    a.succeed()
"""


def test_children_are_typed_after_a_gather_and_empty_after_advance(harness) -> None:
    ref = harness.publish(GATHER_AND_READ)
    parent = harness.submit(ref, step="start", placement="proj/parent")
    harness.finish(parent, "succeeded")
    good, bad = harness.child(parent, "good"), harness.child(parent, "bad")
    assert good["kind"] == "succeeded" and bad["kind"] == "failed"
    report = harness.report(parent, 1)
    assert report["count"] == 2 and report["labels"] == ["good", "bad"]
    first, second = report["children"]
    assert first == {
        "type": "ChildResult",
        "is_child_result": True,
        "label": "good",
        "job_id": good["job_id"],
        "job_key": good["job_key"],
        "kind": "succeeded",
        "succeeded": True,
        "failure_is_failure": True,
        "failure": None,
        "payload": str(harness.payload(good["job_id"])),
        "workdir": str(harness.workdir(good["job_id"])),
        "data": first["data"],  # see test_child_data_is_none_for_a_child_without_data
        "payload_is_absolute": True,
    }
    assert second["kind"] == "failed" and second["succeeded"] is False and second["failure_is_failure"]
    assert second["failure"] == {
        "code": "child_broke",
        "message": "this child fails",
        "details": {"site": 3},
        "retryable": False,
    }
    assert second["job_key"] == bad["job_key"]
    assert report["succeeded"] == ["good"] and report["failed"] == ["bad"] and report["codes"] == ["child_broke"]
    assert report["by_label"] == "good" and report["by_index"] == "bad"
    assert report["contains"] == [True, False] and report["get_missing"] is None
    assert "no child labelled 'nope'" in report["missing"] and "bad, good" in report["missing"]
    assert report["result"] == {"energy": -1.5}  # a child's results are a plain file read
    assert harness.report(parent, 2) == {"count": 0, "labels": []}  # an advance observes no children
    context = json.loads((harness.attempts(parent)[1] / "context.json").read_text(encoding="utf-8"))
    assert [child["label"] for child in context["children"]] == ["good", "bad"]


def test_child_data_is_none_for_a_child_without_data(harness) -> None:
    ref = harness.publish(GATHER_AND_READ)
    parent = harness.submit(ref, step="start")
    assert harness.run() == 0
    first = harness.report(parent, 1)["children"][0]
    assert first["data"] is None


INHERIT = """
run = Runner("e2e")


@run.step
def start(a):
    keys = {
        "plain": a.spawn(ChildSpec(step="child", inputs={"site": 0}), label="site-0"),
        "tuned": a.spawn(
            ChildSpec(
                step="child",
                inputs={"site": 1},
                priority=-3,
                maximum_attempts_per_activation=2,
                retry_on=["node_failure"],
                name="custom name",
            ),
            label="site-1",
        ),
    }
    try:
        a.spawn(ChildSpec(step="child"), label="site-0")
    except ValueError as error:
        keys["duplicate"] = str(error)
    try:
        a.spawn(ChildSpec(step="chlid"), label="typo")
    except ValueError as error:
        keys["typo"] = str(error)
    try:
        a.gather("dnoe")
    except ValueError as error:
        keys["gather_typo"] = str(error)
    try:
        a.gather("done", on_impossible="triag")
    except ValueError as error:
        keys["on_impossible_typo"] = str(error)
    save(a, keys)
    a.gather("done")


@run.step
def child(a):
    save(a, {"site": a.input("site"), "job": a.job.name, "runner": dict(a.context.runner)})
    a.succeed()


@run.step
def done(a):
    a.succeed()
"""


def test_childspec_children_inherit_the_spawning_job(harness) -> None:
    ref = harness.publish(INHERIT)
    parent = harness.submit(
        ref,
        step="start",
        placement="proj/inherit",
        pool="e2e-pool",
        capabilities=("mpi",),
        priority=5,
        resources={"cores": 4, "memory_gb": 8},
        maximum_attempts_per_activation=4,
        retry_on=("parent_only",),
        tag="campaign",
    )
    assert harness.run(pools=("e2e-pool",), capabilities=("mpi",)) == 0
    assert harness.show(parent)["kind"] == "succeeded", harness.describe(parent)
    keys = harness.report(parent, 0)
    assert "already used on this attempt" in keys["duplicate"]
    assert "'chlid' is not a step of this runner" in keys["typo"]
    assert "gather step 'dnoe' is not a step of this runner; registered steps: child, done, start" in keys[
        "gather_typo"
    ]
    assert "on_impossible step 'triag' is not a step" in keys["on_impossible_typo"]
    parent_job = json.loads((harness.payload(parent) / "job.json").read_text(encoding="utf-8"))
    for label, key in (("site-0", keys["plain"]), ("site-1", keys["tuned"])):
        assert key.startswith(f"{label}--")  # the label becomes the child's tag
        child = harness.child(parent, label)
        assert child["job_key"] == key and child["tag"] == label
        assert child["placement"] == "proj/inherit"  # placement defaults to the spawning job's
        assert child["kind"] == "succeeded", harness.describe(key)
        document = json.loads((harness.payload(key) / "job.json").read_text(encoding="utf-8"))
        assert document["workflow"] == parent_job["workflow"] == "e2e"
        assert document["claim"] == {"pool": "e2e-pool", "capabilities": ["mpi"]}
        assert document["resources"] == {"cores": 4, "memory_gb": 8}
        assert document["runner"] == parent_job["runner"] == {
            "source": "workspace",
            "path": ref["path"],
            "sha256": ref["sha256"],
        }
        assert document["initial_step"] == "child" and document["tag"] == label
        assert document["executor"] == parent_job["executor"]
        assert document["workdir"] == parent_job["workdir"] and document["data"] == parent_job["data"]
        assert harness.report(key)["runner"] == document["runner"]
    plain = json.loads((harness.payload(keys["plain"]) / "job.json").read_text(encoding="utf-8"))
    assert plain["name"] == f"{parent_job['name']}/site-0"
    assert plain["priority"] == 5 and plain["inputs"] == {"site": 0}
    # budgets a ChildSpec leaves unset take the job-definition defaults, not the parent's
    assert plain["retry_policy"] == {
        "maximum_attempts_per_activation": 3,
        "maximum_total_attempts": None,
        "maximum_activations": None,
        "retry_on": [],
    }
    tuned = json.loads((harness.payload(keys["tuned"]) / "job.json").read_text(encoding="utf-8"))
    assert tuned["name"] == "custom name" and tuned["priority"] == -3
    assert tuned["retry_policy"]["maximum_attempts_per_activation"] == 2
    assert tuned["retry_policy"]["retry_on"] == ["node_failure"]
    link = json.loads((harness.payload(keys["plain"]) / ".httk-job" / "parent.json").read_text(encoding="utf-8"))
    assert link["job_id"] == parent.job_id and link["label"] == "site-0"


OTHER_RUNNER = """
run = Runner("other")


@run.step
def greet(a):
    (a.workdir / "greeting.txt").write_text(f"hello {a.input('who')}", encoding="utf-8")
    a.succeed()
"""

PREPARED_CHILD_RUNNER = '''
from httk.workflow import ChildSpec, Runner

run = Runner("prepared")


@run.step
def main(a):
    try:
        a.spawn(ChildSpec(step="main"), label="grandchild")
        message = None
    except ValueError as error:
        message = str(error)
    (a.workdir / "inherit-refused.txt").write_text(message or "", encoding="utf-8")
    a.succeed()


if __name__ == "__main__":
    raise SystemExit(run.main())
'''

SPAWN_KINDS = """
from httk.workflow import JobSpec, prepare_job_payload

run = Runner("e2e")

PREPARED_CHILD_RUNNER = {prepared!r}


@run.step
def start(a):
    other = RunnerRef.workspace(a.input("other_path"), a.input("other_sha256"))
    a.spawn(ChildSpec(step="greet", inputs={{"who": "world"}}, runner=other), label="shared")
    child = a.workdir / "child"
    prepare_job_payload(child, JobSpec(name="Child", workflow="prepared", runner_path="files/runner.py"))
    (child / "files").mkdir()
    (child / "files" / "runner.py").write_text(PREPARED_CHILD_RUNNER, encoding="utf-8")
    (child / "input.txt").write_text("payload file", encoding="utf-8")
    a.spawn(child, label="prepared", placement="proj/children")
    a.gather("done")


@run.step
def done(a):
    save(a, {{child.label: [child.kind, str(child.workdir)] for child in a.children}})
    a.succeed()
"""


def test_spawn_with_runner_ref_workspace_and_a_prepared_payload(harness) -> None:
    other = harness.publish(OTHER_RUNNER, name="other.py")
    ref = harness.publish(SPAWN_KINDS.format(prepared=PREPARED_CHILD_RUNNER))
    parent = harness.submit(
        ref,
        step="start",
        placement="proj/parent",
        inputs={"other_path": other["path"], "other_sha256": other["sha256"]},
    )
    harness.finish(parent, "succeeded")
    shared = harness.child(parent, "shared")
    assert shared["kind"] == "succeeded", harness.describe(shared["job_id"])
    assert shared["runner"] == {"source": "workspace", "path": other["path"], "sha256": other["sha256"]}
    assert shared["workflow"] == "e2e"  # the workflow still follows the parent; only the runner differs
    assert (harness.workdir(shared["job_id"]) / "greeting.txt").read_text(encoding="utf-8") == "hello world"
    prepared = harness.child(parent, "prepared")
    assert prepared["kind"] == "succeeded", harness.describe(prepared["job_id"])
    assert prepared["placement"] == "proj/children" and prepared["job_key"].startswith("prepared--")
    assert prepared["runner"] == {"source": "payload", "path": "files/runner.py", "sha256": None}
    payload = harness.payload(prepared["job_id"])
    assert payload.parent == harness.root / "proj" / "children"
    assert (payload / "input.txt").read_text(encoding="utf-8") == "payload file"
    workdir = harness.workdir(prepared["job_id"])
    assert "cannot inherit a payload runner" in (workdir / "inherit-refused.txt").read_text(encoding="utf-8")
    report = harness.report(parent, 1)
    assert report == {
        "shared": ["succeeded", str(harness.workdir(shared["job_id"]))],
        "prepared": ["succeeded", str(workdir)],
    }
    assert len(harness.jobs()) == 3  # parent, shared, prepared; the grandchild was refused


GATHER = """
import time

run = Runner("e2e")


@run.step
def start(a):
    for index, ok in enumerate(a.input("plan")):
        inputs = {"ok": ok, "delay": a.input("delay") if ok == a.input("decisive") else 0}
        a.spawn(ChildSpec(step="child", inputs=inputs, maximum_attempts_per_activation=1), label=f"c{index}")
    a.gather("next", when=a.input("when"), count=a.input("count"), on_impossible=a.input("on_impossible"))


@run.step
def child(a):
    time.sleep(a.input("delay"))
    if a.input("ok"):
        a.succeed()
    else:
        a.fail("child_failed", "planned failure")


def record(a):
    save(a, {"step": a.step, "children": {child.label: child.kind for child in a.children}})
    a.succeed()


run.step(name="next")(record)
run.step(name="rescue")(record)
"""

# (when, count, plan of child successes, on_impossible, expected parent ending)
GATHER_CASES: list[tuple[str, int | None, list[bool], str | None, str]] = [
    ("all_succeeded", None, [True, True], None, "next"),
    ("all_succeeded", None, [True, False], "rescue", "rescue"),
    ("all_succeeded", None, [True, False], None, "dependency_failure"),
    ("all_terminal", None, [False, False], None, "next"),
    ("any_succeeded", None, [False, True], None, "next"),
    ("any_succeeded", None, [False, False], "rescue", "rescue"),
    ("any_succeeded", None, [False, False], None, "dependency_failure"),
    ("at_least", 2, [True, False, True], None, "next"),
    ("at_least", 2, [True, False, False], "rescue", "rescue"),
    ("at_least", 2, [False, False, True], None, "dependency_failure"),
]


@pytest.mark.parametrize(
    ("when", "count", "plan", "on_impossible", "expected"),
    GATHER_CASES,
    ids=[f"{c[0]}-{''.join('s' if ok else 'f' for ok in c[2])}-{c[3] or 'none'}" for c in GATHER_CASES],
)
def test_gather_conditions(
    harness, when: str, count: int | None, plan: list[bool], on_impossible: str | None, expected: str
) -> None:
    ref = harness.publish(GATHER)
    # The children whose ending decides the join (successes when it is satisfied, failures when it becomes
    # impossible) finish last, so every child is terminal when the next step starts: a join decided while a
    # child still runs is test_a_join_satisfied_early_still_starts_the_next_step.
    inputs: dict[str, Any] = {
        "plan": plan,
        "when": when,
        "count": count,
        "on_impossible": on_impossible,
        "decisive": expected == "next",
        "delay": 0.6,
    }
    parent = harness.submit(ref, step="start", inputs=inputs)
    assert harness.run(workers=len(plan) + 1) == 0
    show = harness.show(parent)
    outline = {f"c{index}": "succeeded" if ok else "failed" for index, ok in enumerate(plan)}
    for label, kind in outline.items():
        assert harness.child(parent, label)["kind"] == kind
    if expected == "dependency_failure":
        assert show["kind"] == "failed", harness.describe(parent)
        assert show["failure"]["code"] == "dependency_failure"
        assert "can no longer be satisfied" in show["failure"]["message"]
        assert show["step"] == "start"
        assert [entry["kind"] for entry in show["children"]] == list(outline.values())
        assert harness.events(parent)[-1] == "join_impossible_fail"
        return
    assert show["kind"] == "succeeded", harness.describe(parent)
    assert show["step"] == expected
    report = harness.report(parent)
    assert report == {"step": expected, "children": outline}
    assert ("join_satisfied" if expected == "next" else "join_impossible_advance") in harness.events(parent)
    join = json.loads((harness.attempts(parent)[0] / "outcome.ready" / "outcome.json").read_text(encoding="utf-8"))
    assert join["action"] == "wait"
    assert join["join"] == {
        "step": "next",
        "when": when,
        "count": count,
        "on_impossible": on_impossible,
        "children": list(outline),
    }


def test_gather_defaults_to_all_succeeded(harness) -> None:
    ref = harness.publish(
        """
        run = Runner("e2e")


        @run.step
        def start(a):
            a.spawn(ChildSpec(step="child"), label="only")
            a.gather("next")


        @run.step
        def child(a):
            a.succeed()


        @run.step
        def next(a):
            a.succeed()
        """
    )
    parent = harness.submit(ref, step="start")
    harness.finish(parent, "succeeded")
    outcome = json.loads((harness.attempts(parent)[0] / "outcome.ready" / "outcome.json").read_text(encoding="utf-8"))
    assert outcome["join"]["when"] == "all_succeeded" and outcome["join"]["children"] == ["only"]


EARLY_JOIN = """
import time

run = Runner("e2e")


@run.step
def start(a):
    a.spawn(ChildSpec(step="fast"), label="fast")
    a.spawn(ChildSpec(step="slow"), label="slow")
    a.gather("next", when="any_succeeded")


@run.step
def fast(a):
    a.succeed()


@run.step
def slow(a):
    time.sleep(2.5)
    a.succeed()


@run.step
def next(a):
    save(a, {child.label: child.kind for child in a.children})
    a.succeed()
"""


def test_a_join_satisfied_early_still_starts_the_next_step(harness) -> None:
    ref = harness.publish(EARLY_JOIN)
    parent = harness.submit(ref, step="start", maximum_attempts_per_activation=1)
    assert harness.run(workers=3) == 0
    assert harness.show(parent)["kind"] == "succeeded", harness.describe(parent)
    report = harness.report(parent, 1)
    assert report["fast"] == "succeeded"
    # Still going when the next step starts: its state kind (spec 002 ChildResult "its state"), not "active".
    assert report["slow"] in ("ready", "claimed", "running"), report


INSTALLED = """
run = Runner("e2e")


@run.step
def start(a):
    runner = RunnerRef.installed(a.input("path"), a.input("sha256"))
    a.spawn(ChildSpec(step="greet", inputs={"who": "installed"}, runner=runner), label="installed")
    a.gather("done")


@run.step
def done(a):
    a.succeed()
"""


def test_spawn_with_runner_ref_installed(harness, tmp_path) -> None:
    search = tmp_path / "installed-runners"
    (search / "tools").mkdir(parents=True)
    source = harness.write_runner(OTHER_RUNNER)
    installed = search / "tools" / "greet.py"
    installed.write_bytes(source.read_bytes())
    sha256 = hashlib.sha256(installed.read_bytes()).hexdigest()
    ref = harness.publish(INSTALLED)
    parent = harness.submit(ref, step="start", inputs={"path": "tools/greet.py", "sha256": sha256})
    assert harness.run(runner_search_paths=(str(search),)) == 0
    assert harness.show(parent)["kind"] == "succeeded", harness.describe(parent)
    child = harness.child(parent, "installed")
    assert child["runner"] == {"source": "installed", "path": "tools/greet.py", "sha256": sha256}
    greeting = harness.workdir(child["job_id"]) / "greeting.txt"
    assert greeting.read_text(encoding="utf-8") == "hello installed"


UNRESOLVABLE = """
from httk.workflow import JobSpec, prepare_job_payload

run = Runner("e2e")


@run.step
def start(a):
    child = a.workdir / "child"
    # A pool no manager of this test serves: the child stays ready, so the test can lose it.
    spec = JobSpec(name="lost", workflow="e2e", runner_source=a.job.runner_source, runner_path=a.job.runner_path,
                   runner_sha256=a.job.runner_sha256, initial_step="start", pool="nobody")
    prepare_job_payload(child, spec)
    a.spawn(child, label="lost")
    a.gather("done", when="all_terminal")


@run.step
def done(a):
    a.succeed()
"""


def test_an_unresolvable_child_fails_the_join_after_its_grace(harness) -> None:
    ref = harness.publish(UNRESOLVABLE)
    parent = harness.submit(ref, step="start")
    harness.finish(parent, "waiting")
    lost = harness.child(parent, "lost")
    assert lost["kind"] == "ready"
    shutil.rmtree(harness.payload(lost["job_id"]))
    assert harness.run(join_grace_seconds=0.0) == 0
    show = harness.show(parent)
    assert show["kind"] == "failed", harness.describe(parent)
    assert show["failure"]["code"] == "dependency_failure"
    assert show["failure"]["details"]["unresolved"] == ["lost"]
    assert harness.events(parent)[-2:] == ["join_note", "join_unresolvable"]
