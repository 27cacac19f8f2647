"""Requests against one state apply in publication order; a quarantined entry keeps its published bytes.

Spec 000 "Inspect and control": a request captures the exact marker it was made
against, so of two requests against the same state the one published first applies
and the later one is retired as stale, with its reason.
"""

from __future__ import annotations

from collections import Counter

from httk.workflow import codec
from httk.workflow.domain.lifecycle import Event, StateKind
from httk.workflow.engine.requests import PER_TICK
from httk.workflow.operations.diagnosis import why
from httk.workflow.operations.requests import publish_request
from httk.workflow.testing import FakeProcessControl, memory_manager, memory_workspace, scripted_runner

REQUESTS = "/ws/.httk-workflow/requests"


def paused_job():
    ports, handle, [marker] = memory_workspace()
    frame = handle.store.read_job(marker).frame
    for event in (Event.REGISTER, Event.OPERATOR_PAUSE):
        marker, frame = handle.store.transition(marker, frame, event)
    return ports, handle, marker


def publish_as(ports, handle, marker, name, action, **options):
    """Publish a request against ``marker`` and rename its ready entry to ``name``."""
    document = publish_request(handle, handle.store.read_job(marker), action, operator="me", reason=action, **options)
    ports.fs.rename(f"{REQUESTS}/ready/{document['request_id']}.json", f"{REQUESTS}/ready/{name}", durable=True)
    return document


def serve(handle):
    proc = FakeProcessControl(handle.ports.clock, scripted_runner(handle.fs), uid=handle.fs.uid)
    manager = memory_manager(handle, process=proc, workers=0)
    manager.publish_manifest()
    manager.heartbeat(force=True)
    manager.requests.process()
    return manager


def record(ports, where, name):
    return codec.decode_object(ports.fs.read_bytes(f"{REQUESTS}/{where}/{name}"), name)


def listing(ports, where):
    return sorted(entry.name for entry in ports.fs.scandir(f"{REQUESTS}/{where}"))


def test_the_earlier_of_two_requests_against_one_state_wins_whatever_the_names():
    ports, handle, paused = paused_job()
    # Published first, but its entry name sorts last (a uuid4 name sorts anywhere).
    publish_as(ports, handle, paused, "zz-override.json", "override_step", step="second")
    ports.clock.advance(1.0)
    publish_as(ports, handle, paused, "aa-continue.json", "continue")
    serve(handle)
    assert listing(ports, "applied") == ["zz-override.json"]
    assert listing(ports, "retired") == ["aa-continue.json"]
    retired = record(ports, "retired", "aa-continue.json")
    assert retired["retired_reason"] == f"job moved on from paused generation {paused.generation}"
    [ready] = list(handle.store.iter_markers(StateKind.READY))
    assert handle.store.read_frame(ready).step == "second"


def test_a_request_without_created_at_counts_from_when_its_file_was_written():
    ports, handle, paused = paused_job()
    first = publish_as(ports, handle, paused, "zz-first.json", "continue")
    # Rewritten without created_at, at the instant the file was written.
    ports.fs.write_atomic(f"{REQUESTS}/ready/zz-first.json",
                          codec.encode({key: value for key, value in first.items() if key != "created_at"}),
                          durable=True)
    ports.clock.advance(1.0)
    publish_as(ports, handle, paused, "aa-second.json", "override_step", step="second")
    serve(handle)
    assert listing(ports, "applied") == ["zz-first.json"]
    assert listing(ports, "retired") == ["aa-second.json"]


def test_equal_publication_instants_fall_back_to_the_name():
    ports, handle, paused = paused_job()
    publish_as(ports, handle, paused, "bb.json", "continue")
    publish_as(ports, handle, paused, "aa.json", "override_step", step="second")
    serve(handle)
    assert listing(ports, "applied") == ["aa.json"] and listing(ports, "retired") == ["bb.json"]


def test_an_unreadable_request_is_quarantined_with_its_published_bytes():
    ports, handle, _paused = paused_job()
    ports.fs.write_atomic(f"{REQUESTS}/ready/bad.json", b"not json", durable=True)
    manager = serve(handle)
    assert listing(ports, "quarantine") == ["bad.json", "bad.json.audit.json"]
    assert ports.fs.read_bytes(f"{REQUESTS}/quarantine/bad.json") == b"not json"
    audit = record(ports, "quarantine", "bad.json.audit.json")
    assert audit["entry"] == "bad.json" and audit["quarantine_by"] == manager.id
    assert audit["quarantine_reason"].startswith("unreadable request: ")


