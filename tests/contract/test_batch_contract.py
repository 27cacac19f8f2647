"""One contract for every batch system registered in ``httk.workflow.batch_systems``.

Parametrized from the installed entry points, so it covers local, slurm, pbs, the plug-in
of tests/plugins, and any batch system an integrator installs beside the package
(docs/integrators.md). It checks what the class declares, the batch script it composes,
its refusals, its argv, how it fails, and it replays every recorded session of it
(tests/contract/recordings/<name>/, plus ``$HTTK_CONTRACT_RECORDINGS``) over
:class:`~httk.workflow.testing.ReplayTransport`. ARCHITECTURE.md rule 7.
"""

from __future__ import annotations

import re
import shlex
from importlib.metadata import entry_points
from typing import Any

import pytest
from batch_scenarios import replay, scenarios

from httk.workflow.adapters.batch.base import Capabilities, CommandLineBatchSystem, Directive
from httk.workflow.adapters.plugins import BATCH_SYSTEMS, EntryPointCatalog
from httk.workflow.ports import BatchJobStatus, BatchSystemError, CommandResult, TransportError
from httk.workflow.testing import Exchange, ReplayMismatch, ReplayTransport

NAMES = sorted({entry.name for entry in entry_points(group=BATCH_SYSTEMS)})
#: Batch systems whose recordings ship here: a missing recording of one of them is a failure, not a skip.
RECORDED_HERE = {"local", "slurm", "pbs", "toy"}
WORD = re.compile(r"[A-Za-z0-9._+-]+")
WS = "/scratch/it's a/ws"
HTTK = ["/opt/h t/bin/httk"]


@pytest.fixture(params=NAMES)
def system(request) -> type[Any]:
    batch = EntryPointCatalog().batch_system(request.param)
    assert batch is not None
    return batch


def test_the_first_party_and_the_plugin_are_all_registered():
    assert {"local", "slurm", "pbs", "toy"} <= set(NAMES)


def test_it_declares_what_the_seam_reads(system):
    entry_name = next(name for name in NAMES if EntryPointCatalog().batch_system(name) is system)
    assert issubclass(system, CommandLineBatchSystem)
    assert system.name == entry_name and WORD.fullmatch(system.name)
    assert system.title and system.description and not system.description.endswith(".")
    assert system.commands and all(WORD.fullmatch(command) for command in system.commands)
    assert isinstance(system.id_pattern, re.Pattern)
    assert isinstance(system.capabilities, Capabilities)
    assert all(isinstance(d, Directive) and d.setting.startswith(f"{system.name}.") for d in system.directives)
    assert (system.directive_prefix.startswith("#") and " " not in system.directive_prefix) or not system.directives
    assert all(isinstance(v, bool | None) for v in system.finished_states.values())
    assert isinstance(system.forgotten, BatchJobStatus)


def manager_argv(script: str) -> list[str]:
    """The words of the script's ``exec`` line, redirections dropped."""
    line = [line for line in script.splitlines() if line.startswith("exec ") and "httk" in line][-1]
    return [word for word in shlex.split(line)[1:] if not word.startswith(("<", ">"))]


def test_the_script_runs_one_manager_with_every_word_quoted(system):
    batch = system(ReplayTransport([]))
    script = batch.compose_script(WS, {"manager.workers": 3, "vasp.command": "srun x"}, ["--pool", "a b"], HTTK)
    assert script.startswith("#!/bin/sh\n") and script.endswith("\n")
    assert manager_argv(script) == [*HTTK, "workflow", "run", WS, "--workers", "3", "--pool", "a b"]
    given = batch.compose_script(WS, {"manager.workers": 3}, [], HTTK, workers=2)
    assert manager_argv(given)[-2:] == ["--workers", "2"]
    assert manager_argv(batch.compose_script(WS, {}, [], HTTK))[-2:] == ["--workers", "1"]


def test_words_that_could_inject_a_line_are_refused(system):
    batch = system(ReplayTransport([]))
    with pytest.raises(BatchSystemError, match="control character"):
        batch.compose_script("/ws\n#directive", {}, [], HTTK)
    with pytest.raises(BatchSystemError, match="manager.workers must be a positive integer"):
        batch.compose_script(WS, {"manager.workers": 0}, [], HTTK)


