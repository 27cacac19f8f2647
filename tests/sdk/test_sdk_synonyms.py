"""The httk-workflow 2.1 keyword ``parameters=`` of JobSpec and ChildSpec, still accepted for ``inputs=``.

``Attempt.parameter``/``parameters`` are gone: the parity table (spec 002) has no row for them.
"""

from __future__ import annotations

import pytest

from httk.workflow import Attempt, ChildSpec, JobSpec, Runner, prepare_job_payload


def test_attempt_has_no_2_1_aliases_of_input_and_inputs():
    # Spec 002: a public member of Attempt without a row of the parity table fails the build; the table
    # has no row for the 2.1 spellings, so they are not members (a runner says input/inputs).
    assert not hasattr(Attempt, "parameter") and not hasattr(Attempt, "parameters")


def test_jobspec_parameters_writes_the_bytes_of_inputs(tmp_path):
    members = {"name": "n", "workflow": "w", "runner_path": "run.py"}
    spelled = JobSpec(**members, parameters={"encut": 520})
    assert spelled == JobSpec(**members, inputs={"encut": 520})
    assert spelled.inputs == {"encut": 520}
    one = prepare_job_payload(tmp_path / "one", spelled, durable=False)
    two = prepare_job_payload(tmp_path / "two", JobSpec(**members, inputs={"encut": 520}), durable=False)
    assert (one / "job.json").read_bytes() == (two / "job.json").read_bytes()


@pytest.mark.parametrize("make", [
    lambda: JobSpec(name="n", workflow="w", runner_path="r", inputs={"a": 1}, parameters={"a": 1}),
    lambda: ChildSpec(step="relax", inputs={}, parameters={}),
], ids=["JobSpec", "ChildSpec"])
def test_both_spellings_at_once_are_refused_naming_both(make):
    with pytest.raises(TypeError) as refused:
        make()
    message = str(refused.value)
    assert "\n" not in message and "inputs=" in message and "parameters=" in message


def test_childspec_parameters_synthesizes_the_child_job_inputs_would(make_attempt, workspace_spec):
    attempt = make_attempt("start", spec=workspace_spec())
    run = Runner("demo")

    @run.step
    def start(a):
        a.spawn(ChildSpec(step="relax", parameters={"site": 3}), label="spelled")
        a.spawn(ChildSpec(step="relax", inputs={"site": 3}), label="seed")
        a.gather("relax")

    run.step(name="relax")(lambda a: a.succeed())
    assert ChildSpec(step="relax", parameters={"site": 3}) == ChildSpec(step="relax", inputs={"site": 3})
    run.main([])
    spelled, seed = attempt.spawned()["children"]
    children = attempt.ready / "children"
    spelled_job = (children / spelled["payload"] / "job.json").read_bytes()
    seed_job = (children / seed["payload"] / "job.json").read_bytes()
    # The label names the child (its name and tag); everything else, inputs included, is the same.
    assert spelled_job.replace(b"spelled", b"seed") == seed_job
    assert b'"inputs":{"site":3}' in seed_job
