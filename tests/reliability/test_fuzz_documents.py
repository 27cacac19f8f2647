"""The fuzz campaign over every document kind (issue 10, "A standing campaign in the test suite").

Each test starts from valid documents of one kind — ``job.json``, ``outcome.json``,
``children/spawn.json`` and a child's ``job.json``, ``transaction/manifest.json``, a
request, ``format.json``, ``settings.json``, ``context.json``, marker names, journal
bytes — mutates them (type swaps, out-of-range numbers, deep nesting, huge strings,
NUL and control characters, unknown and missing members, byte damage) or puts a
non-regular file where the document belongs, and asserts the invariant: the
components that read it (a manager until idle, ``workspace fsck``, ``status``,
``job show``/``log``/``why``, ``collect``, ``precheck``, submission, the SDK's
context parser) never raise an unexpected exception and never hang, and end in a
designed outcome — the bad job refused with a reason, failed with a code, a
request quarantined, a documented damage code, or one ``error:`` line and exit 2 —
while good jobs of the same workspace still succeed and nothing outside the
workspace changes. Content mutations run on the in-memory ports; non-regular files
(directory, FIFO, symlink, socket, sparse oversized file) run on real files too.
Case counts follow ``HTTK_RELIABILITY_PROFILE``; see docs/reliability.md.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from fuzz_bench import (
    OUTCOME,
    Bench,
    apply_model,
    bad_document,
    check_clean,
    check_codes,
    check_outside,
    ended,
    first_attempt,
    repair,
    segment_frames,
    spec_end,
    staged_content,
)
from reliability_support import (
    SPECIALS,
    Special,
    campaign,
    designed,
    mutate_bytes,
    mutate_document,
    mutate_tree,
    render,
)

from httk.workflow import codec
from httk.workflow.engine.manager import TICK_ORDER
from httk.workflow.operations.requests import publish_request
from httk.workflow.operations.submission import submit
from httk.workflow.protocol import JobSpec, parse_job_bytes
from httk.workflow.runtime import AttemptContext
from httk.workflow.store.markers import Marker, MarkerNameError
from httk.workflow.store.store import JobDamage
from httk.workflow.store.workspaces import WorkspaceService

pytestmark = pytest.mark.soak  # the campaign: ``-m soak`` selects it, HTTK_RELIABILITY_PROFILE sizes it

JOBS = (
    JobSpec(name="j", workflow="w", runner_path="run.sh"),
    JobSpec(name="j", workflow="w", runner_path="run.sh", tag="t", inputs={"encut": 520, "list": [1, "a"]},
            priority=3, capabilities=("gpu",), resources={"cores": 4}, declarations={"d": {"x": 1}}),
    JobSpec(name="j", workflow="w", runner_path="run.sh", workdir_mode="isolated", data_mode="transactional",
            maximum_attempts_per_activation=2, maximum_total_attempts=5, maximum_activations=2, retry_on=("oom",)),
    JobSpec(name="j", workflow="w", runner_path="run.sh", runner_source="workspace", runner_sha256="a" * 64),
)
KIDS = ("cccccccc-0000-4000-8000-00000000000a", "cccccccc-0000-4000-8000-00000000000b",
        "cccccccc-0000-4000-8000-00000000000c")


# -- job.json ------------------------------------------------------------------------------------

def test_fuzz_job_json():
    campaign("job.json", "job_json", 0.14, lambda rng, notes: _job_json(rng, notes, Bench(), None))


def _job_json(rng, notes, bench: Bench, special: Special | None) -> None:
    content = bad_document(rng, notes, rng.choice(JOBS).to_document(), special)
    before = bench.outside_snapshot()
    extra: list[tuple[str, JobSpec]] = []
    if isinstance(content, bytes):
        # Submission reads the same bytes first: it refuses them whole (nothing written), or the job exists.
        source = bench.payload(content)
        inside = bench.snapshot(bench.root)
        accepted, refused = designed(lambda: submit(bench.handle, source, "s"))
        if refused is not None:
            assert bench.snapshot(bench.root) == inside, f"a refused submission wrote: {refused}"
        else:
            extra.append((accepted.marker.job_id, parse_job_bytes(content)))
        before = bench.outside_snapshot()
    bad = bench.submit(placement="q")
    bench.place(f"{bench.store.payload_dir(bad)}/job.json", content)
    bench.add_good()
    try:
        verdict: JobSpec | JobDamage = bench.store.read_spec(bad)
    except JobDamage as damage:
        verdict = damage
    manager = bench.run()
    bench.check_good()
    if isinstance(verdict, JobDamage):
        ended(bench, bad.job_id, ("submitted",))
        refusal = manager.refused.get(str(bad.key), "")
        assert verdict.code in refusal, f"the unreadable job was not refused with its code: {refusal!r}"
    else:
        spec_end(bench, bad.job_id, verdict)
    for job_id, spec in extra:
        spec_end(bench, job_id, spec)
    report = bench.read_everything([bad.job_id, bench.good[0].job_id])
    check_codes(report)
    mine = [problem["code"] for problem in report["problems"] if problem["job"] == str(bad.key)]
    expected = [verdict.code] if isinstance(verdict, JobDamage) else []
    assert mine == expected, f"fsck reported {mine} for the job, the store says {expected}"
    check_outside(bench, before)


# -- outcome.json ----------------------------------------------------------------------------------

def _spawn_entries(labels=("a", "b"), placement="kids") -> tuple[dict[str, Any], dict[str, Any]]:
    """A valid spawn.json for children ``labels`` and their payload files."""
    entries, files = [], {}
    for label, job_id in zip(labels, KIDS, strict=False):
        key = f"{label}--{job_id}"
        entries.append({"label": label, "job_id": job_id, "job_key": key, "placement": placement,
                        "payload": f"jobs/{key}"})
        files[f"children/jobs/{key}/job.json"] = JobSpec(name="c", workflow="w", runner_path="run.sh").to_bytes()
        files[f"children/jobs/{key}/run.sh"] = b"#!/bin/sh\n"
    return {"format": "httk-workflow-spawn", "format_version": 1, "children": entries}, files


def _outcome_base(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """A valid outcome.json of a random action, and the rest of its tree."""
    common = {**OUTCOME, "attempt_id": "x", "step": "main", "runner_steps": ["main", "next"]}
    choice = rng.randrange(7)
    if choice == 0:
        return {**common, "action": "succeed"}, {}
    if choice == 1:
        failure = {"code": "bad_input", "message": "m", "details": {"k": [1, 2]}, "retryable": rng.random() < 0.5}
        return {**common, "action": "fail", "failure": failure}, {}
    if choice == 2:
        return {**common, "action": "advance", "next_step": "next", "priority": 5}, {}
    if choice in (3, 4):
        return {**common, "action": "retry" if choice == 3 else "pause", "reason": "because"}, {}
    spawn, files = _spawn_entries()
    when = rng.choice([("all_succeeded", None), ("at_least", 1), ("any_succeeded", None), ("all_terminal", None)])
    join = {"step": "next", "when": when[0], "count": when[1], "on_impossible": None, "children": ["a", "b"]}
    return {**common, "action": "wait", "join": join}, {"children/spawn.json": spawn, **files}


def test_fuzz_outcome_json():
    campaign("outcome.json", "outcome_json", 0.14, lambda rng, notes: _outcome(rng, notes, Bench(), None))


def _outcome(rng, notes, bench: Bench, special: Special | None) -> None:
    document, rest = _outcome_base(rng)
    notes.append(f"{document['action']} outcome")
    content = bad_document(rng, notes, document, special)
    before = bench.outside_snapshot()
    bad = bench.submit(tree=first_attempt(lambda launch: {"outcome.json": content, **rest}))
    bench.run_beside_good()
    ended(bench, bad.job_id, ("succeeded", "failed", "paused"))
    check_clean(bench, [bad.job_id], before, "outcome")


# -- spawn.json and a child's job.json ---------------------------------------------------------------

def test_fuzz_spawn_json():
    campaign("spawn.json", "spawn_json", 0.12, lambda rng, notes: _spawn(rng, notes, Bench(), None))


def _spawn(rng, notes, bench: Bench, special: Special | None) -> None:
    spawn, files = _spawn_entries(("a", "b", "c")[: rng.randint(1, 3)], rng.choice(("kids", "p", "a/b")))
    labels = [entry["label"] for entry in spawn["children"]]
    wait = rng.random() < 0.5
    final = ({**OUTCOME, "action": "wait", "join": {"step": "next", "children": labels}} if wait
             else {**OUTCOME, "action": "succeed"})
    tree: dict[str, Any] = {"outcome.json": final, **files}
    if rng.random() < 0.7:
        tree["children/spawn.json"] = bad_document(rng, notes, spawn, special)
    else:
        tree["children/spawn.json"] = spawn
        child = rng.choice([name for name in files if name.endswith("/job.json")])
        notes.append(f"mutate {child}")
        tree[child] = bad_document(rng, notes, codec.decode(files[child], child), special)
    before = bench.outside_snapshot()
    parent = bench.submit(tree=first_attempt(lambda launch: tree))
    bench.run_beside_good()
    made = [job_id for job_id in KIDS if bench.marker(job_id) is not None]
    # A child this manager cannot serve (a mutated executor or pool) stays put, and its parent waits for it.
    unserved = [job_id for job_id in made if ended(bench, job_id, ("succeeded", "failed", "submitted", "ready"))
                in ("submitted", "ready")]
    kind = ended(bench, parent.job_id, ("succeeded", "failed", "paused", *(("waiting",) if unserved else ())))
    if kind == "failed":
        failure = bench.store.read_frame(bench.marker(parent.job_id)).failure
        if failure.code == "protocol_error":
            assert not made, f"a refused spawn created children {made}"
    check_clean(bench, [parent.job_id, *made], before, "spawn")


# -- transaction/manifest.json --------------------------------------------------------------------------

def test_fuzz_transaction_manifest():
    campaign("manifest.json", "manifest", 0.12, lambda rng, notes: _manifest(rng, notes, Bench(), None))


def _manifest(rng, notes, bench: Bench, special: Special | None) -> None:
    staged = {"op-0001": {"": b"a\n"}, "op-0002": {"x.txt": b"x\n", "sub/y.txt": b"y\n"}}
    operations = [{"id": "op-0001", "op": "put", "destination": "results/a.txt", "source": "files/op-0001"},
                  {"id": "op-0002", "op": "put", "destination": "tree", "source": "files/op-0002"},
                  {"id": "op-0003", "op": "remove", "destination": "keep.txt", "missing_ok": False}]
    operations = operations[: rng.randint(1, 3)]
    manifest = {"format": "httk-workflow-transaction", "format_version": 1, "operations": operations}
    tree: dict[str, Any] = {"outcome.json": {**OUTCOME, "action": "succeed"}}
    for op_id, members in staged.items():
        for relative, data in members.items():
            tree[f"transaction/files/{op_id}/{relative}".rstrip("/")] = data
    if special is not None and rng.random() < 0.5 or special is None and rng.random() < 0.2:
        tree["transaction/manifest.json"] = manifest
        name = rng.choice([name for name in tree if name.startswith("transaction/files/")])
        what = special.what if special is not None else rng.choice(SPECIALS)
        notes.append(f"a {what} as the staged {name}")
        tree[name] = Special(what, b"staged\n")
    else:
        tree["transaction/manifest.json"] = bad_document(rng, notes, manifest, special)
    job = bench.submit(JobSpec(name="j", workflow="w", runner_path="run.sh", data_mode="transactional"),
                       tree=first_attempt(lambda launch: tree))
    data = f"{bench.handle.layout.data_dir(job.job_id)}/current"
    bench.fs.write_atomic(f"{data}/keep.txt", b"keep\n", durable=False)
    original = {"keep.txt": b"keep\n"}
    before = bench.outside_snapshot()
    bench.run_beside_good()
    kind = ended(bench, job.job_id, ("succeeded", "failed"))
    held = bench.snapshot(data)
    odd = [path for path, what in held.items() if what != "dir" and len(what) != 16]
    assert not odd, f"the data tree holds links or special files: {odd[:3]}"
    found = {path[len(data) + 1:]: bench.fs.read_document(path, limit=None) for path, what in held.items()
             if what != "dir"}
    # Only when the manifest itself is the valid one is the result predictable: each operation once, in order.
    if tree["transaction/manifest.json"] is manifest:
        [control] = list(bench.fs.scandir(bench.handle.layout.job_attempts(job.job_id)))
        actual = staged_content(bench, f"{control.path}/outcome.ready/transaction/files")
        prefixes, model, complete = [dict(original)], dict(original), True
        for operation in operations:
            if operation["op"] == "put" and actual.get(operation["id"]) is None:
                complete = False  # a staged FIFO, socket or link: refused
                break
            if not apply_model(model, operation, actual):  # type: ignore[arg-type]
                complete = False
                break
            prefixes.append(dict(model))
        if complete:
            assert kind == "succeeded", "a valid transaction was not committed"
            assert found == prefixes[-1], f"the committed data {sorted(found)} is not the manifest applied once"
        else:
            assert kind == "failed", f"an outcome staging {notes[-1]} was committed"
            assert found in prefixes, f"the data {sorted(found)} is no prefix of the operations applied once"
    elif kind == "failed" and not isinstance(tree["transaction/manifest.json"], bytes):
        assert found == original, f"a refused manifest changed the data: {sorted(found)}"
    entries = {entry.name for entry in bench.fs.scandir(bench.handle.layout.data_dir(job.job_id))}
    assert entries <= {"current", "trash"}, f"data/{job.job_id} holds {sorted(entries)}"
    assert bench.read_everything([job.job_id])["clean"]
    check_outside(bench, before)


# -- requests --------------------------------------------------------------------------------------

REQUEST_NAMES = ("junk", "x.json.tmp", ".hidden.json", "a b.json", "new\nline.json", "UPPER.JSON", "x" * 250)


def test_fuzz_requests():
    campaign("request", "requests", 0.10, lambda rng, notes: _request(rng, notes, Bench(), None))


def _request(rng, notes, bench: Bench, special: Special | None) -> None:
    target = bench.submit(placement="t")
    action = rng.choice(("pause", "cancel", "override_step"))
    view = bench.store.read_job(target)
    document = publish_request(bench.handle, view, action, operator="fuzz", reason="r",
                               step="main" if action == "override_step" else None)
    ready = f"{bench.handle.layout.requests}/ready"
    name = f"{document['request_id']}.json"
    content = bad_document(rng, notes, document, special)
    if special is None and rng.random() < 0.1:
        bench.fs.remove(f"{ready}/{name}")
        name = rng.choice(REQUEST_NAMES if not bench.posix else REQUEST_NAMES[:4])
        notes.append(f"named {name!r}")
    bench.place(f"{ready}/{name}", content)
    before = bench.outside_snapshot()
    bench.run_beside_good()
    ended(bench, target.job_id, ("succeeded", "paused", "cancelled", "failed"))
    layout = bench.handle.layout.requests
    if bench.fs.lstat(f"{ready}/{name}") is not None:
        # Only a request for an executor this manager does not serve may wait for another manager.
        try:
            parsed = codec.decode(content, name) if isinstance(content, bytes) else None
        except codec.DocumentError:
            parsed = None
        executor = parsed.get("executor") if isinstance(parsed, dict) else None
        assert isinstance(executor, str) and executor != "path" and name.endswith(".json"), \
            f"request entry {name!r} was left in ready/"
    else:
        homes = [where for where in ("applied", "retired", "quarantine") if bench.fs.lstat(f"{layout}/{where}/{name}")]
        assert len(homes) == 1, f"request entry {name!r} ended in {homes}"
        if homes == ["quarantine"]:
            record = f"{layout}/quarantine/{name}"
            audit = f"{record}.audit.json"
            reason_of = audit if bench.fs.lstat(audit) is not None else record
            assert "quarantine_reason" in codec.decode_object(bench.fs.read_document(reason_of), reason_of)
    report = bench.read_everything([target.job_id])
    assert report["clean"], f"a bad request damaged the workspace: {report['problems'][:2]}"
    check_outside(bench, before)


# -- format.json and settings.json ------------------------------------------------------------------

def test_fuzz_format_json():
    campaign("format.json", "format_json", 0.06, lambda rng, notes: _format(rng, notes, Bench(), None))


def _format(rng, notes, bench: Bench, special: Special | None) -> None:
    bench.add_good()
    path = bench.handle.layout.format_file
    bench.place(path, bad_document(rng, notes, codec.decode(bench.fs.read_bytes(path), path), special))
    before = bench.outside_snapshot()
    handle, refused = designed(lambda: WorkspaceService(bench.ports).open(bench.root))
    codes = (2,) if refused is not None else (0, 1)
    for args in (("workspace", "status"), ("workspace", "fsck"), ("workspace", "settings", "show"),
                 ("workspace", "policy", "show"), ("job", "list")):
        bench.cli(*args, bench.root, codes=codes)
    if refused is not None:
        bench.cli("run", bench.root, codes=(2,))  # refused before any manager starts
    else:
        bench.handle = handle
        bench.run()
        bench.check_good()
    check_outside(bench, before)


def test_fuzz_settings_json():
    campaign("settings.json", "settings_json", 0.06, lambda rng, notes: _settings(rng, notes, Bench(), None))


def _settings(rng, notes, bench: Bench, special: Special | None) -> None:
    for name, value in {"manager.workers": 2, "vasp.command": "vasp_std", "a.b": [1, {"c": "d"}], "flag": True,
                        "n": 1.5}.items():
        bench.handle.set_setting(name, value)
    path = bench.handle.layout.settings_file
    bench.place(path, bad_document(rng, notes, bench.handle.settings(), special))
    bench.add_good()
    before = bench.outside_snapshot()
    settings, refused = designed(bench.handle.settings)
    bench.cli("workspace", "settings", "show", bench.root, codes=(2,) if refused else (0,))
    if refused is not None:
        bench.cli("run", bench.root, codes=(2,))
    # A manager already running meets the bad file at its next claim: an unreadable one leaves each job
    # ready and refused by name; a bad value fails the attempt with setting_invalid.
    manager = bench.run()
    for marker in bench.good:
        kind = ended(bench, marker.job_id, ("succeeded", "failed") if refused is None else ("ready",))
        if kind == "ready":
            assert "settings.json" in manager.refused.get(str(marker.key), ""), f"job {marker.key} not refused"
    check_outside(bench, before)


# -- context.json (the SDK reads it) -------------------------------------------------------------------

_CONTEXT: list[dict[str, Any]] = []


def _valid_context() -> dict[str, Any]:
    if not _CONTEXT:
        bench = Bench()

        def capture(launch):
            _CONTEXT.append(codec.decode(bench.fs.read_bytes(launch.env["HTTK_WORKFLOW_CONTEXT"]), "context.json"))

        bench.submit(tree=lambda launch: capture(launch))
        bench.run()
    return _CONTEXT[0]


def test_fuzz_context_json():
    campaign("context.json", "context_json", 0.06, lambda rng, notes: _context(rng, notes, None, None))


def _context(rng, notes, directory: str | None, special: Special | None) -> None:
    if directory is None:  # in memory: the parser the SDK applies to the bytes
        content = mutate_document(rng, _valid_context(), notes)
        document, refused = designed(lambda: codec.decode(content, "context.json"))
        if refused is None:
            designed(lambda: AttemptContext.from_json(document))
        return
    bench = Bench(directory)
    path = f"{bench.root}/context.json"
    bench.place(path, bad_document(rng, notes, _valid_context(), special))
    designed(lambda: AttemptContext.load(path))


# -- marker names ----------------------------------------------------------------------------------

def _marker_names(rng: random.Random, marker: Marker, posix: bool) -> str:
    key, priority, ref = str(marker.key), f"p{marker.priority}", marker.ref
    generation = marker.name.rsplit(".", 3)[2]
    parts = ref.split("~")
    big = str(2**40)
    names = [
        f"{key}.p+{marker.priority}.{generation}.{ref}", f"{key}.p0{marker.priority}.{generation}.{ref}",
        f"{key}.p-0.{generation}.{ref}", f"{key}.p{'9' * 30}.{generation}.{ref}", f"{key}.p{10**250}.g1.{ref}"[:250],
        f"{key}.{priority}.g{'z' * 14}.{ref}", f"{key}.{priority}.g00.{ref}", f"{key}.{priority}.gA.{ref}",
        f"{key}.{priority}.g-1.{ref}", f"{key}.{priority}.{generation}.", f"{key}.{priority}.{generation}",
        f"{key.upper()}.{priority}.{generation}.{ref}", f"a--b--{marker.job_id}.{priority}.{generation}.{ref}",
        f"{marker.job_id[:-1]}z.{priority}.{generation}.{ref}", f".{priority}.{generation}.{ref}",
        f".{marker.name}.tmp.0123", f"{marker.name}.json", f"{marker.name} ", "x", "..x", "-",
        f"{key}.{priority}.g1.init", f"{key}.{priority}.g0.{'0' * 12}~1~16~100~abcdef01",
    ]
    if len(parts) == 5:
        writer, segment, offset, length, prefix = parts
        for changed in ((writer, "0", offset, length, prefix), (writer, "9" * 19, offset, length, prefix),
                        (writer, segment, str(2**63), length, prefix), (writer, segment, offset, big, prefix),
                        (writer, segment, offset, "0", prefix), (writer, segment, offset, length, "zzzzzzzz"),
                        (writer, segment, "1", length, prefix), (writer.upper(), segment, offset, length, prefix),
                        (writer, segment, offset, str(int(length) + 1), prefix), (writer, segment, offset, length)):
            names.append(f"{key}.{priority}.{generation}.{'~'.join(changed)}")
    if not posix:
        names += [f"{marker.name}\n", f"{key}\x00.{priority}.{generation}.{ref}", "k" * 300]
    return rng.choice([name for name in names if name != marker.name])


def _advanced(bench: Bench, rng: random.Random, name: str = "m-setup") -> Marker:
    """A job in a random state with history: submitted (g0), ready (pool elsewhere), paused, or succeeded."""
    state = rng.choice(("submitted", "ready", "paused", "succeeded"))
    spec = JobSpec(name="j", workflow="w", runner_path="run.sh", pool="elsewhere" if state == "ready" else "default")
    action = {"paused": {"outcome.json": {**OUTCOME, "action": "pause", "reason": "r"}}}.get(state)
    marker = bench.submit(spec, tree=lambda launch: action)
    if state != "submitted":
        bench.run(name)
    found = bench.marker(marker.job_id)
    assert found is not None and found.kind.value == state
    return found


def test_fuzz_marker_names():
    campaign("marker name", "marker_names", 0.10, lambda rng, notes: _marker(rng, notes, Bench(), None))


def _marker(rng, notes, bench: Bench, special: Special | None) -> None:
    target = _advanced(bench, rng)
    path = bench.store.marker_path(target)
    directory = path.rsplit("/", 1)[0]
    odd: str | None = None
    replaced = False
    if special is not None or rng.random() < 0.15:
        what = special.what if special is not None else rng.choice((*SPECIALS, "non-empty", "deleted"))
        notes.append(f"the {target.kind.value} marker is a {what}")
        replaced = what != "empty"  # an empty regular file is a marker
        if what == "deleted":
            bench.fs.remove(path)
        else:
            bench.place(path, b"not empty\n" if what == "non-empty" else Special(what))
    else:
        name = _marker_names(rng, target, bench.posix)
        where = rng.choice(("rename", "rename", "extra", "no placement", "unknown kind"))
        notes.append(f"{where}: {target.kind.value} marker named {name!r}")
        if where == "no placement":
            directory = bench.handle.layout.kind_dir(target.kind)
        elif where == "unknown kind":
            directory = f"{bench.handle.layout.state}/bogus/{target.placement}"
        odd = f"{directory}/{name}"
        if where == "rename":
            bench.fs.rename(path, odd, durable=False)
        else:
            bench.fs.write_atomic(odd, b"", durable=False)
        try:
            parsed = Marker.parse(target.kind, target.placement, name)
            if parsed.name == name and where in ("rename", "extra"):
                odd = None  # a canonical marker name: a job (maybe without payload), not junk
        except MarkerNameError:
            pass
    bench.add_good()
    before = bench.outside_snapshot()
    bench.run()
    bench.check_good()
    report = bench.read_everything([target.job_id])
    check_codes(report)
    if odd is not None and "/bogus/" not in odd:
        assert any(odd in problem["path"] for problem in report["problems"]), \
            f"fsck is silent about {odd!r} in the state tree: {report['problems'][:2]}"
    if replaced:
        assert not report["clean"], "fsck says clean about a marker that is not a zero-length regular file"
    repair(bench, [target.job_id])
    check_outside(bench, before)


# -- journal bytes -----------------------------------------------------------------------------------

def test_fuzz_journal_bytes():
    campaign("journal", "journal_bytes", 0.10, lambda rng, notes: _journal(rng, notes, Bench(), None))


def _journal(rng, notes, bench: Bench, special: Special | None) -> None:
    targets = [_advanced(bench, rng, f"m-setup{index}") for index in range(2)]
    writers = sorted(bench.fs.scandir(bench.handle.layout.journal), key=lambda entry: entry.name)
    if not writers:
        notes.append("no frame was written")
        return
    writer = writers[0]
    segment = f"{writer.path}/1.journal"
    data = bench.fs.read_bytes(segment)
    frames = segment_frames(data)
    choice = rng.random()
    if special is not None or choice < 0.1:
        what = special.what if special is not None else rng.choice(SPECIALS)
        notes.append(f"the segment is a {what}")
        bench.place(segment, Special(what, data))
    elif choice < 0.4 and frames:
        # A forged frame: hostile JSON with a valid checksum, and the marker re-pointed at it.
        victim = rng.choice([marker for marker in targets if marker.generation > 0] or targets)
        document = bench.store.reader.read(victim.ref) if victim.generation else {}
        body = render(mutate_tree(rng, document, notes)).rstrip(b"\n")
        checksum = hashlib.sha256(body).hexdigest()
        frame = len(body).to_bytes(8, "big") + body + bytes.fromhex(checksum) + len(body).to_bytes(8, "big")
        notes.insert(0, f"forged frame for {victim.kind.value} g{victim.generation}")
        offset = len(data)
        bench.fs.write_atomic(segment, data + frame, durable=False)
        ref = f"{writer.name}~1~{offset}~{len(frame)}~{checksum[:8]}"
        generation = victim.generation or 1
        moved = attrs.evolve(victim, generation=generation, ref=ref)
        bench.fs.rename(bench.store.marker_path(victim), bench.store.marker_path(moved), durable=False)
    elif choice < 0.55 and frames:
        offset, total = rng.choice(frames)
        value = rng.choice((2**40, 2**64 - 1, 0, 47, total - 48 + 1))
        notes.append(f"the length of the frame at {offset} says {value}")
        at = offset if rng.random() < 0.5 else offset + total - 8
        bench.fs.write_atomic(segment, data[:at] + value.to_bytes(8, "big") + data[at + 8:], durable=False)
    else:
        bench.fs.write_atomic(segment, mutate_bytes(rng, data, notes), durable=False)
    if rng.random() < 0.1:
        stray = rng.choice(("0.journal", "x.journal", f"{'9' * 25}.journal", "2.journal"))
        notes.append(f"a stray segment {stray}")
        bench.fs.write_atomic(f"{writer.path}/{stray}", data[:40], durable=False)
    # The damage happened between managers: the next one writes with a journal writer of its own.
    bench.handle = WorkspaceService(bench.ports).open(bench.root)
    markers = [bench.marker(marker.job_id) for marker in targets]
    damaged = []
    for marker in markers:
        try:
            bench.store.read_frame(marker)
        except JobDamage as damage:
            damaged.append((marker, damage.code))
    bench.add_good()
    before = bench.outside_snapshot()
    manager = bench.run()
    bench.check_good()
    for marker, code in damaged:
        if marker.kind in TICK_ORDER:
            assert code in manager.refused.get(str(marker.key), ""), f"damaged job {marker.key} was not refused"
    report = bench.read_everything([marker.job_id for marker in markers])
    check_codes(report)
    for marker, code in damaged:
        path = bench.store.marker_path(marker)
        assert any(problem["path"] == path for problem in report["problems"]), \
            f"fsck is silent about the {code} frame of {marker.relative_path()}"
    repair(bench, [marker.job_id for marker in markers])
    check_outside(bench, before)


# -- non-regular files, on real files ----------------------------------------------------------------------

REAL_KINDS = ("job.json", "outcome.json", "spawn.json", "manifest.json", "request", "format.json", "settings.json",
              "context.json", "marker", "journal")


def test_fuzz_non_regular_files_on_real_files(tmp_path: Path):
    """The same invariants with a directory, FIFO, socket, symlink or sparse oversized file on a real filesystem."""
    cases = {"job.json": _job_json, "outcome.json": _outcome, "spawn.json": _spawn, "manifest.json": _manifest,
             "request": _request, "format.json": _format, "settings.json": _settings, "marker": _marker,
             "journal": _journal}

    def body(rng: random.Random, notes: list[str]) -> None:
        kind, what = rng.choice(REAL_KINDS), rng.choice(SPECIALS)
        notes.append(f"{kind} on real files")
        directory = tempfile.mkdtemp(dir=tmp_path)
        try:
            if kind == "context.json":
                _context(rng, notes, directory, Special(what))
            else:
                cases[kind](rng, notes, Bench(directory), Special(what))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    campaign("real files", "non_regular", 0.06, body)
