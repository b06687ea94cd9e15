"""The six real clients over SASL_SSL against one broker process, with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512: each creates nothing itself (the topic comes over PLAINTEXT), produces its own
records, and reads everything back as a member of a new consumer group (so each client's
FindCoordinator, JoinGroup and SyncGroup go over the authenticated, encrypted connection).
One broker for the module enables the three mechanisms on its SASL_SSL listener; the SCRAM users
are created through AlterUserScramCredentials on the PLAINTEXT listener."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
)
from confluent_kafka.admin import UserScramCredentialUpsertion as Upsert
from support.broker import BrokerProcess, free_port
from support.clients import SaslLogin, every_client_produces_and_consumes
from support.tls import Pki

pytestmark = pytest.mark.interop

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-Secret-1" user_admin="admin-Secret-0";'
)
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
LOGINS = {
    "PLAIN": SaslLogin("PLAIN", "alice", "alice-Secret-1"),
    "SCRAM-SHA-256": SaslLogin("SCRAM-SHA-256", "bob", "bob-Secret-256"),
    "SCRAM-SHA-512": SaslLogin("SCRAM-SHA-512", "carol", "carol-Secret-512"),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    pki = Pki.create(tmp_path_factory.mktemp("pki"))
    identity = pki.identity("broker", "/O=odradek/CN=broker", hosts=("127.0.0.1", "localhost"))
    plain_port, secure_port = free_port(), free_port()
    b = BrokerProcess(
        tmp_path_factory.mktemp("sasl-ssl"),
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SECURE://127.0.0.1:{secure_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(LOGINS),
            "listener.name.secure.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.secure.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.secure.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            **pki.broker_settings(identity, "SECURE"),
        },
        port=plain_port,
    )
    b.secure_bootstrap = f"127.0.0.1:{secure_port}"
    b.tls = pki.client_files()
    with b.start():
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        upserts: list[UserScramCredentialAlteration] = [
            Upsert(
                x.username, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096), x.password.encode()
            )
            for m, x in LOGINS.items()
            if m != "PLAIN"
        ]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(timeout=30)
        yield b


@pytest.mark.parametrize("mechanism", list(LOGINS))
def test_six_clients_produce_consume_and_join_a_group_over_sasl_ssl(broker, mechanism):
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    every_client_produces_and_consumes(
        broker.secure_bootstrap, topic, tls=broker.tls, sasl=LOGINS[mechanism], records=3
    )
