"""decode_fetch_response (the client's zero-copy Fetch response decoder) against kio's decoder."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial.errors import BufferUnderflow, NegativeByteLength
from support.fetch_strategies import partition_results

from odradek.protocol import messages
from odradek.protocol.fetch_codec import (
    DECODE_MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    TopicResult,
    decode_fetch_response,
    encode_fetch_response,
)

VERSIONS = range(MIN_VERSION, DECODE_MAX_VERSION + 1)

partitions = partition_results(st.lists(st.binary(min_size=1, max_size=200), max_size=3))
topics = st.lists(
    st.builds(
        TopicResult,
        name=st.text(min_size=1, max_size=20),
        topic_id=st.uuids(),
        partitions=st.lists(partitions, max_size=4),
    ),
    max_size=3,
)


def body_of(version, tops, **kw) -> bytes:
    chunks, size = encode_fetch_response(version, tops, **kw)
    body = b"".join(chunks)
    assert len(body) == size
    return body


def assert_same(mine, ref, version):
    assert mine.error_code == (int(ref.error_code) if version >= 7 else 0)
    if version >= 7:
        assert mine.session_id == int(ref.session_id)
    assert len(mine.responses) == len(ref.responses or ())  # a null array (kio: None) holds nothing
    for t, rt in zip(mine.responses, ref.responses or ()):
        if version >= 13:  # topics by id
            assert (t.topic, t.topic_id) == ("", rt.topic_id)
        else:
            assert (t.topic, t.topic_id) == (rt.topic, None)
        assert len(t.partitions) == len(rt.partitions or ())  # a null array (kio: None) holds nothing
        for p, rp in zip(t.partitions, rt.partitions or ()):
            assert p.partition_index == int(rp.partition_index)
            assert p.error_code == int(rp.error_code)
            assert p.high_watermark == int(rp.high_watermark)
            assert p.last_stable_offset == int(rp.last_stable_offset)
            assert p.log_start_offset == (int(rp.log_start_offset) if version >= 5 else -1)
            if rp.aborted_transactions is None:
                assert p.aborted_transactions is None
            else:
                assert p.aborted_transactions == [
                    (int(a.producer_id), int(a.first_offset)) for a in rp.aborted_transactions
                ]
            assert p.preferred_read_replica == (int(rp.preferred_read_replica) if version >= 11 else -1)
            assert (None if p.records is None else bytes(p.records)) == rp.records


@settings(max_examples=40, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    tops=topics,
    throttle=st.integers(0, 10**6),
    session=st.integers(-(2**31), 2**31 - 1),
    err=st.sampled_from([0, 1, 70]),
)
def test_matches_kio(version, tops, throttle, session, err):
    body = body_of(version, tops, throttle_ms=throttle, error_code=err, session_id=session)
    mine = decode_fetch_response(version, body)
    assert mine.throttle_time_ms == throttle
    assert_same(mine, messages.decode_response(1, version, body), version)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_views_of_the_response_not_copies(version):
    recs = b"r" * 5000
    body = bytearray(body_of(version, [TopicResult("t", uuid.UUID(int=1), [PartitionResult(3, records=[recs])])]))
    p = decode_fetch_response(version, memoryview(body)[0:]).responses[0].partitions[0]
    assert p.records.readonly and bytes(p.records) == recs
    body[body.index(recs)] = ord("X")  # the view sees the change: nothing was copied
    assert bytes(p.records[:1]) == b"X"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_a_value_error(version):
    part = PartitionResult(1, 0, 10, 10, 0, [(7, 3)], 0, [b"abcdefgh" * 4], (2, 5))
    body = body_of(version, [TopicResult("topic", uuid.UUID(int=1), [part, PartitionResult(2)])])
    decode_fetch_response(version, body)
    for cut in range(len(body)):
        with pytest.raises(ValueError):
            decode_fetch_response(version, body[:cut])


#: what kio refuses in a corrupt body that our decoder, like Kafka's own generated readers, accepts:
#: a negative length other than -1 read as null, an error code kio's enum does not know, and the
#: contents of a tagged field we skip by its size (the current leader, which the client does not use)
KIO_STRICTER = (ValueError, KeyError, NegativeByteLength, BufferUnderflow)


def flipped(body: bytes, rnd: random.Random, positions: range | None = None) -> bytes:
    bad = bytearray(body)
    where = positions or range(len(bad))
    for _ in range(rnd.randint(1, 4)):
        i = rnd.choice(where)
        bad[i] = (bad[i] + rnd.randrange(1, 256)) % 256  # always a different byte
    return bytes(bad)


@pytest.mark.parametrize("version", VERSIONS)
def test_corrupt_bytes_decode_as_kio_decodes_them_or_raise_value_error(version):
    """Random bytes changed anywhere: our decoder raises ValueError, or what it decodes is what
    kio's decoder reads from the same bytes, field by field."""
    rnd = random.Random(version)
    part = PartitionResult(1, 0, 10, 10, 0, [(7, 3)], 0, [b"abcdefgh" * 4], (2, 5))
    body = body_of(version, [TopicResult("topic", uuid.UUID(int=1), [part])])
    compared = accepted = 0
    for _ in range(500):
        bad = flipped(body, rnd)
        try:
            mine = decode_fetch_response(version, bad)
        except ValueError:
            continue
        accepted += 1
        try:
            ref = messages.decode_response(1, version, bad)
        except KIO_STRICTER:
            continue
        assert_same(mine, ref, version)
        compared += 1
    assert compared >= accepted // 2 and compared > 50, (compared, accepted)


@pytest.mark.parametrize("version", VERSIONS)
def test_corrupt_record_bytes_leave_every_other_field_as_sent(version):
    """Bytes changed inside a partition's records only: the response still decodes, every field
    is the one encoded, and the records are exactly the changed bytes (the decoder takes the
    records by their length, and nothing else from them)."""
    rnd = random.Random(version)
    recs = bytes(range(64))
    part = PartitionResult(1, 6, 10, 9, 2, [(7, 3)], 1, [recs], (2, 5))
    other = PartitionResult(4, 0, 20, 20, 0, None, -1, [b"x" * 7])
    body = body_of(version, [TopicResult("topic", uuid.UUID(int=1), [part, other])])
    start = body.index(recs)
    for _ in range(200):
        bad = flipped(body, rnd, range(start, start + len(recs)))
        got = decode_fetch_response(version, bad)
        if version >= 13:  # topics by id
            assert [(t.topic, t.topic_id) for t in got.responses] == [("", uuid.UUID(int=1))]
        else:
            assert [t.topic for t in got.responses] == ["topic"]
        p, o = got.responses[0].partitions
        assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset) == (1, 6, 10, 9)
        assert p.log_start_offset == (2 if version >= 5 else -1)
        assert p.aborted_transactions == [(7, 3)]
        assert p.preferred_read_replica == (1 if version >= 11 else -1)
        assert bytes(p.records) == bad[start : start + len(recs)] != recs
        assert (o.partition_index, o.high_watermark, o.aborted_transactions, bytes(o.records)) == (
            4,
            20,
            None,
            b"x" * 7,
        )


def test_versions_outside_the_range_are_refused():
    with pytest.raises(ValueError, match="v17"):
        decode_fetch_response(17, b"")
    with pytest.raises(ValueError, match="v3"):
        decode_fetch_response(3, b"")