def test_a_setting_is_refused_when_written_by_the_rule_the_script_applies(system):
    batch = system(ReplayTransport([]))
    for directive in system.directives:
        with pytest.raises(BatchSystemError, match=f"setting {re.escape(directive.setting)} must be") as at_set:
            system.check_setting(directive.setting, "x\n#injected")
        with pytest.raises(BatchSystemError) as at_run:
            batch.compose_script(WS, {directive.setting: "x\n#injected"}, [], HTTK)
        assert str(at_set.value) == str(at_run.value)
        system.check_setting(directive.setting, None)  # null: no directive
    if system.directives:
        with pytest.raises(BatchSystemError, match=f"unknown .* setting '{system.name}.no_such'"):
            system.check_setting(f"{system.name}.no_such", "x")


def test_argv_are_lists_of_words_and_name_the_declared_commands(system):
    batch = system(ReplayTransport([]))
    example = f"{system.name}-example"
    argvs = [batch.submit_argv("/w d/batch"), batch.cancel_argv([example]), batch.status_argv([example])]
    for argv in argvs:
        assert isinstance(argv, list) and argv and all(isinstance(word, str) for word in argv)
        # A fixed program run by sh takes its variable parts as positional parameters, never in its text.
        assert argv[0] in {*system.commands, "sh"}
        assert not any("/w d/batch" in word for word in argv[:3] if argv[:2] == ["sh", "-c"])
    text = " ".join(word for argv in argvs for word in argv)
    for command in system.commands:
        assert re.search(rf"(^|[^A-Za-z0-9_-]){re.escape(command)}($|[^A-Za-z0-9_-])", text), command


def test_ids_are_checked_before_any_command_runs(system):
    batch = system(ReplayTransport([]))  # a command would be a ReplayMismatch
    assert batch.status([]) == {}
    batch.cancel([])
    with pytest.raises(BatchSystemError, match=f"is not a {system.name} job id"):
        batch.status(["1; rm -rf ~"])
    with pytest.raises(BatchSystemError, match=f"is not a {system.name} job id"):
        batch.cancel(["$(reboot)"])


def test_a_failing_command_is_one_line_naming_the_batch_system(system):
    workdir = "/w/.httk-workflow/batch"
    probe = system(ReplayTransport([]))
    failing = ReplayTransport([
        Exchange(("mkdir", "-p", "--", workdir)),
        Exchange(tuple(probe.submit_argv(workdir)), 1, "", "error: the queue is closed\nsecond line\n"),
    ])
    with pytest.raises(BatchSystemError) as raised:
        system(failing).submit("#!/bin/sh\n", workdir=workdir)
    message = str(raised.value)
    assert message.startswith(f"{system.name}: ") and "\n" not in message and "the queue is closed" in message


def test_an_unreachable_target_stays_a_transport_error(system):
    down = ReplayTransport([Exchange(("mkdir", "-p", "--", "/w"), error="ssh kappa: connection refused")])
    with pytest.raises(TransportError, match="connection refused"):
        system(down).submit("#!/bin/sh\n", workdir="/w")


def test_every_recorded_session_replays(system):
    found = scenarios(system.name)
    if not found:
        assert system.name not in RECORDED_HERE, f"the recordings of {system.name} are missing"
        pytest.skip(f"no recorded session of {system.name}: record one (docs/integrators.md) and put it in "
                    "$HTTK_CONTRACT_RECORDINGS")
    for path in found:
        replay(system, path)


def test_the_replay_holds_a_batch_system_to_the_argv_it_recorded():
    """The suite can fail: a batch system that runs another command than recorded is caught."""
    from httk.workflow.adapters.batch.slurm import SlurmBatchSystem

    class Drifted(SlurmBatchSystem):
        def status_argv(self, job_ids):
            return ["squeue", "-h", "-j", ",".join(job_ids)]

    with pytest.raises(ReplayMismatch, match="the recording holds"):
        for path in scenarios("slurm"):
            replay(Drifted, path)
    transport = ReplayTransport([Exchange(("true",), stdout="x")])
    assert transport.run(["true"]) == CommandResult(0, "x", "")
    with pytest.raises(ReplayMismatch, match="no recorded command left"):
        transport.run(["true"])
