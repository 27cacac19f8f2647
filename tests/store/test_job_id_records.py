"""A job-id reservation is read through the one converter: same bytes, unknown members refused by path."""

from __future__ import annotations

import pytest

from httk.workflow import codec
from httk.workflow.store.job_ids import Reservation

CHILD = (b'{"format":"httk-workflow-job-id","format_version":1,"job_id":"0a","job_key":"t--0a","origin":"spawn",'
         b'"parent":{"attempt_id":"a1","job_id":"0b","label":"c"},"placement":"p"}\n')
PLAIN = (b'{"format":"httk-workflow-job-id","format_version":1,"job_id":"0a","job_key":"t--0a",'
         b'"origin":"submission","placement":"p"}\n')


@pytest.mark.parametrize("data", [CHILD, PLAIN], ids=["spawned", "submitted"])
def test_a_reservation_round_trips_to_the_same_bytes(data: bytes) -> None:
    reservation = Reservation.from_json(codec.decode_object(data, "r"), "r")
    assert codec.encode(reservation.to_json()) == data


@pytest.mark.parametrize(("document", "member"), [
    ({"job_idx": "0a"}, "$.job_idx"),
    ({"job_id": 7}, "$.job_id"),
])
def test_a_malformed_reservation_names_the_member(document: dict, member: str) -> None:
    base = codec.decode_object(PLAIN, "r")
    with pytest.raises(codec.DocumentError) as refused:
        Reservation.from_json({**base, **document}, "ids/0a/0a")
    assert refused.value.member == member and "ids/0a/0a" in str(refused.value)


def test_a_reservation_of_another_format_is_refused() -> None:
    base = codec.decode_object(PLAIN, "r")
    with pytest.raises(codec.DocumentError):
        Reservation.from_json({**base, "format": "httk-workflow-request"}, "r")
