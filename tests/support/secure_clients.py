"""For odradek's client over a secured listener of an in-process broker: a SCRAM user created
through AlterUserScramCredentials, and a produce-then-consume round trip."""

from __future__ import annotations

from collections.abc import Callable

from support.inprocess import InProcessBroker
from support.raw import nested

from odradek.client.aio import AIOAdmin, AIOConsumer, AIOProducer, NewTopic
from odradek.protocol.scram import salted_password


async def scram_user(b: InProcessBroker, user: str, password: str, mechanism: str) -> None:
    salt = b"salt-" + user.encode()
    up = nested(
        51,
        0,
        "ScramCredentialUpsertion",
        name=user,
        mechanism={"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}[mechanism],
        iterations=4096,
        salt=salt,
        salted_password=salted_password(mechanism, password, salt, 4096),
    )
    r = await b.call(51, 0, deletions=(), upsertions=(up,))
    assert r.results[0].error_code == 0


async def produce_and_consume(conf: dict, while_connected: Callable[[], None] = lambda: None) -> None:
    """Create topic t, produce three records, call `while_connected` while the producer is
    connected, and read the three back in a group."""
    async with AIOAdmin(conf) as admin:
        await admin.create_topics([NewTopic("t", 1, 1)])
    async with AIOProducer(conf) as p:
        for i in range(3):
            await p.send_and_wait("t", f"v{i}".encode())
        while_connected()
    async with AIOConsumer("t", config=conf, group_id="g", auto_offset_reset="earliest") as c:
        got: list[bytes] = []
        for _ in range(20):
            got += [r.value for r in await c.poll(0.5)]
            if len(got) >= 3:
                break
    assert got == [b"v0", b"v1", b"v2"]
