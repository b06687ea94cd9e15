"""The hand-written Produce response encoder writes exactly what kio writes, every version.

Pure: builds random results, encodes them both ways, compares bytes, and reads ours back
with kio's reader.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.produce_codec import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionProduceResult,
    TopicProduceResult,
    encode_produce_response,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-1, 2**62)
ERRORS = st.sampled_from([0, 1, 2, 3, 10, 18, 19, 45, 87, 100])

partitions = st.builds(
    PartitionProduceResult,
    partition_index=I32,
    error_code=ERRORS,
    base_offset=I64,
    log_append_time=st.one_of(st.just(-1), st.integers(0, 2**41)),
    log_start_offset=I64,
    error_message=st.one_of(st.none(), st.text(max_size=20)),
    record_errors=st.lists(st.tuples(I32, st.one_of(st.none(), st.text(max_size=20))), max_size=3),
)
topics = st.lists(
    st.builds(
        TopicProduceResult,
        name=st.text(min_size=1, max_size=30),
        topic_id=st.uuids(),
        partitions=st.lists(partitions, max_size=4),
    ),
    max_size=3,
)


def kio_bytes(version: int, ts: list[TopicProduceResult], throttle: int) -> bytes:
    cls = messages.response_class(0, version)
    mod = messages.module_of(cls)
    tps = []
    for t in ts:
        parts = tuple(
            make(
                mod.PartitionProduceResponse,
                index=p.partition_index,
                error_code=p.error_code,
                base_offset=p.base_offset,
                log_append_time=p.log_append_time,
                log_start_offset=p.log_start_offset,
                record_errors=tuple(
                    make(mod.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                    for i, m in p.record_errors
                )
                if hasattr(mod, "BatchIndexAndErrorMessage")
                else (),
                error_message=p.error_message if p.error_code else None,
            )
            for p in t.partitions
        )
        tps.append(make(mod.TopicProduceResponse, name=t.name, topic_id=t.topic_id, partition_responses=parts))
    return messages.encode(make(cls, responses=tuple(tps), throttle_time=throttle))


@settings(max_examples=60, deadline=None)
@given(ts=topics, throttle=st.integers(0, 2**31 - 1))
def test_same_bytes_as_kio_every_version(ts, throttle):
    for v in range(MIN_VERSION, MAX_VERSION + 1):
        ours = encode_produce_response(v, ts, throttle)
        assert ours == kio_bytes(v, ts, throttle), f"v{v}"
        back = messages.decode_response(0, v, ours)
        assert len(back.responses) == len(ts)


def test_record_errors_read_back_by_kio():
    errs = [(1, "Compacted topic cannot accept message without key"), (3, None)]
    t = [TopicProduceResult("t", uuid.uuid4(), [PartitionProduceResult(0, 87, -1, -1, 0, "bad", errs)])]
    for v in range(8, MAX_VERSION + 1):
        p = messages.decode_response(0, v, encode_produce_response(v, t)).responses[0].partition_responses[0]
        assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == errs, f"v{v}"


def test_typical_single_partition():
    t = [TopicProduceResult("t", uuid.uuid4(), [PartitionProduceResult(0, 0, 42, -1, 0)])]
    for v in range(MIN_VERSION, MAX_VERSION + 1):
        assert encode_produce_response(v, t) == kio_bytes(v, t, 0)
