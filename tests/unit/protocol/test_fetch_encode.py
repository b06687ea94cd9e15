"""encode_fetch_response (the broker's hand-written Fetch response encoder) byte for byte
against kio's generic encoder: the body decoded by kio and encoded again by kio is the body
we wrote, for every version the broker serves (lengths and counts around the one-byte varint
limit, tagged fields, records in one piece or in several)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fetch_strategies import partition_results

from odradek.protocol import messages
from odradek.protocol.fetch_codec import MAX_VERSION, MIN_VERSION, PartitionResult, TopicResult, encode_fetch_response

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
# record sizes around 127 and 128: the compact length (size + 1) crosses the one-byte varint there
SIZES = st.sampled_from([1, 100, 125, 126, 127, 128, 129, 300, 20000])
records = st.lists(SIZES.map(lambda n: b"r" * n), max_size=3)

partitions = partition_results(
    records, diverging_epoch=st.none() | st.tuples(st.integers(0, 99), st.integers(0, 2**40))
)
topics = st.lists(
    st.builds(
        TopicResult,
        name=st.text(min_size=1, max_size=20),
        topic_id=st.uuids().filter(lambda u: u.int != 0),
        partitions=st.lists(partitions, max_size=4) | st.lists(partitions, min_size=127, max_size=130),
    ),
    max_size=3,
)


def body_of(version, tops, **kw) -> bytes:
    chunks, size = encode_fetch_response(version, tops, **kw)
    body = b"".join(c if isinstance(c, bytes) else bytes(c) for c in chunks)
    assert len(body) == size
    return body


def assert_kio_writes_the_same(version: int, body: bytes) -> None:
    assert messages.encode(messages.decode_response(1, version, body)) == body


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    tops=topics,
    throttle=st.integers(0, 10**6),
    session=st.integers(-(2**31), 2**31 - 1),
    err=st.sampled_from([0, 1, 70]),
)
def test_byte_identical_to_kio(version, tops, throttle, session, err):
    if version < 12:  # tagged fields exist from v12 (flexible versions) only
        for t in tops:
            for p in t.partitions:
                p.current_leader = p.diverging_epoch = None
    body = body_of(version, tops, throttle_ms=throttle, error_code=err, session_id=session)
    assert_kio_writes_the_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 128, 129, 16383, 16384])
def test_a_follower_answer_of_one_record_batch_in_memory(version, size):
    """The follower's common answer: one topic, one partition, its batch as bytes in memory
    (the leader's last append) or none, at every size around the varint limits."""
    part = PartitionResult(0, 0, 41, 41, 0, None, -1, [b"b" * size] if size else [])
    body = body_of(version, [TopicResult("t", uuid.UUID(int=7), [part])], session_id=12)
    assert_kio_writes_the_same(version, body)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(range(12, MAX_VERSION + 1)),
    name=st.text(min_size=1, max_size=200),
    topic_id=st.uuids().filter(lambda u: u.int != 0),
    partition=st.integers(0, 2**31 - 1),
    offsets=st.tuples(*[st.integers(-1, 2**63 - 1)] * 3),
    session=st.integers(-(2**31), 2**31 - 1),
    size=st.sampled_from([0, 1, 125, 126, 127, 128, 129, 300, 16383, 16384, 20000]),
)
def test_one_partition_answer_is_what_the_general_encoder_writes(
    version, name, topic_id, partition, offsets, session, size
):
    """encode_one_partition_response (the followers' fast path) against encode_fetch_response,
    itself held to kio above."""
    from odradek.protocol.fetch_codec import encode_one_partition_response

    hw, lso, start = offsets
    records = b"b" * size if size else None
    part = PartitionResult(partition, 0, hw, lso, start, None, -1, [records] if records else [])
    general = body_of(version, [TopicResult(name, topic_id, [part])], session_id=session)
    topic = topic_id.bytes if version >= 13 else name
    assert encode_one_partition_response(version, session, topic, partition, hw, lso, start, records) == general
