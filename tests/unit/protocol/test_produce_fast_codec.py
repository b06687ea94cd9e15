"""The leader's fast path for a Produce request (broker/fast_produce.py) held to kio:
`decode_single_produce_request` reads what kio reads from the same bytes (odradek's request
header reader and kio's body reader, as the generic path does), leaves every other shape to the
generic path (None), and no mutation of a valid frame makes it read something kio does not;
`encode_single_produce_response` writes, for every version, the bytes kio writes for the same
one-partition answer (and `encode_produce_response` too)."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header, read_header_rest
from odradek.protocol.produce_codec import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionProduceResult,
    TopicProduceResult,
    decode_single_produce_request,
    encode_produce_response,
    encode_single_produce_response,
)

VERSIONS = list(range(MIN_VERSION, MAX_VERSION + 1))
i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=1, max_size=140)  # past 127 bytes, a two-byte compact length
records = st.binary(min_size=1, max_size=300)


def request_frame(
    version: int,
    *,
    topics: list[tuple[str, uuid.UUID, list[tuple[int, bytes | None]]]],
    acks: int = -1,
    timeout_ms: int = 30000,
    transactional_id: str | None = None,
    client_id: str | None = "producer-1",
    correlation_id: int = 7,
) -> bytes:
    """A Produce request frame (no size prefix) as kio writes it."""
    cls = messages.request_class(0, version)
    mod = messages.module_of(cls)
    tds = tuple(
        make(
            mod.TopicProduceData,
            name=name,
            topic_id=topic_id,
            partition_data=tuple(make(mod.PartitionProduceData, index=i, records=r) for i, r in parts),
        )
        for name, topic_id, parts in topics
    )
    req = make(
        cls,
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tds,
    )
    flexible = messages.is_flexible(0, version)
    return encode_request_header(0, version, correlation_id, client_id, flexible) + messages.encode(req)


def kio_fields(frame: bytes) -> tuple:
    """What the generic path reads from `frame`, as the fast reader returns it (or None: not
    the common shape)."""
    _key, version, correlation_id = struct.unpack_from(">hhi", frame)
    _client_id, header_size = read_header_rest(frame, messages.is_flexible(0, version))
    req = messages.decode_request(0, version, frame, header_size)
    if req.transactional_id is not None or len(req.topic_data) != 1:
        return None
    (td,) = req.topic_data
    if len(td.partition_data) != 1 or not td.partition_data[0].records:
        return None
    pd = td.partition_data[0]
    topic = (td.topic_id.bytes if td.topic_id is not None else bytes(16)) if version >= 13 else td.name
    timeout_ms = round(req.timeout.total_seconds() * 1000)
    return (version, correlation_id, req.acks, timeout_ms, topic, pd.index, bytes(pd.records))


one_request = st.fixed_dictionaries(
    {
        "version": st.sampled_from(VERSIONS),
        "name": names,
        "topic_id": st.uuids(),
        "partition": i32,
        "records": records,
        "acks": i16,
        "timeout_ms": i32,
        "client_id": st.none() | st.text(max_size=30),
        "correlation_id": i32,
    }
)


def frame_of(r: dict) -> bytes:
    return request_frame(
        r["version"],
        topics=[(r["name"], r["topic_id"], [(r["partition"], r["records"])])],
        acks=r["acks"],
        timeout_ms=r["timeout_ms"],
        client_id=r["client_id"],
        correlation_id=r["correlation_id"],
    )


@settings(max_examples=400, deadline=None)
@given(r=one_request)
def test_reads_what_kio_reads(r: dict) -> None:
    frame = frame_of(r)
    fast = decode_single_produce_request(frame)
    assert fast is not None
    assert tuple(fast) == kio_fields(frame)
    assert fast.records == r["records"] and fast.partition == r["partition"]


@settings(max_examples=1500, deadline=None)
@given(
    r=one_request,
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(-8, 4),
)
def test_mutated_frames_read_as_kio_reads_them_or_not_at_all(r: dict, edits: list, cut: int) -> None:
    frame = bytearray(frame_of(r))
    for at, value in edits:
        frame[at % min(len(frame), 64)] = value  # the header and the request's fields, not the records
    if cut < 0:
        del frame[cut:]
    else:
        frame += b"\x00" * cut
    frame = bytes(frame)
    fast = decode_single_produce_request(frame)
    if fast is None:
        return
    assert tuple(fast) == kio_fields(frame)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "why",
    ["transactional", "two partitions", "two topics", "no topic", "null records", "empty records", "trailing"],
)
def test_other_shapes_are_left_to_the_generic_path(version: int, why: str) -> None:
    u = uuid.uuid4()
    kw: dict = {"topics": [("t", u, [(0, b"batch")])]}
    if why == "transactional":
        kw["transactional_id"] = "tx"
    elif why == "two partitions":
        kw["topics"] = [("t", u, [(0, b"batch"), (1, b"batch")])]
    elif why == "two topics":
        kw["topics"] = [("t", u, [(0, b"batch")]), ("u", uuid.uuid4(), [(0, b"batch")])]
    elif why == "no topic":
        kw["topics"] = []
    elif why == "null records":
        kw["topics"] = [("t", u, [(0, None)])]
    elif why == "empty records":
        kw["topics"] = [("t", u, [(0, b"")])]
    frame = request_frame(version, **kw)
    if why == "trailing":
        frame += b"\x00"
    assert decode_single_produce_request(frame) is None
    assert decode_single_produce_request(request_frame(version, topics=[("t", u, [(0, b"batch")])])) is not None


@pytest.mark.parametrize("version", [0, 1, 2, 14])
def test_other_versions_and_apis_are_left_to_the_generic_path(version: int) -> None:
    head = struct.pack(">hhih", 0, version, 1, -1)
    assert decode_single_produce_request(head + bytes(40)) is None
    fetch = struct.pack(">hhih", 1, 9, 1, -1) + bytes(40)
    assert decode_single_produce_request(fetch) is None


def kio_response(version: int, name: str, topic_id: uuid.UUID, p: PartitionProduceResult) -> bytes:
    cls = messages.response_class(0, version)
    mod = messages.module_of(cls)
    part = make(
        mod.PartitionProduceResponse,
        index=p.partition_index,
        error_code=0,
        base_offset=p.base_offset,
        log_append_time=p.log_append_time,
        log_start_offset=p.log_start_offset,
        record_errors=(),
        error_message=None,
    )
    topic = make(mod.TopicProduceResponse, name=name, topic_id=topic_id, partition_responses=(part,))
    return messages.encode(make(cls, responses=(topic,), throttle_time=0))


@settings(max_examples=150, deadline=None)
@given(
    name=names,
    topic_id=st.uuids(),
    partition=i32,
    base_offset=i64,
    log_append_time=st.just(-1) | st.integers(0, 2**41),
    log_start_offset=i64,
)
def test_answer_is_kios_bytes_every_version(name, topic_id, partition, base_offset, log_append_time, log_start_offset):  # noqa: ANN001
    p = PartitionProduceResult(partition, 0, base_offset, log_append_time, log_start_offset)
    for v in VERSIONS:
        topic: str | bytes = topic_id.bytes if v >= 13 else name
        ours = encode_single_produce_response(v, topic, partition, base_offset, log_append_time, log_start_offset)
        assert ours == kio_response(v, name, topic_id, p), f"v{v}"
        assert ours == encode_produce_response(v, [TopicProduceResult(name if v < 13 else None, topic_id, [p])])
