"""The leader's fast path for Produce (broker/fast_produce.py) answers what the generic path
answers, byte for byte: the same requests, in the same order, sent over a real socket to a real
broker's connection with the fast path on and then (a fresh broker) with it off; the success
cases of every version it serves, and each error: an append's refusal (NOT_LEADER_OR_FOLLOWER,
NOT_ENOUGH_REPLICAS, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, a duplicate and an
out-of-order sequence), acks=all completed by a follower's fetch, failed after the append
(NOT_ENOUGH_REPLICAS_AFTER_APPEND) or timed out (REQUEST_TIMED_OUT); requests it leaves to the
generic path (unknown topic, two partitions, invalid acks) are not taken by it."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import socket
import struct
import time
import types
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from support.batches import batch
from support.inprocess import InProcessBroker, socket_connection

from odradek.broker import fast_produce, replica_manager
from odradek.broker.follower_state import FollowerState
from odradek.broker.partition import Partition, Role
from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header
from odradek.protocol.records import Record, build_batch

MS = datetime.timedelta(milliseconds=1)
FOLLOWER = 1002  # a follower that exists only in the partition's state (see `two_in_isr`)
ACCEPT = fast_produce.accept
NOW = int(time.time() * 1000)  # the records' timestamps: the same bytes in both runs


def produce_frame(
    version: int,
    topic: str | uuid.UUID,
    records: bytes | None,
    *,
    acks: int = -1,
    timeout_ms: int = 30000,
    partitions: tuple[int, ...] = (0,),
    correlation_id: int = 1,
) -> bytes:
    cls = messages.request_class(0, version)
    mod = messages.module_of(cls)
    pds = tuple(make(mod.PartitionProduceData, index=i, records=records) for i in partitions)
    td = (
        make(mod.TopicProduceData, topic_id=topic, partition_data=pds)
        if version >= 13
        else make(mod.TopicProduceData, name=topic, partition_data=pds)
    )
    req = make(cls, transactional_id=None, acks=acks, timeout=timeout_ms * MS, topic_data=(td,))
    frame = encode_request_header(0, version, correlation_id, "p", messages.is_flexible(0, version))
    frame += messages.encode(req)
    return struct.pack(">i", len(frame)) + frame


@dataclasses.dataclass
class Case:
    name: str
    version: int
    records: bytes | None
    acks: int = -1
    timeout_ms: int = 30000
    topic: str = "t"
    partitions: tuple[int, ...] = (0,)
    fast: bool = True  # taken by the fast path (when it is on)
    before: Callable[[Partition], None] | None = None  # state for the request, undone after its answer
    after_sent: Callable[[Partition], None] | None = None  # what answers a parked acks=all (a fetch)
    undo: Callable[[Partition], None] | None = None


def two_in_isr(part: Partition) -> None:
    """The ISR this broker and a follower that has not fetched the last append: acks=all waits."""
    part.isr = (part.node_id, FOLLOWER)
    part.replicas = part.isr
    part.followers = {FOLLOWER: FollowerState(FOLLOWER, log_end_offset=part.log_end_offset)}
    part.refresh_solo()


def follower_fetches(part: Partition) -> None:
    part.record_follower_fetch(FOLLOWER, part.log_end_offset, int(time.time() * 1000))


def alone_again(part: Partition) -> None:
    part.isr = part.replicas = (part.node_id,)
    part.followers = {}
    part.min_insync_replicas = 1
    part.refresh_solo()


def isr_shrinks(part: Partition) -> None:
    part.isr = (part.node_id,)  # min.insync.replicas 2: the append is below it now
    part.record_follower_fetch(FOLLOWER, part.log_end_offset, int(time.time() * 1000))


def corrupt(b: bytes) -> bytes:
    out = bytearray(b)
    out[-1] ^= 0xFF  # in the records, under the CRC
    return bytes(out)


def producer_batch(seq: int) -> bytes:
    return build_batch([Record(-1, NOW, None, b"v" * 10)], producer_id=77, producer_epoch=0, base_sequence=seq)


def cases() -> list[Case]:
    one = batch(1, ts=NOW)
    out = [Case(f"success v{v}", v, one, acks=-1 if v % 2 else 1) for v in range(3, 14)]
    out += [
        Case("idempotent first", 11, producer_batch(0)),
        Case("idempotent duplicate", 11, producer_batch(0)),
        Case("idempotent next", 9, producer_batch(1)),
        Case("out of order sequence", 11, producer_batch(5)),
        Case("corrupt", 11, corrupt(one)),
        Case("corrupt v7", 7, corrupt(one)),
        Case("too large", 11, batch(1, size=600), topic="small"),
        Case("too large v5", 5, batch(1, size=600), topic="small"),
        Case("invalid timestamp", 11, batch(1, ts=1000), topic="recent"),
        Case("invalid timestamp v8", 8, batch(1, ts=1000), topic="recent"),
        Case("not leader", 11, one, before=lambda p: setattr(p, "role", Role.FOLLOWER)),
        Case("not leader v13", 13, one, before=lambda p: setattr(p, "role", Role.FOLLOWER)),
        Case("not enough replicas", 11, one, before=lambda p: setattr(p, "min_insync_replicas", 2)),
        Case("acks=1 with too few replicas", 11, one, acks=1, before=lambda p: setattr(p, "min_insync_replicas", 2)),
        Case("acks=all waits for the follower", 11, one, before=two_in_isr, after_sent=follower_fetches),
        Case("acks=all waits v7", 7, one, before=two_in_isr, after_sent=follower_fetches),
        Case(
            "ISR shrank after the append",
            11,
            one,
            before=lambda p: (two_in_isr(p), setattr(p, "min_insync_replicas", 2)),
            after_sent=isr_shrinks,
        ),
        Case("acks=all timed out", 11, one, timeout_ms=150, before=two_in_isr),
        Case("acks=all timed out v13", 13, one, timeout_ms=150, before=two_in_isr),
        Case("unknown topic", 11, one, topic="nope", fast=False),
        Case("two partitions", 11, one, partitions=(0, 1), fast=False),
        Case("invalid acks", 11, one, acks=2, fast=False),
        Case("empty records", 11, b"", fast=False),
        Case("two batches", 11, one + one, fast=False),
        Case("acks=1 after all", 11, one, acks=1),
    ]
    return out


async def create(b: InProcessBroker, name: str, partitions: int, configs: dict[str, str]) -> None:
    mod = messages.module_of(messages.request_class(19, 7))
    t = mod.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=-1,
        assignments=(),
        configs=tuple(mod.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
    )
    r = await b.call(19, 7, topics=(t,), timeout=1000 * MS, validate_only=False)
    assert r.topics[0].error_code == 0, r.topics[0].error_message


async def read_frame(sock: socket.socket, timeout: float) -> bytes:
    loop = asyncio.get_running_loop()
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), timeout)
        assert chunk, "connection closed"
        buf += chunk
    return buf


async def correlation_ids(sock: socket.socket, count: int) -> list[int]:
    """The correlation ids of the next `count` answers."""
    buf = b""
    out: list[int] = []
    while len(out) < count:
        if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            n = struct.unpack_from(">i", buf)[0]
            out.append(struct.unpack_from(">i", buf, 4)[0])
            buf = buf[4 + n :]
        else:
            buf += (
                await read_frame(sock, 5)
                if not buf
                else await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 1 << 16), 5)
            )
    assert buf == b"", "more answers than asked"
    return out


async def exchange(directory: Any, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], list[str]]:
    """Every case's answer, and the cases the fast path took."""
    taken: list[str] = []
    current: list[str] = [""]

    def accept(conn: Any, frame: bytes) -> Any:
        served = ACCEPT(conn, frame) if fast else None
        if served is not None:
            taken.append(current[0])
        return served

    monkeypatch.setattr(fast_produce, "accept", accept)
    # the append's clock (INVALID_TIMESTAMP's message names its bounds): the same in both runs
    clock = types.SimpleNamespace(time=lambda: NOW / 1000 + 5)
    monkeypatch.setattr(fast_produce, "time", clock)
    monkeypatch.setattr(replica_manager, "time", clock)
    answers = []
    async with InProcessBroker(directory, {"num.partitions": "1"}) as b:
        await create(b, "t", 2, {})
        await create(b, "small", 1, {"max.message.bytes": "200"})
        await create(b, "recent", 1, {"message.timestamp.before.max.ms": "60000"})
        rm = b.services.replica_manager
        async with socket_connection(b.services) as (conn, peer):
            for i, case in enumerate(cases()):
                current[0] = case.name
                part = rm.partitions[(case.topic if case.topic in ("t", "small", "recent") else "t", 0)]
                if case.before is not None:
                    case.before(part)
                topic: str | uuid.UUID = case.topic
                if case.version >= 13:
                    info = b.services.snapshot.topics.get(case.topic)
                    topic = info.topic_id if info else uuid.uuid4()
                await asyncio.sleep(0.01)  # the processor idle again
                peer.sendall(
                    produce_frame(
                        case.version,
                        topic,
                        case.records,
                        acks=case.acks,
                        timeout_ms=case.timeout_ms,
                        partitions=case.partitions,
                        correlation_id=100 + i,
                    )
                )
                if case.after_sent is not None:
                    with pytest.raises(TimeoutError):  # parked until the follower fetches
                        await read_frame(peer, 0.1)
                    case.after_sent(part)
                answer = await read_frame(peer, 5)
                for info in b.services.snapshot.topics.values():  # each broker gives its own ids
                    answer = answer.replace(info.topic_id.bytes, info.name.encode().ljust(16, b"_"))
                answers.append(answer)
                alone_again(part)
                part.role = Role.LEADER
                part._maybe_advance_high_watermark()
    return answers, taken


