"""Requests a client pipelined on a connection it then closed (a broker in this process, real
loopback sockets).

A client abandons what it sent on a connection by closing it (the Java client and librdkafka do
at their request timeout) and may then retry elsewhere. The broker reads ahead of the request
in flight, so such requests may already be read when the close is seen: they must not run after
it (simulator seed 13637: a timed-out offset commit, pipelined behind a heartbeat waiting for
the high watermark, ran after the commit the member retried on a new connection and took the
group's offset back). A Produce with acks=0 still runs: its client expects no answer and
counted it as sent. Kafka 4.4 runs them all: a deliberate difference
(tests/reference/test_closed_connection_reference.py).
"""

from __future__ import annotations

import asyncio
import datetime
import struct

from support.batches import batch
from support.inprocess import InProcessBroker
from support.raw import fetch_from_start, fetched_values, request

from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header

MS = datetime.timedelta(milliseconds=1)


def _nested(api_key: int, version: int, class_name: str, /, **fields):
    return getattr(messages.module_of(messages.request_class(api_key, version)), class_name)(**fields)


def _frame(api_key: int, version: int, correlation: int, request) -> bytes:
    flexible = messages.is_flexible(api_key, version)
    body = encode_request_header(api_key, version, correlation, "t", flexible) + messages.encode(request)
    return struct.pack(">i", len(body)) + body


def _create(name: str, correlation: int) -> bytes:
    t = _nested(19, 7, "CreatableTopic", name=name, num_partitions=1, replication_factor=-1, assignments=(), configs=())
    request = messages.request_class(19, 7)(topics=(t,), timeout=1000 * MS, validate_only=False)
    return _frame(19, 7, correlation, request)


def _long_poll(topic: str, correlation: int, wait_ms: int) -> bytes:
    """A Fetch of an empty partition that waits `wait_ms` for data (v12, by topic name)."""
    fields = {**fetch_from_start(topic, range(1)), "max_wait": wait_ms * MS, "max_bytes": 1 << 20}
    return _frame(1, 12, correlation, request(1, 12, **fields))


def _produce(topic: str, acks: int, correlation: int, value: bytes) -> bytes:
    pd = _nested(0, 9, "PartitionProduceData", index=0, records=batch(1, value=value))
    td = _nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    request = messages.request_class(0, 9)(transactional_id=None, acks=acks, timeout=1000 * MS, topic_data=(td,))
    return _frame(0, 9, correlation, request)


async def _send_then_close(port: int, frames: list[bytes]) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(frames))
    await writer.drain()
    await asyncio.sleep(0.2)  # the broker reads them all; the first is waiting for data
    writer.close()
    await writer.wait_closed()


def test_requests_behind_one_in_flight_do_not_run_once_the_client_closed(tmp_path):
    async def main() -> None:
        async with InProcessBroker(tmp_path / "data") as b:
            port = b.broker.bound[0][1]
            created = await b.call(
                19,
                7,
                topics=(
                    _nested(
                        19,
                        7,
                        "CreatableTopic",
                        name="t",
                        num_partitions=1,
                        replication_factor=-1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=1000 * MS,
                validate_only=False,
            )
            assert created.topics[0].error_code == 0
            await _send_then_close(
                port,
                [
                    _long_poll("t", 1, wait_ms=1500),
                    _create("abandoned", 2),
                    _produce("t", -1, 3, b"acks-all"),
                    _produce("t", 0, 4, b"acks-0"),
                ],
            )
            await asyncio.sleep(2.0)  # past the long poll: the broker went through what it read
            topics = (
                await b.call(
                    3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                )
            ).topics
            assert {t.name for t in topics} == {"t"}, "a CreateTopics read before the client closed ran after it"
            fetched = await b.call(1, 12, **fetch_from_start("t", range(1)))
            assert fetched_values(fetched) == {0: [b"acks-0"]}

    asyncio.run(main())