def test_a_request_of_the_wrong_shape_is_quarantined_as_published_and_names_its_job():
    ports, handle, paused = paused_job()
    document = publish_as(ports, handle, paused, "odd.json", "continue")
    data = codec.encode({**document, "action": "explode"})
    ports.fs.write_atomic(f"{REQUESTS}/ready/odd.json", data, durable=True)
    serve(handle)
    assert ports.fs.read_bytes(f"{REQUESTS}/quarantine/odd.json") == data
    audit = record(ports, "quarantine", "odd.json.audit.json")
    assert audit["job_id"] == paused.job_id and audit["request_id"] == document["request_id"]
    assert "unreadable request" in audit["quarantine_reason"]
    assert len(list(handle.store.iter_markers(StateKind.PAUSED))) == 1  # nothing applied
    # job why reads the audit record, and points at the entry as it was published.
    [line] = [line for line in why(handle, paused)["lines"] if line.startswith("quarantined request")]
    assert line.startswith("quarantined request explode: unreadable request")
    assert line.endswith("(as published: requests/quarantine/odd.json)")


def published_entries(ports, handle, paused, count, prefix, executor=None):
    """``count`` requests against ``paused`` under names ``<prefix><i>.json``, each a little later than the last.

    With ``executor`` each is rewritten as a request for that executor (one no manager here serves).
    """
    view = handle.store.read_job(paused)
    for i in range(count):
        document = publish_request(handle, view, "continue", operator="me", reason=prefix)
        name = f"{REQUESTS}/ready/{prefix}{i:03d}.json"
        ports.fs.rename(f"{REQUESTS}/ready/{document['request_id']}.json", name, durable=True)
        if executor is not None:
            ports.fs.write_atomic(name, codec.encode({**document, "executor": executor}), durable=True)
        ports.clock.advance(0.01)


def test_a_flood_beyond_one_tick_is_served_oldest_first_across_ticks():
    """The entry published after a full tick's worth waits for the next tick, whatever its name.

    Under name order ``a-late`` would go first; under a cursor over names or newest-first,
    one of the ``m…`` entries would still be waiting after the first tick.
    """
    ports, handle, paused = paused_job()
    published_entries(ports, handle, paused, PER_TICK, "m")
    ports.clock.advance(1.0)
    published_entries(ports, handle, paused, 1, "a-late")
    manager = serve(handle)
    assert listing(ports, "ready") == ["a-late000.json"] and manager.requests.pending
    manager.requests.process()
    assert listing(ports, "ready") == []


def test_each_ready_entry_is_stat_ed_once_across_ticks(monkeypatch):
    ports, handle, paused = paused_job()
    proc = FakeProcessControl(handle.ports.clock, scripted_runner(handle.fs), uid=handle.fs.uid)
    # A request for an executor this manager does not serve stays in ready, listed on every tick.
    published_entries(ports, handle, paused, 3 * PER_TICK, "r", "nobody")
    manager = memory_manager(handle, process=proc, workers=0)
    stat_ed = Counter()
    real_lstat = ports.fs.lstat

    def lstat(path):
        if path.startswith(f"{REQUESTS}/ready/"):
            stat_ed[path.rsplit("/", 1)[-1]] += 1
        return real_lstat(path)

    monkeypatch.setattr(ports.fs, "lstat", lstat)
    for _ in range(5):
        manager.requests.process()
    assert len(stat_ed) == 3 * PER_TICK and set(stat_ed.values()) == {1}
    # A name that arrives is stat'ed once; one that leaves is forgotten, so its return is a new entry.
    ports.fs.remove(f"{REQUESTS}/ready/r000.json")
    published_entries(ports, handle, paused, 1, "new", "nobody")
    for _ in range(3):
        manager.requests.process()
    assert stat_ed["new000.json"] == 1 and set(stat_ed.values()) == {1}
    published_entries(ports, handle, paused, 1, "r", "nobody")  # r000.json again, a new file
    manager.requests.process()
    manager.requests.process()
    assert stat_ed.pop("r000.json") == 2 and set(stat_ed.values()) == {1}


def test_an_entry_named_like_another_entrys_audit_is_never_overwritten():
    ports, handle, _paused = paused_job()
    ports.fs.write_atomic(f"{REQUESTS}/ready/x.json.audit.json", b"entry one", durable=True)
    serve(handle)  # quarantined first, as published, under its own name
    ports.fs.write_atomic(f"{REQUESTS}/ready/x.json", b"entry two", durable=True)
    serve(handle)
    assert ports.fs.read_bytes(f"{REQUESTS}/quarantine/x.json.audit.json") == b"entry one"
    assert ports.fs.read_bytes(f"{REQUESTS}/quarantine/x.json") == b"entry two"
    [audit] = [name for name in listing(ports, "quarantine")
               if name.startswith("x.json.") and name.endswith(".audit.json") and name.count(".") == 4]
    assert record(ports, "quarantine", audit)["quarantined_as"] == "x.json"
