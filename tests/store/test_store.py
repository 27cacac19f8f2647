"""The protocol store through the in-memory filesystem: markers, frames, damage, races."""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.domain.frames import ChildRef, Owner
from httk.workflow.domain.lifecycle import Event, IllegalTransition, StateKind
from httk.workflow.operations.submission import SubmissionError, submit
from httk.workflow.protocol import JobSpec
from httk.workflow.store.journal import RecordRef
from httk.workflow.store.markers import Marker, MarkerNameError
from httk.workflow.store.policy import PolicyError
from httk.workflow.store.store import JobDamage, LostRace, current_kinds
from httk.workflow.store.workspaces import WorkspaceError, WorkspaceService
from memory_support import write_payload


def submitted(handle, placement="p/a"):
    payload = write_payload(handle.fs, "/src/payload")
    return submit(handle, payload, placement).marker


def test_marker_names_round_trip_with_dotted_tags():
    marker = Marker.parse("ready", "a/b", "my.tag--00000000-0000-4000-8000-000000000001.p-5.gz.init")
    assert marker.key.tag == "my.tag" and marker.priority == -5 and marker.generation == 35
    assert Marker.parse("ready", "a/b", marker.name) == marker


@pytest.mark.parametrize("name", ["x", "a.p1.g1", "k.pX.g1.init", "00000000-0000-4000-8000-000000000001.p1.g01.r"])
def test_unparseable_marker_names(name):
    with pytest.raises(MarkerNameError):
        Marker.parse("ready", "a", name)


def test_submit_then_transitions_read_back(handle):
    marker = submitted(handle)
    store = handle.store
    view = store.read_job(marker)
    assert view.frame.generation == 0 and view.spec.name == "job"
    ready, frame = store.transition(marker, view.frame, Event.REGISTER, step="main")
    assert ready.kind == StateKind.READY and ready.generation == 1
    assert store.read_frame(ready) == frame
    claimed, frame2 = store.transition(ready, frame, Event.CLAIM, owner=Owner("m", "h", 30.0, 0.0))
    assert frame2.previous_record_ref == ready.ref
    assert [m.job_id for m in store.iter_markers(StateKind.CLAIMED)] == [marker.job_id]


def test_a_transition_carries_the_state_but_not_the_previous_frames_attribution(handle):
    """reason, operator, operator_key, request_id and the transfer/cancellation notes describe one transition."""
    marker = submitted(handle)
    store = handle.store
    frame = store.read_job(marker).frame
    note = {"id": "t-0123456789ab", "origin": "submitted", "from": "local", "to": "ci:walk"}
    ready, frame = store.transition(marker, frame, Event.REGISTER, step="main", reason="transfer t-0123456789ab",
                                    operator="rar", operator_key="k1", request_id="r1",
                                    notes={"transfer": note, "cancellation": {"verified": "x"}, "keep": 1})
    assert (frame.reason, frame.operator, frame.notes["transfer"]) == ("transfer t-0123456789ab", "rar", note)
    claimed, frame = store.transition(ready, frame, Event.CLAIM, owner=Owner("m", "h", 30.0, 0.0))
    assert (frame.reason, frame.operator, frame.operator_key, frame.request_id) == (None, None, None, None)
    # The job's state goes on: step, owner, and notes that are not one transition's.
    assert frame.step == "main" and frame.owner.manager_id == "m" and frame.notes == {"keep": 1}
    _, frame = store.transition(claimed, frame, Event.LAUNCH, reason="given")
    assert frame.reason == "given" and frame.owner.manager_id == "m"


def test_a_requested_pause_is_attributed_to_its_request_until_it_completes(handle):
    marker = submitted(handle)
    store = handle.store
    ready, frame = store.transition(marker, store.read_job(marker).frame, Event.REGISTER, step="main")
    claimed, frame = store.transition(ready, frame, Event.CLAIM, owner=Owner("m", "h", 30.0, 0.0))
    running, frame = store.transition(claimed, frame, Event.LAUNCH)
    asked = {"operator": "rar", "operator_key": "k1", "reason": "maintenance", "request_id": "r1"}
    running, frame = store.transition(running, frame, Event.DEFER_PAUSE, pause_requested=True, **asked)
    committing, frame = store.transition(running, frame, Event.PUBLISH)
    assert {name: getattr(frame, name) for name in asked} == asked  # the runner's publish is not the pause
    paused, frame = store.transition(committing, frame, Event.COMMIT_PAUSE, pause_requested=False, owner=None)
    assert {name: getattr(frame, name) for name in asked} == asked  # the pause completed: still the request's
    _, frame = store.transition(paused, frame, Event.OPERATOR_CONTINUE)
    assert (frame.operator, frame.reason, frame.request_id) == (None, None, None)


