"""Symbolic links a runner plants never lead the manager outside the outcome and data trees (issue 10).

Real managers, real Bash runners, real files: each runner plants a link — in the
job's published data, as ``outcome.ready``, ``transaction/``, ``children/jobs``,
a child's ``.httk-job`` or the commit ledger ``commit/`` — and publishes an
outcome that would act through it. The outcome is refused as ``protocol_error``
naming the link, the job fails, and the directory the link points at is exactly
as before: nothing written, moved or trashed there, nothing created from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from httk.workflow.protocol import JobSpec, prepare_job_payload

CHILD_ID = "dddddddd-0000-4000-8000-000000000001"
CHILD_KEY = f"c--{CHILD_ID}"

#: ``begin`` starts an outcome draft in $d; ``finish`` publishes it with a succeed outcome.
DRAFT = r"""
d="$HTTK_WORKFLOW_CONTROL_DIR/outcome.tmp.$$"; mkdir -p "$d"
finish() {
  printf '{"format":"httk-workflow-outcome","format_version":1,"action":"succeed"}' > "$d/outcome.json"
  mv "$d" "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"
}
"""


def _manifest(*operations: dict) -> str:
    return json.dumps({"format": "httk-workflow-transaction", "format_version": 1, "operations": list(operations)})


def _stage_put(destination: str) -> str:
    """Bash staging one put of the bytes ``new`` to ``destination`` as op-0001 in the draft."""
    manifest = _manifest({"id": "op-0001", "op": "put", "destination": destination, "source": "files/op-0001"})
    return f"""mkdir -p "$d/transaction/files"; printf new > "$d/transaction/files/op-0001"
printf '%s' '{manifest}' > "$d/transaction/manifest.json"
"""


def _snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every name below ``directory`` with its bytes (or link target), to compare before and after."""
    out: dict[str, bytes | str] = {}
    for path in sorted(directory.rglob("*")):
        relative = str(path.relative_to(directory))
        if path.is_symlink():
            out[relative] = f"-> {path.readlink()}"
        elif path.is_file():
            out[relative] = path.read_bytes()
        else:
            out[relative] = "dir"
    return out


def _outside(ops, **files: str) -> Path:
    directory = ops.tmp / "outside"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


def _refused(ops, job: str, link: str) -> str:
    assert ops.kind(job) == "failed"
    failure = ops.frame(job).failure
    assert failure.code == "protocol_error", failure
    assert f"{link} is a symbolic link" in failure.message, failure
    return failure.message


def _trash(ops, job: str) -> list[str]:
    trash = Path(ops.handle.layout.data_dir(job)) / "trash"
    return [str(path.relative_to(trash)) for path in trash.rglob("*")] if trash.exists() else []


def test_a_put_through_a_link_in_the_data_tree_writes_nothing_outside(ops):
    outside = _outside(ops, keep="k")
    before = _snapshot(outside)
    body = f'ln -s {outside} "$HTTK_WORKFLOW_DATA_DIR/results"\n{DRAFT}{_stage_put("results/x")}finish'
    job = ops.job(body, data_mode="transactional")
    ops.run()
    data = Path(ops.handle.layout.data_dir(job)) / "current"
    _refused(ops, job, f"{data}/results")
    assert _snapshot(outside) == before
    assert _trash(ops, job) == []


def test_a_remove_through_a_link_in_the_data_tree_moves_nothing_outside_to_the_trash(ops):
    outside = _outside(ops, victim="precious")
    before = _snapshot(outside)
    manifest = _manifest({"id": "op-0001", "op": "remove", "destination": "results/victim"})
    body = (f'ln -s {outside} "$HTTK_WORKFLOW_DATA_DIR/results"\n{DRAFT}'
            f"mkdir -p \"$d/transaction\"; printf '%s' '{manifest}' > \"$d/transaction/manifest.json\"\nfinish")
    job = ops.job(body, data_mode="transactional")
    ops.run()
    _refused(ops, job, f"{ops.handle.layout.data_dir(job)}/current/results")
    assert _snapshot(outside) == before
    assert (outside / "victim").read_text() == "precious"
    assert _trash(ops, job) == []


