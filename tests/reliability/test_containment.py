"""One containment for every item a manager handles, and refusals that describe the last observation.

The request pass runs each entry through the same containment as the per-job
passes (``services/containment.py``): an error of a type nobody anticipated
quarantines that request with the reason, logged once, and the manager goes on.
A job refused once (a transient read error) and handled later is no longer
counted as refused in the closing summary nor shown by ``job why``; a job whose
last observation was a refusal still is.
"""

from __future__ import annotations

import errno
import logging

from commit_support import add_job, manager, markers_of, publisher, workspace

from httk.workflow import codec
from httk.workflow.domain.lifecycle import StateKind
from httk.workflow.operations.requests import publish_request


class _Signer:
    """Signs with a made-up signature: the verifier below never gets as far as checking it."""

    def sign(self, data: bytes) -> dict[str, str]:
        return {"algorithm": "ed25519", "public_key": "AAAA", "value": "AAAA"}


class _BrokenVerifier:
    """A verifier port whose backend fails with a type the request pass never listed."""

    def verify(self, data: bytes, signature: object) -> str:
        raise RuntimeError("signature backend unavailable")


def test_a_request_that_raises_an_unexpected_type_is_quarantined_once_and_the_manager_goes_on(caplog):
    ports, handle = workspace()
    signed_job, plain_job = add_job(handle), add_job(handle)
    signed = publish_request(handle, handle.store.read_job(signed_job), "pause", operator="me", reason="r",
                             signer=_Signer())
    plain = publish_request(handle, handle.store.read_job(plain_job), "pause", operator="me", reason="r")
    m = manager(handle, ports, publisher(ports.fs, lambda launch: None))
    m.verifier = _BrokenVerifier()

    with caplog.at_level(logging.INFO, logger="httk.workflow.manager"):
        assert m.run() == 0

    requests = handle.layout.requests
    name = f"{signed['request_id']}.json"
    assert ports.fs.lstat(f"{requests}/ready/{name}") is None
    assert ports.fs.lstat(f"{requests}/claimed/{m.id}/{name}") is None
    audit = codec.decode_object(ports.fs.read_bytes(f"{requests}/quarantine/{name}.audit.json"), "audit")
    assert "RuntimeError: signature backend unavailable" in audit["quarantine_reason"]
    said = [record for record in caplog.records if signed["request_id"] in record.getMessage()]
    assert len(said) == 1, [record.getMessage() for record in said]
    # The manager went on: the other request applied, and the job of the quarantined one ran.
    assert ports.fs.lstat(f"{requests}/applied/{plain['request_id']}.json") is not None
    [paused] = markers_of(handle, plain_job.job_id)
    [ran] = markers_of(handle, signed_job.job_id)
    assert (paused.kind, ran.kind) == (StateKind.PAUSED, StateKind.SUCCEEDED)


def test_a_job_refused_once_and_handled_later_is_not_counted_as_refused():
    ports, handle = workspace()
    flaky = add_job(handle)
    broken = add_job(handle, "q")
    fs = ports.fs
    read_document = fs.read_document
    reads = {"flaky": 0}
    flaky_definition = f"{handle.store.payload_dir(flaky)}/job.json"
    broken_definition = f"{handle.store.payload_dir(broken)}/job.json"

    def flaky_read(path, *args, **kwargs):
        if path == flaky_definition:
            reads["flaky"] += 1
            if reads["flaky"] == 2:  # the claim's read, after registration: a transient EIO
                raise OSError(errno.EIO, "Input/output error", path)
        if path == broken_definition and reads["flaky"] >= 2:
            raise OSError(errno.EIO, "Input/output error", path)  # from its claim on: never readable again
        return read_document(path, *args, **kwargs)

    fs.read_document = flaky_read
    m = manager(handle, ports, publisher(ports.fs, lambda launch: None))
    seen: list[set[str]] = []
    m.on_iteration = lambda: seen.append(set(m.refused))
    assert m.run() == 0

    assert any(str(flaky.key) in refused for refused in seen), "the transient error was a refusal at first"
    [done] = markers_of(handle, flaky.job_id)
    assert done.kind == StateKind.SUCCEEDED
    assert set(m.refused) == {str(broken.key)}
    assert "; 1 refused (see 'job why')" in m.summary()
    refused_dir = f"{m.manager_dir}/refused"
    assert sorted(entry.name for entry in fs.scandir(refused_dir)) == [f"{broken.key}.json"]