def test_the_submit_entry_of_job_log_and_show_has_the_submission_time(handle):
    from httk.workflow.operations.inspection import job_log, show_job

    before = handle.ports.clock.now()
    marker = submitted(handle)
    first = job_log(handle, marker)[0]
    assert first["event"] == "submit" and first["generation"] == 0
    assert isinstance(first["created_at"], float) and first["created_at"] >= before - 1
    assert show_job(handle, marker)["created_at"] == first["created_at"]
    ready, _ = handle.store.transition(marker, handle.store.read_job(marker).frame, Event.REGISTER)
    assert job_log(handle, ready)[0]["created_at"] == first["created_at"]


def test_lost_race_is_reported_and_changes_nothing(handle):
    marker = submitted(handle)
    store = handle.store
    frame = store.read_job(marker).frame
    store.transition(marker, frame, Event.REGISTER)
    with pytest.raises(LostRace):
        store.transition(marker, frame, Event.REGISTER)
    assert [m.kind for m in store.iter_markers(StateKind.READY)] == [StateKind.READY]
    assert list(store.iter_markers(StateKind.SUBMITTED)) == []


def test_illegal_transition_names_kind_and_event(handle):
    marker = submitted(handle)
    frame = handle.store.read_job(marker).frame
    with pytest.raises(IllegalTransition, match="'launch'.*'submitted'"):
        handle.store.transition(marker, frame, Event.LAUNCH)


def corrupt(handle, marker, mutate):
    ref = RecordRef.parse(marker.ref)
    path = f"{handle.layout.journal}/{ref.writer}/{ref.segment}.journal"
    data = bytearray(handle.fs.read_bytes(path))
    mutate(data, ref, path)


@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("checksum_mismatch", "flip"),
        ("short_read", "truncate"),
        ("missing_segment", "delete"),
        ("reference_mismatch", "wrong_prefix"),
        ("identity_mismatch", "other_job"),
    ],
)
def test_damage_codes(handle, code, how):
    store = handle.store
    first = submitted(handle)
    ready, _frame = store.transition(first, store.read_job(first).frame, Event.REGISTER)
    ref = RecordRef.parse(ready.ref)
    path = f"{handle.layout.journal}/{ref.writer}/{ref.segment}.journal"
    data = bytearray(handle.fs.read_bytes(path))
    target = ready
    if how == "flip":
        data[ref.offset + 20] ^= 0xFF
        handle.fs.write_atomic(path, bytes(data), durable=True)
    elif how == "truncate":
        handle.fs.write_atomic(path, bytes(data[: ref.offset + 10]), durable=True)
    elif how == "delete":
        handle.fs.remove(path)
    elif how == "wrong_prefix":
        target = Marker(ready.kind, ready.placement, ready.key, ready.priority, ready.generation,
                        str(RecordRef(ref.writer, ref.segment, ref.offset, ref.length, "00000000")))
    elif how == "other_job":
        other = submitted(handle, "p/b")
        target = Marker(ready.kind, other.placement, other.key, ready.priority, ready.generation, ready.ref)
    with pytest.raises(JobDamage) as error:
        store.read_frame(target)
    assert error.value.code == code


def test_journal_rotates_at_segment_bytes(ports):
    handle = WorkspaceService(ports).init("/ws")
    handle.set_policy("journal_segment_bytes", 4096)
    handle = WorkspaceService(ports).open("/ws")
    marker = submitted(handle)
    frame = handle.store.read_job(marker).frame
    marker, frame = handle.store.transition(marker, frame, Event.REGISTER)
    for _ in range(12):
        marker, frame = handle.store.transition(marker, frame, Event.OPERATOR_PAUSE if marker.kind == StateKind.READY
                                                else Event.OPERATOR_CONTINUE)
    segments = list(handle.fs.scandir(f"{handle.layout.journal}/{RecordRef.parse(marker.ref).writer}"))
    assert len(segments) >= 2
    assert handle.store.read_frame(marker).generation == marker.generation


