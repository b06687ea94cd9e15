"""odradek's client quota admin calls (client/aio/admin_quotas.py) against an in-process broker:
alter_client_quotas and describe_client_quotas, asyncio and blocking, with Kafka's errors raised;
and the broker throttling a producer over its producer_byte_rate (its quota sensor's throttle time)."""

from __future__ import annotations

import asyncio
import time

import pytest
from support import proto
from support.batches import batch
from support.inprocess import InProcessBroker
from support.raw import RawConnection, nested, request

from odradek.client import errors
from odradek.client.aio import AIOAdmin, AIOProducer
from odradek.client.sync import Admin
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header


def test_alter_and_describe_client_quotas(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                await admin.alter_client_quotas(
                    [
                        ({"user": "alice"}, {"producer_byte_rate": 1024}),
                        ({"user": None, "client-id": "app"}, {"request_percentage": 25.5}),
                    ]
                )
                assert await admin.describe_client_quotas() == {
                    (("user", "alice"),): {"producer_byte_rate": 1024.0},
                    (("client-id", "app"), ("user", None)): {"request_percentage": 25.5},
                }
                assert await admin.describe_client_quotas({"user": None}) == {
                    (("client-id", "app"), ("user", None)): {"request_percentage": 25.5}
                }
                assert await admin.describe_client_quotas({"user": ...}, strict=True) == {
                    (("user", "alice"),): {"producer_byte_rate": 1024.0}
                }
                await admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": None})])
                assert await admin.describe_client_quotas({"user": "alice"}) == {}
                with pytest.raises(errors.KafkaError) as e:
                    await admin.alter_client_quotas([({"user": "x"}, {"consumer_byte_rate": 0.5})])
                assert e.value.code == 42 and "must be a LONG value" in str(e.value)

            def blocking() -> dict:
                with Admin(conf) as admin:
                    admin.alter_client_quotas([({"client-id": None}, {"consumer_byte_rate": 4096})])
                    return admin.describe_client_quotas({"client-id": None})

            assert await asyncio.to_thread(blocking) == {(("client-id", None),): {"consumer_byte_rate": 4096.0}}

    asyncio.run(main())


def test_a_producer_over_its_quota_is_throttled(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                await admin.create_topics(["t"])
                await admin.alter_client_quotas([({"client-id": "small"}, {"producer_byte_rate": 10_000})])
            async with AIOProducer({**conf, "client.id": "small", "linger.ms": 0}) as p:
                for _ in range(12):  # 120 kB: past the 10 windows' 100 kB credit
                    await p.send_and_wait("t", b"x" * 10_000)
            sensor = b.services.quotas.produce.sensors[("", "small")]
            assert sensor.throttled > 0 and sensor.throttle_ms_total > 0
            families = {f.name: f for f in b.services.quotas.collect()}
            throttle = {tuple(x.labels.values()): x.value for x in families["odradek_quota_throttle_time_ms"].samples}
            assert throttle[("Produce", "", "small")] == sensor.throttle_ms_total
            rates = {tuple(x.labels.values()): x.value for x in families["odradek_quota_rate"].samples}
            assert rates[("Produce", "", "small")] > 5_000  # bytes/s measured over the last windows

    asyncio.run(main())


def test_request_percentage_throttles_every_api(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                # 0.001 % of a thread: 0.1 ms of processing over the 10 s the rate counts at least
                await admin.alter_client_quotas([({"client-id": "greedy"}, {"request_percentage": 0.001})])
            async with AIOAdmin({**conf, "client.id": "greedy"}) as greedy:
                for _ in range(4):
                    await greedy.describe_client_quotas()
                r = await greedy._to_controller(48, {"components": [], "strict": False})
                assert r.throttle_time.total_seconds() > 0  # throttle_time_ms in the response itself
            sensor = b.services.quotas.request.sensors[("", "greedy")]
            assert sensor.throttled > 0
            assert sensor.throttle_ms_total <= sensor.throttled * 1000  # capped at one window each, as Kafka

    asyncio.run(main())


def test_a_fetch_throttled_by_the_request_quota_is_answered_empty(tmp_path):
    """As Kafka's KafkaApis: a Fetch is charged to the request quota in its handler, and throttled
    by it (not only by consumer_byte_rate) its answer carries no records; a Produce's carries the
    request throttle too. A follower's Fetch is exempt from the request quota."""

    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                await admin.create_topics(["t"])
                await admin.alter_client_quotas([({"client-id": "greedy"}, {"request_percentage": 0.001})])
            async with AIOAdmin({**conf, "client.id": "greedy"}) as greedy:
                node = next(iter(greedy.cluster.metadata.brokers))
                for _ in range(3):
                    r = await greedy.cluster.send(node, 0, {
                        "transactional_id": None, "acks": 1, "timeout": 5000,
                        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch(1)}]}],
                    })  # fmt: skip
                    assert int(r.responses[0].partition_responses[0].error_code) == 0
                assert r.throttle_time.total_seconds() > 0
                fetch = {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                    "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                "partition_max_bytes": 1 << 20}]}],
                }  # fmt: skip
                f = await greedy.cluster.send(node, 1, fetch)
                assert 0 < f.throttle_time_ms <= 1000 and f.responses == []
                # a follower's fetch (replica id 1: not a replica here, answered with an error) is not
                # charged: this client, far over its quota, would be throttled by any charge
                f = await greedy.cluster.send(node, 1, {**fetch, "replica_id": 1})
                assert f.throttle_time_ms == 0 and f.responses

    asyncio.run(main())


