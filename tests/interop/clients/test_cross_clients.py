"""Data written by each of the six other clients is read by odradek's client, and the other way round.

Runs once per (client, broker) with the clients of tests/support/clients.py (java, confluent, kcat,
kafka_python, aiokafka, kafkajs) on odradek's broker and on Tansu, a broker nobody here wrote.
Every record is compared byte for byte (key, value, headers, in partition and offset order) at the
position the writer was told, half of them written compressed.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.clients import Rec, java_partition, make_client

from odradek.client import Consumer, Producer, TopicPartition
from odradek.client.aio import AIOProducer

PARTS = 3
# the codec each reader is given (kafkajs decodes only gzip without plugins)
CODEC_FOR = {
    "java": "zstd",
    "confluent": "lz4",
    "kcat": "snappy",
    "kafka_python": "zstd",
    "aiokafka": "lz4",
    "kafkajs": "gzip",
}
# pairs that cannot work, with the reason (see tests/harness/test_thirdparty.py)
KNOWN_BROKEN = {("kcat", "tansu"): "kcat (librdkafka 2.0.2) cannot parse Tansu's ApiVersions v3 tagged fields"}


def _records(n: int, tag: str) -> list[Rec]:
    out = []
    for i in range(n):
        value = f"{tag}-{i:04d}-".encode() + bytes([i % 256, 0, 255, 10, 13]) + "ünïcødé\n".encode()
        if i == 7:
            value = b""
        if i == 11:
            value = bytes(range(256)) * 80  # 20 KiB
        # no NUL in header values: kcat takes headers as command-line arguments
        headers = [
            ("idx", str(i).encode()),
            ("bin", bytes([1, 0x7F, 0x80, 0xFF]) + b"=,;"),
            ("empty", b""),
            ("ключ", "значение".encode()),
        ]
        out.append(Rec(key=f"key-{i % 13}".encode(), value=value, headers=headers))
    out.append(Rec(key=None, value=f"{tag}-null-key".encode(), headers=[("only", b"h")]))
    out.append(Rec(key=f"{tag}-null-value".encode(), value=None))
    return out


@pytest.fixture(params=["odradek", "tansu"])
def pair(request, client_name, peer_named):
    if (client_name, request.param) in KNOWN_BROKEN:
        pytest.skip(KNOWN_BROKEN[(client_name, request.param)])
    return make_client(client_name, peer_named(request.param).bootstrap), peer_named(request.param)


def _check_positions(sent: list[Rec], positions: list[tuple[int, int]], got: list[Rec]) -> None:
    assert len(positions) == len(sent)
    by_pos = {(r.partition, r.offset): r for r in got}
    assert len(by_pos) == len(got) == len(sent), (len(by_pos), len(got), len(sent))
    for rec, pos in zip(sent, positions):
        assert pos in by_pos, pos
        assert by_pos[pos].content() == rec.content(), (pos, by_pos[pos], rec)
        if rec.key is not None:  # the Java client's partitioner, whoever wrote it
            assert pos[0] == java_partition(rec.key, PARTS), (rec.key, pos)


def test_theirs_written_ours_read(pair):
    theirs, peer = pair
    topic = peer.new_topic(PARTS, prefix=f"x-{theirs.name}")
    plain, packed = _records(60, "plain"), _records(60, "gzip")
    t0 = int(time.time() * 1000)
    positions = theirs.produce(topic, plain) + theirs.produce(topic, packed, compression="gzip")
    t1 = int(time.time() * 1000)
    sent = plain + packed
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTS)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    mine = [
        Rec(
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            partition=r.partition,
            offset=r.offset,
            timestamp=r.timestamp,
        )
        for r in got
    ]
    _check_positions(sent, positions, mine)
    for r in got:
        assert r.topic == topic
        assert t0 - 1000 <= r.timestamp <= t1 + 1000, (r.timestamp, t0, t1)
    for p in range(PARTS):  # each partition in offset order, dense from 0
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(len(offs)))


def test_ours_written_theirs_read(pair):
    theirs, peer = pair
    topic = peer.new_topic(PARTS, prefix=f"y-{theirs.name}")
    codec = CODEC_FOR[theirs.name]
    plain, packed = _records(60, "plain"), _records(60, codec)
    t0 = int(time.time() * 1000)
    with Producer(bootstrap_servers=peer.bootstrap, linger_ms=2) as p:
        futs = [p.send(topic, r.value, key=r.key, headers=r.headers) for r in plain]
        p.flush()
        positions = [(m.partition, m.offset) for m in (f.result(10) for f in futs)]

    async def send_packed():
        async with AIOProducer(bootstrap_servers=peer.bootstrap, compression_type=codec, linger_ms=5) as ap:
            futs = [await ap.send(topic, r.value, key=r.key, headers=r.headers) for r in packed]
            return [(m.partition, m.offset) for m in [await f for f in futs]]

    positions += asyncio.run(send_packed())
    t1 = int(time.time() * 1000)
    sent = plain + packed
    got = theirs.consume(topic, expected=len(sent), timeout=40)
    _check_positions(sent, positions, got)
    for r in got:
        assert t0 - 1000 <= r.timestamp <= t1 + 1000, (r.timestamp, t0, t1)
