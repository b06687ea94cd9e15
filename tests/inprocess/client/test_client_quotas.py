"""odradek's client quota admin calls (client/aio/admin_quotas.py) against an in-process broker:
alter_client_quotas and describe_client_quotas, asyncio and blocking, with Kafka's errors raised;
and the broker throttling a producer over its producer_byte_rate (its quota sensor's throttle time)."""

from __future__ import annotations

import asyncio

import pytest
from support.inprocess import InProcessBroker

from odradek.client import errors
from odradek.client.aio import AIOAdmin, AIOProducer
from odradek.client.sync import Admin


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
