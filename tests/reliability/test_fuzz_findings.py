"""Defects the fuzz campaign found, each pinned by the smallest case that showed it (docs/reliability.md).

- ``1e999`` parsed as Infinity: a request holding it could be claimed but its
  quarantine record never written (``Out of range float values``), so it stayed in
  ``claimed/`` for good; ``collect --raw`` printed a traceback for a job.json holding it.
- A lone surrogate escape (``"\\ud800"``) parsed into a string no UTF-8 writer can
  write: the commit of an outcome holding one raised ``UnicodeEncodeError`` and the
  job stayed ``committing`` under a refusal instead of failing with ``protocol_error``.
- ``job show`` of a frame whose ``created_at`` is ``1e308`` raised ``OverflowError``; one whose
  ``total_attempts`` is negative raised ``ValueError`` from the budgets (a frame now refuses negative counts).
- A FIFO as ``format.json`` or ``settings.json`` blocked every command and manager for good; an
  unreadable ``settings.json`` under a running manager made every claim an unexpected exception
  that left the job ``claimed``.
- A hand-edited setting *name* holding a NUL passed the launch's setting check (only values were
  checked) and became an environment variable name, which ``execve`` refuses: every claim failed
  with an unexpected ``ValueError``.
- A FIFO or socket staged by a transactional outcome passed validation: the in-memory filesystem
  copied it into the job's data, a real one failed midway, after earlier operations had applied.

The campaign's own determinism is checked here too: a seed is enough to replay a finding.
"""

from __future__ import annotations

import hashlib
import random

import attrs
import pytest
from fuzz_bench import OUTCOME, Bench, first_attempt
from reliability_support import Raw, Special, mutate_document, render

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.requests import publish_request
from httk.workflow.protocol import JobSpec
from httk.workflow.store.store import JobDamage
from httk.workflow.store.workspaces import WorkspaceError, WorkspaceService


@pytest.mark.parametrize("text, words", [
    (b'{"a": 1e999}', "the number 1e999 is beyond the range of a JSON number"),
    (b'{"a": [-1E400]}', "the number -1E400 is beyond the range"),
    (b'{"a": NaN}', "NaN is not JSON"),
    (b'{"a": "\\ud800"}', "holds a lone surrogate"),
    (b'{"\\udfff": 1}', "holds a lone surrogate"),
])
def test_what_json_cannot_carry_back_is_refused_on_reading(text, words):
    with pytest.raises(codec.DocumentError) as caught:
        codec.decode(text, "doc.json")
    assert words in str(caught.value) and str(caught.value).startswith("doc.json @ $: ")


def test_surrogate_pairs_and_escaped_backslashes_still_read():
    assert codec.decode(b'{"a": "\\ud83d\\ude00", "b": "\\\\ud800", "c": 1.5e300}', "doc") == {
        "a": "\N{GRINNING FACE}", "b": "\\ud800", "c": 1.5e300}


def test_a_request_holding_1e999_is_quarantined_not_stranded_in_claimed():
    bench = Bench()
    target = bench.submit(placement="t")
    document = publish_request(bench.handle, bench.store.read_job(target), "pause", operator="me", reason="r")
    name = f"{document['request_id']}.json"
    requests = bench.handle.layout.requests
    bench.place(f"{requests}/ready/{name}", render({**document, "extra": Raw("1e999")}))
    bench.add_good()
    bench.run()
    bench.check_good()
    assert list(bench.fs.scandir(f"{requests}/claimed/m-a")) == []
    record = codec.decode_object(bench.fs.read_bytes(f"{requests}/quarantine/{name}.audit.json"), "record")
    assert "1e999 is beyond the range of a JSON number" in record["quarantine_reason"]
    assert bench.kind(target.job_id) == "succeeded"  # the pause never applied
    bench.cli("collect", bench.root, "--raw", "--kind=succeeded", codes=(0,))


def test_an_outcome_holding_a_lone_surrogate_fails_the_attempt_with_protocol_error():
    bench = Bench()
    failure = {"code": "bad", "message": Raw('"half a pair: \\ud800"'), "details": {}, "retryable": False}
    outcome = render({**OUTCOME, "action": "fail", "failure": failure})
    job = bench.submit(tree=first_attempt(lambda launch: {"outcome.json": outcome}))
    bench.add_good()
    manager = bench.run()  # asserts that no unexpected exception was contained
    bench.check_good()
    assert manager.refused == {}
    marker = bench.marker(job.job_id)
    assert marker is not None and marker.kind == StateKind.FAILED
    failure = bench.store.read_frame(marker).failure
    assert failure.code == "protocol_error" and "lone surrogate" in failure.message


def test_job_show_of_a_frame_dated_past_every_calendar_shows_the_number():
    bench = Bench()
    job = bench.submit(JobSpec(name="j", workflow="w", runner_path="run.sh", pool="elsewhere"))
    bench.run()
    _forge(bench, bench.marker(job.job_id), created_at=1e308)
    shown = bench.cli("job", "show", bench.root, job.job_id, codes=(0,))
    assert "1e+308 (out of range)" in shown.stdout
    bench.cli("job", "log", bench.root, job.job_id, codes=(0,))


