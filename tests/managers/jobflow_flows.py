"""Real jobflow flows for tests/managers/test_ops_jobflow.py (imported by the runners through PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from jobflow import Flow, Response, job


@job
def add(a: float, b: float) -> float:
    return a + b


@job
def multiply(a: float, b: float) -> float:
    return a * b


@job
def square(x: int) -> int:
    return x * x


@job
def total(values: list[int]) -> int:
    return sum(values)


@job
def fan_out(n: int) -> Response:
    """Replaces itself, at run time, by ``n`` square jobs whose outputs become its output."""
    squares = [square(i) for i in range(n)]
    return Response(replace=Flow(squares, output=[each.output for each in squares], name="squares"))


@job
def explode(x: float) -> float:
    raise ValueError(f"cannot handle {x}")


@job
def stopper(x: int) -> Response:
    return Response(output=x, stop_children=True)


@job(data=True)
def big_list(n: int) -> list[int]:
    """Its whole output goes to the additional store ``data`` (a blob), not into the output document."""
    return list(range(n))


@job
def detouring(x: int) -> Response:
    """Keeps its output, and inserts a square job its dependents wait for."""
    return Response(output=x, detour=square(5))


@job
def adding(x: int) -> Response:
    return Response(output=x, addition=Flow([square(6)], name="added"))


@job
def halt(x: int) -> Response:
    return Response(output=x, stop_jobflow=True)


@job
def adding_bad(x: int) -> Response:
    """Keeps its output and adds a flow that fails; its dependents do not wait for the addition."""
    return Response(output=x, addition=Flow([explode(6)], name="added-bad"))


@job
def halt_adding(x: int) -> Response:
    """Stops the flow and asks for an addition, which therefore never runs (as in run_locally)."""
    return Response(output=x, stop_jobflow=True, addition=Flow([square(8)], name="never-added"))


def chain() -> Flow:
    """Three jobs, each reading the previous one's output: (1 + 2) + 10, times 2."""
    first = add(1, 2)
    second = add(first.output, 10)
    third = multiply(second.output, 2)
    return Flow([first, second, third], name="chain")


def dynamic() -> Flow:
    """A job replaced by a flow decided at run time; a downstream job reads the replacement's output."""
    fan = fan_out(3)
    summed = total(fan.output)
    return Flow([fan, summed], name="dynamic")


def failing() -> Flow:
    """One job raises (its dependent never runs); another stops its children (its dependent is skipped)."""
    ok = add(1, 1)
    bad = explode(ok.output)
    after_bad = add(bad.output, 1)
    stop = stopper(5)
    after_stop = add(stop.output, 1)
    return Flow([ok, bad, after_bad, stop, after_stop], name="failing")


def diversions() -> Flow:
    """A detour (its job's dependents wait for it) and an addition (added to the flow beside them)."""
    detour = detouring(1)
    after = add(detour.output, 1)
    addition = adding(2)
    return Flow([detour, after, addition], name="diversions")


def _then_add_one(first: Any, name: str) -> Flow:
    """The flow ``name`` of ``first`` and a dependent job adding 1 to its output."""
    return Flow([first, add(first.output, 1)], name=name)


def halting() -> Flow:
    """A job that stops the whole flow: what has not run yet never runs."""
    return _then_add_one(halt(7), "halting")


def stored() -> Flow:
    """A job whose output lives in an additional store, read by a downstream job."""
    values = big_list(5)
    summed = total(values.output)
    return Flow([values, summed], name="stored")


def failed_addition() -> Flow:
    """A job whose addition fails: the job and its dependent still succeed; the flow does not."""
    return _then_add_one(adding_bad(2), "failed-addition")


def halting_with_addition() -> Flow:
    return _then_add_one(halt_adding(7), "halting-with-addition")


def stopping() -> Flow:
    """Only a stop_children: the dependent is skipped, so the flow did not finish successfully."""
    return _then_add_one(stopper(5), "stopping")
