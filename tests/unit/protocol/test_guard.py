"""protocol/guard.py: the length pre-check gives the same verdicts on the fast paths it takes
(a nested walker called directly once compiled, an empty tagged-field section checked inline)."""

from __future__ import annotations

import uuid

import pytest

from odradek.protocol import guard, messages
from odradek.protocol.fetch_codec import encode_replica_fetch_request

TOPIC = uuid.UUID("6f1d2c3b-0000-4000-8000-00000000000a")


def fetch_body(version: int, partitions: int = 1) -> bytes:
    parts = [(p, 1, 100, 1, 0, 1 << 20) for p in range(partitions)]
    return encode_replica_fetch_request(
        version,
        replica_id=2,
        replica_epoch=5,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=10 << 20,
        session_id=77,
        session_epoch=5,
        topics=[("t", TOPIC, parts)],
    )


@pytest.mark.parametrize("version", [12, 15])  # v15: replica_state in a non-empty tagged section
def test_walks_a_whole_request_again_and_again(version: int) -> None:
    body = fetch_body(version, partitions=3)
    cls = messages.request_class(1, version)
    for _ in range(3):  # the first call compiles the nested walkers, later ones call them directly
        assert guard.entity_walker(cls)(body, 0, len(body)) == len(body)


@pytest.mark.parametrize("version", [12, 15])
def test_every_cut_is_refused_after_the_walkers_are_compiled(version: int) -> None:
    body = fetch_body(version, partitions=2)
    cls = messages.request_class(1, version)
    guard.check(cls, body, 0)
    for cut in range(len(body)):
        with pytest.raises(ValueError, match="overruns|varint"):
            guard.check(cls, body[:cut], 0)


def test_an_absurd_nested_array_length_is_refused_after_compilation() -> None:
    body = fetch_body(12)
    cls = messages.request_class(1, 12)
    guard.check(cls, body, 0)
    # the partitions array of the first topic: after the topics count (1 byte, compact) and the
    # topic's compact name "t" (2 bytes), at a fixed offset from the start of the body
    head = 4 + 4 + 4 + 4 + 1 + 4 + 4  # replica id, max wait, min bytes, max bytes, isolation, session id, epoch
    at = head + 1 + 2
    assert body[at] == 2  # one partition, compact
    bad = body[:at] + bytes.fromhex("ffffffff0f") + body[at + 1 :]
    with pytest.raises(guard.LengthError, match="array of"):
        guard.check(cls, bad, 0)