def _forge(bench: Bench, marker, **members):
    """Re-point ``marker`` at a new frame: its own frame with ``members`` changed, checksum intact."""
    document = {**bench.store.reader.read(marker.ref), **members}
    body = render(document).rstrip(b"\n")
    digest = hashlib.sha256(body).digest()
    writer = marker.ref.split("~")[0]
    segment = f"{bench.handle.layout.journal}/{writer}/1.journal"
    old = bench.fs.read_bytes(segment)
    size = len(body).to_bytes(8, "big")
    bench.fs.write_atomic(segment, old + size + body + digest + size, durable=False)
    forged = attrs.evolve(marker, ref=f"{writer}~1~{len(old)}~{len(body) + 48}~{digest.hex()[:8]}")
    bench.fs.rename(bench.store.marker_path(marker), bench.store.marker_path(forged), durable=False)
    bench.handle = WorkspaceService(bench.ports).open(bench.root)  # the next manager writes a segment of its own
    return forged


def test_a_frame_with_a_negative_count_is_damage_and_job_show_reports_it():
    bench = Bench()
    job = bench.submit(JobSpec(name="j", workflow="w", runner_path="run.sh", pool="elsewhere"))
    bench.run()
    forged = _forge(bench, bench.marker(job.job_id), total_attempts=-(2**63) - 1)
    with pytest.raises(JobDamage) as caught:
        bench.store.read_frame(forged)
    assert "total_attempts must be a non-negative integer" in caught.value.message
    shown = bench.cli("job", "show", bench.root, job.job_id, codes=(1,))
    assert "state frame is unreadable" in shown.stdout
    bench.add_good()
    manager = bench.run("m-b")
    bench.check_good()
    assert "total_attempts must be a non-negative integer" in manager.refused[str(forged.key)]


@pytest.mark.parametrize("document", ["format.json", "settings.json"])
@pytest.mark.parametrize("what", ["fifo", "directory", "oversized"])
def test_a_workspace_document_that_is_no_regular_file_is_one_error_line_not_a_hang(document, what):
    bench = Bench()
    bench.handle.set_setting("a.b", 1)
    bench.place(f"{bench.handle.layout.control}/{document}", Special(what))
    commands = [("workspace", "settings", "show"), ("run",)]
    for args in commands + ([("workspace", "status"), ("workspace", "fsck")] if document == "format.json" else []):
        shown = bench.cli(*args, bench.root, codes=(2,))
        assert document in shown.stderr and (" is a " in shown.stderr or " bytes, more than " in shown.stderr)
    if document == "format.json":
        with pytest.raises(WorkspaceError):
            WorkspaceService(bench.ports).open(bench.root)


@pytest.mark.parametrize("what", ["fifo", "directory"])
def test_an_unreadable_settings_json_under_a_running_manager_leaves_jobs_ready_and_refused(what):
    bench = Bench()
    bench.add_good()
    bench.place(bench.handle.layout.settings_file, Special(what))
    manager = bench.run()  # asserts that no unexpected exception was contained
    for marker in bench.good:
        assert bench.kind(marker.job_id) == "ready"
        assert "not claimable" in manager.refused[str(marker.key)]
        assert "settings.json @ $: is a" in manager.refused[str(marker.key)]
    bench.fs.rmtree(bench.handle.layout.settings_file)
    bench.run("m-b")
    bench.check_good()


def test_a_setting_name_holding_a_nul_fails_the_attempt_with_setting_invalid():
    bench = Bench()
    bench.handle.set_setting("a.b", 1)
    bench.place(bench.handle.layout.settings_file, render({"a.b": 1, "x\x00y": "v"}))
    bench.add_good(1)
    manager = bench.run()  # asserts that no unexpected exception was contained
    assert manager.refused == {}
    [marker] = bench.good
    failure = bench.store.read_frame(bench.marker(marker.job_id)).failure
    assert failure.code == "setting_invalid" and "invalid setting name" in failure.message


@pytest.mark.parametrize("what", ["fifo", "socket"])
def test_a_staged_fifo_fails_the_transaction_before_anything_applies(what, tmp_path):
    for bench in (Bench(), Bench(str(tmp_path / what))):
        tree = {"outcome.json": {**OUTCOME, "action": "succeed"},
                "transaction/manifest.json": {"format": "httk-workflow-transaction", "format_version": 1,
                                              "operations": [
                    {"id": "op-0001", "op": "put", "destination": "a.txt", "source": "files/op-0001"},
                    {"id": "op-0002", "op": "put", "destination": "tree", "source": "files/op-0002"}]},
                "transaction/files/op-0001": b"a\n", "transaction/files/op-0002/x.txt": b"x\n",
                "transaction/files/op-0002/pipe": Special(what)}
        job = bench.submit(JobSpec(name="j", workflow="w", runner_path="run.sh", data_mode="transactional"),
                           tree=first_attempt(lambda launch, tree=tree: tree))
        bench.run()
        marker = bench.marker(job.job_id)
        assert marker.kind == StateKind.FAILED
        failure = bench.store.read_frame(marker).failure
        assert failure.code == "transaction_error" and "not a regular file" in failure.message
        assert not bench.fs.exists(f"{bench.handle.layout.data_dir(job.job_id)}/current/a.txt")


def test_the_mutations_are_reproducible():
    """The same seed gives the same bytes: a finding's seed is enough to replay it."""
    document = JobSpec(name="j", workflow="w", runner_path="run.sh", inputs={"a": [1, "b"]}).to_document()
    first = [mutate_document(random.Random(f"k:{seed}"), document, []) for seed in range(50)]
    again = [mutate_document(random.Random(f"k:{seed}"), document, []) for seed in range(50)]
    assert first == again and len(set(first)) > 40
    assert render({"a": 1}) == b'{"a": 1}\n'
