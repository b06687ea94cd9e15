"""A follower's Fetch request, written by hand (`encode_replica_fetch_request`): the same bytes
kio writes for the same fields, at every version a follower sends, and what kio reads back."""

from __future__ import annotations

import uuid

import pytest

from odradek.client.conn import _wire
from odradek.protocol import messages
from odradek.protocol.fetch_codec import encode_replica_fetch_request

A, B = uuid.UUID("6f1d2c3b-0000-4000-8000-00000000000a"), uuid.UUID("00000000-0000-4000-8000-0000000000ff")
TOPICS = [
    ("alpha", A, [(0, 7, 1234, 6, 10, 1 << 20), (3, 7, 1 << 40, 7, 0, 1 << 20)]),
    ("b" * 300, B, [(1, -1, 0, -1, -1, 5)]),
]
FORGOTTEN = [("alpha", A, [1, 2]), ("b" * 300, B, [9])]


def kio_bytes(version: int, topics, forgotten, **head) -> bytes:  # noqa: ANN001
    def part(p):  # noqa: ANN001, ANN202
        keys = ("partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset")
        return dict(zip(keys, p[:5], strict=True)) | {"partition_max_bytes": p[5]}

    key = (lambda name, tid: {"topic_id": tid}) if version >= 13 else (lambda name, tid: {"topic": name})
    data = {
        "max_wait": head["max_wait_ms"],
        "min_bytes": head["min_bytes"],
        "max_bytes": head["max_bytes"],
        "isolation_level": 0,
        "session_id": head["session_id"],
        "session_epoch": head["session_epoch"],
        "rack_id": "",
        "topics": [key(n, t) | {"partitions": [part(p) for p in ps]} for n, t, ps in topics],
        "forgotten_topics_data": [key(n, t) | {"partitions": list(ps)} for n, t, ps in forgotten],
    }
    if version >= 15:
        data["replica_state"] = {"replica_id": head["replica_id"], "replica_epoch": head["replica_epoch"]}
    else:
        data["replica_id"] = head["replica_id"]
    return messages.encode(_wire.request(1, version, data))


@pytest.mark.parametrize("version", [12, 13, 14, 15, 16])
@pytest.mark.parametrize(
    ("topics", "forgotten"), [(TOPICS, []), (TOPICS, FORGOTTEN), ([], []), ([], FORGOTTEN[:1])], ids=str
)
def test_the_same_bytes_as_kio(version: int, topics, forgotten) -> None:  # noqa: ANN001
    head = {
        "replica_id": 2,
        "replica_epoch": 0x1000002,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 10 << 20,
        "session_id": 77,
        "session_epoch": 5,
    }
    body = encode_replica_fetch_request(version, topics=topics, forgotten=forgotten, **head)
    assert body == kio_bytes(version, topics, forgotten, **head)
    req = messages.decode_request(1, version, body)
    assert [len(t.partitions) for t in req.topics] == [len(ps) for _n, _t, ps in topics]
    if version >= 15:
        assert (req.replica_state.replica_id, req.replica_state.replica_epoch) == (2, 0x1000002)
    else:
        assert req.replica_id == 2


def test_refuses_what_it_cannot_write() -> None:
    head = dict(replica_id=2, replica_epoch=1, max_wait_ms=1, min_bytes=1, max_bytes=1, session_id=0, session_epoch=0)
    with pytest.raises(ValueError, match="v11"):
        encode_replica_fetch_request(11, topics=[], **head)
    with pytest.raises(ValueError, match="by id"):
        encode_replica_fetch_request(15, topics=[("t", None, [(0, 0, 0, 0, 0, 1)])], **head)