def test_policy_validation(handle):
    assert handle.policy["lease_seconds"] == 900.0
    handle.set_policy("retention.journal_days", 90)
    assert handle.policy["retention"] == {"journal_days": 90}
    with pytest.raises(PolicyError, match="unknown policy key 'nope'"):
        handle.set_policy("nope", 1)
    with pytest.raises(PolicyError, match="lease_seconds"):
        handle.set_policy("lease_seconds", "soon")
    with pytest.raises(PolicyError, match="retention.weeks"):
        handle.set_policy("retention.weeks", 1)
    document = codec.decode_object(handle.fs.read_bytes(handle.layout.format_file), "format.json")
    assert set(document["policy"]) == {"visibility_deadline_seconds", "lease_seconds", "journal_segment_bytes",
                                       "retention"}


def test_settings_names_and_values(handle):
    handle.set_setting("vasp.command", "srun vasp_std")
    assert handle.settings() == {"vasp.command": "srun vasp_std"}
    with pytest.raises(PolicyError, match="setting name"):
        handle.set_setting("Bad Name", 1)


def test_open_refuses_a_non_workspace(ports):
    with pytest.raises(WorkspaceError, match="not an httk-workflow workspace.*workspace init"):
        WorkspaceService(ports).open("/nowhere")


@pytest.mark.parametrize("placement", ["../x", "/abs", ".httk-workflow/x", "a/../b", ""])
def test_bad_placements_write_nothing(handle, placement):
    payload = write_payload(handle.fs, "/src/payload")
    before = handle.fs.operation_count
    with pytest.raises(SubmissionError):
        submit(handle, payload, placement)
    assert handle.fs.operation_count == before


def test_malformed_job_json_names_the_member(handle):
    payload = write_payload(handle.fs, "/src/payload")
    document = JobSpec(name="j", workflow="w", runner_path="r").to_document()
    document["retry_policy"]["maximum_total_attempts"] = "many"
    handle.fs.write_atomic(f"{payload}/job.json", codec.encode(document), durable=True)
    with pytest.raises(SubmissionError, match=r"job.json @ \$.retry_policy.maximum_total_attempts: expected int"):
        submit(handle, payload, "p")


def test_move_submission_consumes_the_source(handle):
    payload = write_payload(handle.fs, "/ws-src/payload")
    result = submit(handle, payload, "p", move=True)
    assert not handle.fs.exists(payload) and handle.fs.exists(f"{result.payload}/job.json")


def test_current_kinds_finds_a_child_that_moved_between_two_listings(handle):
    """A child resumed from paused/ into ready/ after ready/ was listed, before paused/ was: not unresolvable."""
    marker = submitted(handle)
    for event, changes in ((Event.REGISTER, {"step": "main"}), (Event.OPERATOR_PAUSE, {"reason": "x"})):
        marker, _ = handle.store.transition(marker, handle.store.read_job(marker).frame, event, **changes)
    assert marker.kind is StateKind.PAUSED
    child = ChildRef("kid", marker.job_id, str(marker.key), marker.placement)

    def resume() -> None:
        handle.store.transition(marker, handle.store.read_job(marker).frame, Event.OPERATOR_CONTINUE, reason="x")

    listed: list[str] = []
    for kind in StateKind:  # which directories the lookup lists, and in which order
        path = f"{handle.layout.kind_dir(kind)}/{marker.placement}"
        handle.fs.before_scandir(path, lambda path=path: listed.append(path))
    handle.fs.before_scandir(f"{handle.layout.kind_dir(StateKind.PAUSED)}/{marker.placement}", resume)
    assert current_kinds(handle.fs, handle.layout, [child]) == {marker.job_id: StateKind.READY}
    ready, paused = (f"{handle.layout.kind_dir(kind)}/{marker.placement}" for kind in (StateKind.READY,
                                                                                         StateKind.PAUSED))
    assert listed.index(ready) < listed.index(paused)  # the race the test means: ready/ was listed first
