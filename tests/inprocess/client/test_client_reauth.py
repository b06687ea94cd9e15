"""KIP-368 on odradek's client: with the broker's `connections.max.reauth.ms` at 1.5 s, a producer
and a consumer group member running for 6 s keep their connections (the broker closes one whose
session ran out), re-authenticating on them before each session ends, and every record sent is
acknowledged and read back in order: requests in flight while a re-authentication starts are
answered, those made during it are sent after it."""

from __future__ import annotations

import asyncio
import time

from support.inprocess import InProcessBroker
from support.secure_clients import scram_user

from odradek.client.aio import AIOAdmin, AIOConsumer, AIOProducer, NewTopic

SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "connections.max.reauth.ms": "1500",
}
RUN_S = 6.0


def test_producer_and_consumer_re_authenticate_and_keep_their_connections(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            await scram_user(b, "carol", "carol-pw", "SCRAM-SHA-512")
            conf = {
                "bootstrap.servers": f"127.0.0.1:{b.broker.bound[1][1]}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "carol",
                "sasl.password": "carol-pw",
            }
            async with AIOAdmin(conf) as admin:
                await admin.create_topics([NewTopic("t", 1, 1)])
            async with (
                AIOProducer(conf, linger_ms=0) as p,
                AIOConsumer("t", config=conf, group_id="g", auto_offset_reset="earliest", fetch_max_wait_ms=200) as c,
            ):
                await p.send_and_wait("t", b"first")
                got = [r.value for r in await c.poll(2.0)]
                producer_conns = dict(p._core.cluster._conns)
                consumer_conns = dict(c.cluster._conns)
                sent = [b"first"]
                deadline = time.monotonic() + RUN_S
                i = 0

                async def consume():
                    while time.monotonic() < deadline or (len(got) < len(sent) and time.monotonic() < deadline + 5):
                        got.extend(r.value for r in await c.poll(0.2))

                reader = asyncio.create_task(consume())
                while time.monotonic() < deadline:
                    # several in flight at once, so some are on the wire when a re-authentication starts
                    batch = [f"v{i + k}".encode() for k in range(5)]
                    await asyncio.gather(*(p.send_and_wait("t", v) for v in batch))
                    sent += batch
                    i += 5
                    await asyncio.sleep(0.02)
                await reader
                assert got == sent
                for node, conn in producer_conns.items():
                    assert p._core.cluster._conns.get(node) is conn and conn.connected, "producer reconnected"
                    assert conn.reauthentications >= 2, conn.reauthentications
                assert consumer_conns
                for node, conn in consumer_conns.items():
                    assert c.cluster._conns.get(node) is conn and conn.connected, "consumer reconnected"
                    assert conn.reauthentications >= 2, conn.reauthentications

    asyncio.run(main())
