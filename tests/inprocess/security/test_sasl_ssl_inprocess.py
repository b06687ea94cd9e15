"""SASL_SSL: a TLS handshake, then SASL on the encrypted connection. odradek's client produces and
consumes with SCRAM-SHA-512 and PLAIN over it; the connection's principal is the SASL user's; a
wrong password is refused with SASL_AUTHENTICATION_FAILED after the handshake."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.inprocess import InProcessBroker
from support.secure_clients import produce_and_consume, scram_user

from odradek.client.aio import AIOAdmin, NewTopic

CERTS = Path(__file__).resolve().parents[2] / "support" / "tls_certs"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_ssl.plain.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";'
    ),
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
    "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
    "listener.name.sasl_ssl.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
}


def _conf(b: InProcessBroker, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{b.broker.bound[1][1]}",
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(CERTS / "ca.pem"),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize(
    ("mechanism", "user", "password"), [("SCRAM-SHA-512", "carol", "carol-pw"), ("PLAIN", "alice", "alice-pw")]
)
def test_produce_and_consume_over_sasl_ssl(tmp_path, mechanism, user, password):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            await scram_user(b, "carol", "carol-pw", "SCRAM-SHA-512")
            conf = _conf(b, mechanism, user, password)
            principals: set[str] = set()
            await produce_and_consume(
                conf,
                lambda: principals.update(
                    c.state.principal for c in b.broker.connections if c.state.listener_name == "SASL_SSL"
                ),
            )
            assert principals == {f"User:{user}"}

    asyncio.run(main())


def test_a_wrong_password_over_tls_is_refused(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            with pytest.raises(Exception) as e:
                async with AIOAdmin(_conf(b, "PLAIN", "alice", "wrong")) as admin:
                    await admin.create_topics([NewTopic("t", 1, 1)])
            assert getattr(e.value, "code", None) == 58, repr(e.value)

    asyncio.run(main())