def test_a_symlinked_transaction_directory_is_refused(ops):
    staged = _outside(ops, **{"files/op-0001": "from outside", "manifest.json": _manifest(
        {"id": "op-0001", "op": "put", "destination": "x", "source": "files/op-0001"})})
    before = _snapshot(staged)
    job = ops.job(f'{DRAFT}ln -s {staged} "$d/transaction"\nfinish', data_mode="transactional")
    ops.run()
    _refused(ops, job, "/outcome.ready/transaction")
    assert not (Path(ops.handle.layout.data_dir(job)) / "current" / "x").exists()
    assert _snapshot(staged) == before


def test_a_symlinked_outcome_ready_is_refused(ops):
    elsewhere = _outside(ops, **{"outcome.json": json.dumps(
        {"format": "httk-workflow-outcome", "format_version": 1, "action": "succeed"})})
    before = _snapshot(elsewhere)
    job = ops.job(f'ln -s {elsewhere} "$HTTK_WORKFLOW_CONTROL_DIR/outcome.ready"')
    ops.run()
    _refused(ops, job, "/outcome.ready")
    assert _snapshot(elsewhere) == before


def _spawn_json() -> str:
    return json.dumps({"format": "httk-workflow-spawn", "format_version": 1, "children": [
        {"label": "c", "job_id": CHILD_ID, "job_key": CHILD_KEY, "placement": "kids", "payload": f"jobs/{CHILD_KEY}"}]})


def _child_payload(directory: Path) -> None:
    prepare_job_payload(directory, JobSpec(name="child", workflow="ops", runner_path="run.sh"), durable=False)
    (directory / "run.sh").write_text("exit 0\n")


def test_symlinked_children_jobs_are_refused_and_the_outside_payload_stays_where_it_is(ops):
    outside = _outside(ops)
    _child_payload(outside / CHILD_KEY)
    before = _snapshot(outside)
    body = (f"{DRAFT}mkdir -p \"$d/children\"; printf '%s' '{_spawn_json()}' > \"$d/children/spawn.json\"\n"
            f'ln -s {outside} "$d/children/jobs"\nfinish')
    job = ops.job(body)
    ops.run()
    _refused(ops, job, "/outcome.ready/children/jobs")
    assert _snapshot(outside) == before
    assert not (ops.root / "kids").exists()
    assert not any(path.name.startswith(CHILD_KEY) for path in (ops.root / ".httk-workflow" / "state").rglob("*"))


def test_a_child_whose_private_directory_is_a_link_gets_no_parent_record_outside(ops):
    outside = _outside(ops, keep="k")
    before = _snapshot(outside)
    payload = ops.tmp / "prepared"
    _child_payload(payload)
    body = (f"{DRAFT}mkdir -p \"$d/children/jobs\"; printf '%s' '{_spawn_json()}' > \"$d/children/spawn.json\"\n"
            f'cp -r {payload} "$d/children/jobs/{CHILD_KEY}"\n'
            f'ln -s {outside} "$d/children/jobs/{CHILD_KEY}/.httk-job"\nfinish')
    job = ops.job(body)
    ops.run()
    _refused(ops, job, f"/children/jobs/{CHILD_KEY}/.httk-job")
    assert _snapshot(outside) == before  # no parent.json written through the link
    assert not (ops.root / "kids").exists()


def test_a_symlinked_commit_ledger_is_refused_and_nothing_is_ledgered_outside(ops):
    outside = _outside(ops)
    body = f'ln -s {outside} "$HTTK_WORKFLOW_CONTROL_DIR/commit"\n{DRAFT}{_stage_put("x")}finish'
    job = ops.job(body, data_mode="transactional")
    ops.run()
    _refused(ops, job, "/commit")
    assert _snapshot(outside) == {}
    assert not (Path(ops.handle.layout.data_dir(job)) / "current" / "x").exists()


def test_real_directories_in_the_same_places_commit_normally(ops):
    """The control case: the same outcomes without links succeed, so each refusal above is the link's."""
    body = f'mkdir -p "$HTTK_WORKFLOW_DATA_DIR/results"\n{DRAFT}{_stage_put("results/x")}finish'
    job = ops.job(body, data_mode="transactional")
    ops.run()
    assert ops.kind(job) == "succeeded"
    assert (Path(ops.handle.layout.data_dir(job)) / "current" / "results" / "x").read_text() == "new"
    assert _trash(ops, job) == []
