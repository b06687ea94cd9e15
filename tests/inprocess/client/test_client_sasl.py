"""odradek's client over SASL_PLAINTEXT (client/sasl.py) against an in-process broker: PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512 produce and consume; a wrong password fails with the broker's
SASL_AUTHENTICATION_FAILED; what the client does not serve is refused when it is built."""

from __future__ import annotations

import asyncio

import pytest
from support.inprocess import InProcessBroker
from support.secure_clients import produce_and_consume, scram_user

from odradek.client import sasl
from odradek.client.aio import AIOAdmin, NewTopic

JAAS = {
    "plain": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";',
    "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
}
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    **{f"listener.name.sasl_plaintext.{m}.sasl.jaas.config": v for m, v in JAAS.items()},
}
USERS = {"PLAIN": ("alice", "alice-pw"), "SCRAM-SHA-256": ("bob", "bob-pw"), "SCRAM-SHA-512": ("carol", "carol-pw")}


@pytest.mark.parametrize("mechanism", list(USERS))
def test_produce_and_consume(tmp_path, mechanism):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            for m, (user, pw) in USERS.items():
                if m != "PLAIN":
                    await scram_user(b, user, pw, m)
            user, pw = USERS[mechanism]
            conf = {
                "bootstrap.servers": f"127.0.0.1:{b.broker.bound[1][1]}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "sasl.password": pw,
            }
            await produce_and_consume(conf)

    asyncio.run(main())


def test_wrong_password_fails_with_the_brokers_error(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            conf = {
                "bootstrap.servers": f"127.0.0.1:{b.broker.bound[1][1]}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="alice" password="wrong";',
            }
            with pytest.raises(Exception) as e:
                async with AIOAdmin(conf) as admin:
                    await admin.create_topics([NewTopic("t", 1, 1)])
            assert getattr(e.value, "code", None) == 58, repr(e.value)
            assert "Invalid username or password" in str(e.value)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI is not supported"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs sasl.username"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
            "sasl.mechanism=OAUTHBEARER is not supported",
        ),
    ],
)
def test_refused_when_built(config, message):
    with pytest.raises(ValueError, match=message):
        sasl.authenticator(config)
    assert sasl.authenticator({"security.protocol": "PLAINTEXT"}) is None