def test_fast_path_answers_byte_for_byte_as_the_generic_path(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast_answers, taken = asyncio.run(exchange(tmp_path / "fast", True, monkeypatch))
    generic_answers, none = asyncio.run(exchange(tmp_path / "generic", False, monkeypatch))
    assert none == []
    all_cases = cases()
    assert taken == [c.name for c in all_cases if c.fast], "the fast path took other requests than expected"
    for case, f, g in zip(all_cases, fast_answers, generic_answers, strict=True):
        assert f == g, f"{case.name}: fast {f.hex()} != generic {g.hex()}"
    # what the answers say (so that the cases are what they claim to be)
    codes = {}
    for case, frame in zip(all_cases, generic_answers, strict=True):
        v = case.version
        offset = 8 + (1 if v >= 9 else 0)
        r = messages.decode_response(0, v, frame, offset)
        codes[case.name] = int(r.responses[0].partition_responses[0].error_code)
    assert codes["success v3"] == codes["success v13"] == codes["idempotent duplicate"] == 0
    assert codes["out of order sequence"] == 45
    assert codes["corrupt"] == codes["corrupt v7"] == 2
    assert codes["too large"] == 10
    assert codes["invalid timestamp"] == 32
    assert codes["not leader"] == codes["not leader v13"] == 6
    assert codes["not enough replicas"] == 19
    assert codes["acks=1 with too few replicas"] == 0
    assert codes["acks=all waits for the follower"] == codes["acks=all waits v7"] == 0
    assert codes["ISR shrank after the append"] == 20
    assert codes["acks=all timed out"] == codes["acks=all timed out v13"] == 7
    assert codes["unknown topic"] == 3


def test_pipelined_requests_are_taken_in_order(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests read together, or while the fast path's request waits for the ISR, are answered
    in order: the fast path takes each in turn while it serves them (no task wakes for them),
    and the processor what follows the first it does not serve."""
    taken: list[int] = []

    def accept(conn: Any, frame: bytes) -> Any:
        served = ACCEPT(conn, frame)
        if served is not None:
            taken.append(served.req.correlation_id)
        return served

    monkeypatch.setattr(fast_produce, "accept", accept)
    one = batch(1, ts=NOW)
    api_versions = struct.pack(">hhih", 18, 0, 9, 1) + b"p"

    async def main() -> None:
        async with InProcessBroker(tmp_path, {"num.partitions": "1"}) as b:
            await create(b, "t", 1, {})
            part = b.services.replica_manager.partitions[("t", 0)]
            async with socket_connection(b.services) as (conn, peer):
                await asyncio.sleep(0.05)
                # three at once, answered at once (acks=1): all three on the fast path
                peer.sendall(b"".join(produce_frame(11, "t", one, acks=1, correlation_id=c) for c in (1, 2, 3)))
                assert await correlation_ids(peer, 3) == [1, 2, 3]
                assert taken == [1, 2, 3]
                # acks=all parked; a Produce and an ApiVersions read behind it wait for it
                two_in_isr(part)
                peer.sendall(produce_frame(11, "t", one, correlation_id=4))
                await asyncio.sleep(0.05)
                peer.sendall(
                    produce_frame(11, "t", one, acks=1, correlation_id=5)
                    + struct.pack(">i", len(api_versions))
                    + api_versions
                )
                with pytest.raises(TimeoutError):
                    await read_frame(peer, 0.1)
                assert taken == [1, 2, 3, 4]
                follower_fetches(part)
                assert await correlation_ids(peer, 3) == [4, 5, 9]
                assert taken == [1, 2, 3, 4, 5], "the pipelined Produce is taken by the fast path too"
                assert not conn.in_flight

    asyncio.run(main())


def test_reading_paused_behind_a_parked_request_resumes(tmp_path) -> None:
    """queued.max.requests frames read behind a Produce waiting for the ISR pause reading; the
    fast path, taking them in turn once it is answered, resumes it: every request is answered
    (the processor, which resumes reading on the generic path, never runs here)."""
    one = batch(1, ts=NOW)

    async def main() -> None:
        async with InProcessBroker(tmp_path, {"num.partitions": "1", "queued.max.requests": "2"}) as b:
            await create(b, "t", 1, {})
            part = b.services.replica_manager.partitions[("t", 0)]
            async with socket_connection(b.services) as (conn, peer):
                await asyncio.sleep(0.05)
                two_in_isr(part)
                peer.sendall(produce_frame(11, "t", one, correlation_id=1))
                await asyncio.sleep(0.05)
                peer.sendall(b"".join(produce_frame(11, "t", one, acks=1, correlation_id=c) for c in (2, 3)))
                await asyncio.sleep(0.05)
                assert not conn._reading, "reading paused: two requests queued"
                peer.sendall(b"".join(produce_frame(11, "t", one, acks=1, correlation_id=c) for c in range(4, 12)))
                follower_fetches(part)
                assert await correlation_ids(peer, 11) == list(range(1, 12))

    asyncio.run(main())
