"""The broker's own SASL login to a SASL inter-broker listener (broker/interbroker/sasl_login.py):
taken from the listener's JAAS entry for sasl.mechanism.inter.broker.protocol, as Kafka takes it;
what cannot be served stops startup with a message that names the setting, never a password."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.interbroker.sasl_login import inter_broker_login

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-Secret";'
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-Secret" user_admin="admin-Secret";'
)


JAAS_KEY = "listener.name.replication.scram-sha-512.sasl.jaas.config"


def config(extra: dict[str, str | None] | None = None, **more: str) -> BrokerConfig:
    """The settings below with `extra` (None: the setting left out) and `more` (`__` for `.`)."""
    raw: dict[str, str | None] = {
        "listeners": "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name": "REPLICATION",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.replication.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    raw.update(extra or {})
    raw.update({k.replace("__", "."): v for k, v in more.items()})
    return BrokerConfig({k: v for k, v in raw.items() if v is not None})


def test_the_login_is_the_listeners_entry_for_the_inter_broker_mechanism():
    login = inter_broker_login(config())
    assert login is not None
    assert (login.listener, login.mechanism, login.username, login.password) == (
        "REPLICATION",
        "SCRAM-SHA-512",
        "broker",
        "b-Secret",
    )
    assert "b-Secret" not in repr(login)
    plain = inter_broker_login(config(sasl__mechanism__inter__broker__protocol="PLAIN"))
    assert plain is not None and (plain.mechanism, plain.username) == ("PLAIN", "admin")


def test_the_broker_wide_jaas_setting_is_the_fallback():
    c = config({JAAS_KEY: None}, sasl__jaas__config=SCRAM_JAAS.replace('"broker"', '"other"'))
    login = inter_broker_login(c)
    assert login is not None and login.username == "other"


def test_no_login_without_a_sasl_inter_broker_listener():
    assert inter_broker_login(config(inter__broker__listener__name="PLAINTEXT")) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "authenticate to each other with PLAIN"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "must be one of the mechanisms"),
        ({JAAS_KEY: 'org.apache.kafka.common.security.scram.ScramLoginModule required password="b-Secret";'}, "needs"),
        ({JAAS_KEY: "x required"}, "invalid"),
        ({JAAS_KEY: None}, "is not set"),
    ],
)
def test_refused_at_startup(extra, message):
    with pytest.raises(ConfigError, match=message) as e:
        inter_broker_login(config(extra))
    assert "b-Secret" not in str(e.value)


def test_security_inter_broker_protocol_names_the_inter_broker_listener():
    c = BrokerConfig({"listeners": "PLAINTEXT://:0,SASL_SSL://:0", "security.inter.broker.protocol": "SASL_SSL"})
    assert c.inter_broker_listener == "SASL_SSL"
    assert BrokerConfig({"listeners": "PLAINTEXT://:0,SASL_SSL://:0"}).inter_broker_listener == "PLAINTEXT"
    with pytest.raises(ConfigError, match="must be one of"):
        BrokerConfig({"security.inter.broker.protocol": "TLS"})


def test_the_listener_named_plaintext_is_the_inter_broker_one_wherever_it_is_listed():
    """Kafka's default (security.inter.broker.protocol=PLAINTEXT names the listener): a PLAINTEXT
    listener listed second is still the one brokers talk over; without one, the first listener."""
    assert BrokerConfig({"listeners": "SSL://:0,PLAINTEXT://:0"}).inter_broker_listener == "PLAINTEXT"
    assert BrokerConfig({"listeners": "EXTERNAL://:0,INTERNAL://:0"}).inter_broker_listener == "EXTERNAL"
