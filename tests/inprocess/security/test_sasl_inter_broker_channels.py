"""The inter-broker channels to a SASL listener of a real (in-process) broker: each connection
logs in before its first request with the broker's own login (broker/interbroker/sasl_login.py),
and re-authenticates on itself within the session lifetime the server gives
(`connections.max.reauth.ms`, KIP-368) while requests keep flowing, none failing; a wrong
password fails the connect (the channels back off) rather than a request."""

from __future__ import annotations

import asyncio

import pytest
from support.inprocess import InProcessBroker

from odradek.broker.interbroker.channels import ChannelPolicy, NodeChannels, NodeUnavailable
from odradek.broker.interbroker.sasl_login import InterBrokerLogin
from odradek.client.conn import Connection
from odradek.client.sasl import authenticator
from odradek.cluster.metadata import BrokerInfo

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="b-Secret-1";'
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.replication.plain.sasl.jaas.config": PLAIN_JAAS,
    "connections.max.reauth.ms": "2000",
}
METADATA = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
GOOD = InterBrokerLogin("REPLICATION", "PLAIN", "broker", "b-Secret-1")


def run(tmp_path, body) -> None:  # noqa: ANN001
    async def main() -> None:
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            _plain, (_h, port) = b.broker.bound
            await body(port)

    asyncio.run(main())


async def keep_asking(conn: Connection, seconds: float) -> int:
    """Metadata requests from three tasks for `seconds`: how many were answered (all must be)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    answered = 0

    async def one() -> None:
        nonlocal answered
        while loop.time() < end:
            await conn.request(3, METADATA, version=12)
            answered += 1
            await asyncio.sleep(0.01)

    await asyncio.gather(one(), one(), one())
    return answered


def test_the_channel_logs_in_and_re_authenticates_within_the_session_lifetime(tmp_path):
    async def body(port: int) -> None:
        channels = NodeChannels(
            1, lambda node: BrokerInfo(2, "127.0.0.1", port), ChannelPolicy(sasl=GOOD), rand=lambda: 0.0
        )
        try:
            conn = await channels.connection(2, "forwarding")
            # the session lasts 2 s: re-authenticated at 85-95 % of it, by 1.9 s and 3.8 s
            answered = await keep_asking(conn, 4.2)
            assert conn.connected and answered > 30
            assert conn.reauthentications >= 2
            assert await channels.connection(2, "forwarding") is conn
        finally:
            channels.close()

    run(tmp_path, body)


def test_without_re_authentication_the_server_closes_the_connection(tmp_path):
    """The check above can fail: the same requests on a connection that authenticated once
    but never again are refused once its session ends (the server closes it)."""

    async def body(port: int) -> None:
        auth = authenticator(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
            | {"sasl.username": "broker", "sasl.password": "b-Secret-1"}
        )

        async def once(c: Connection) -> None:
            await auth(c)  # the session lifetime it returns is dropped: the client never re-authenticates

        conn = await Connection("127.0.0.1", port, authenticate=once).connect()
        try:
            with pytest.raises(Exception):  # noqa: B017,PT011 - the connection's error, whichever it is
                await keep_asking(conn, 3.2)
            assert not conn.connected
        finally:
            conn.close()

    run(tmp_path, body)


def test_a_wrong_password_fails_the_connect_and_backs_off(tmp_path):
    async def body(port: int) -> None:
        bad = InterBrokerLogin("REPLICATION", "PLAIN", "broker", "wrong")
        channels = NodeChannels(1, lambda node: BrokerInfo(2, "127.0.0.1", port), ChannelPolicy(sasl=bad))
        try:
            with pytest.raises(NodeUnavailable, match="Invalid username or password"):
                await channels.connection(2, "forwarding")
            assert channels._slots[(2, "forwarding")].failures == 1
        finally:
            channels.close()

    run(tmp_path, body)