def test_a_request_is_not_charged_for_what_ran_while_it_waited(tmp_path):
    """A Fetch waiting in the purgatory while the broker's thread works for others (here the test
    itself, on the same event loop) is charged its own steps only: 1 % of a thread is far more
    than a Fetch takes, far less than the half second burnt beside it."""

    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                await admin.create_topics(["t"])
                await admin.alter_client_quotas([({"client-id": "patient"}, {"request_percentage": 1})])
            async with AIOAdmin({**conf, "client.id": "patient"}) as patient:
                node = next(iter(patient.cluster.metadata.brokers))
                fetch = {
                    "replica_id": -1, "max_wait": 1000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                    "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                "partition_max_bytes": 1 << 20}]}],
                }  # fmt: skip
                waiting = asyncio.ensure_future(patient.cluster.send(node, 1, fetch))
                await asyncio.sleep(0.2)  # the Fetch is in the purgatory
                end = time.thread_time() + 0.5
                while time.thread_time() < end:  # the thread busy with other work
                    pass
                f = await waiting
                assert f.throttle_time_ms == 0 and f.responses
            sensor = b.services.quotas.request.sensors[("", "patient")]
            assert sensor.throttled == 0

    asyncio.run(main())


def test_the_produce_quota_charges_the_whole_request(tmp_path):
    """Kafka's KafkaApis charges producer_byte_rate with `request.sizeInBytes` (header and body),
    not the record bytes: a request of one small record costs half as much again as its batch. odradek
    charged the batch bytes alone, which let small-request producers past their quota."""

    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            addr = f"127.0.0.1:{b.broker.bound[0][1]}"
            async with AIOAdmin({"bootstrap.servers": addr}) as admin:
                await admin.create_topics(["t"])
                await admin.alter_client_quotas([({"client-id": "raw-test"}, {"producer_byte_rate": 1_000_000})])
            records = proto.batch((None, b"v"))
            pd = nested(0, proto.V_PRODUCE, "PartitionProduceData", index=0, records=records)
            td = nested(0, proto.V_PRODUCE, "TopicProduceData", name="t", partition_data=(pd,))
            req = request(0, proto.V_PRODUCE, transactional_id=None, acks=1, timeout=10000, topic_data=(td,))
            flexible = messages.is_flexible(0, proto.V_PRODUCE)
            frame = len(encode_request_header(0, proto.V_PRODUCE, 1, "raw-test", flexible) + messages.encode(req))

            def send() -> None:
                with RawConnection(addr) as c:
                    c.send(0, proto.V_PRODUCE, req)
                    c.recv(0, proto.V_PRODUCE)

            await asyncio.to_thread(send)
            rate = b.services.quotas.produce.sensors[("", "raw-test")].rate
            charged = sum(s.value for s in rate._samples)
            assert charged == frame > len(records) + 30

    asyncio.run(main())
