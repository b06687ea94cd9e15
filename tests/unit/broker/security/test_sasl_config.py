"""SASL settings: listener-scoped names (BrokerConfig.for_listener) and what SaslServer.check_config
refuses at startup."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security.sasl import SaslServer

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def config(**extra: str) -> BrokerConfig:
    raw = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    raw.update({k.replace("__", "."): v for k, v in extra.items()})
    return BrokerConfig(raw)


def test_listener_scoped_settings_win_over_the_broker_wide_value():
    c = BrokerConfig(
        {
            "connections.max.reauth.ms": "1000",
            "listener.name.SASL_PLAINTEXT.connections.max.reauth.ms": "2000",
            "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "3000",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        }
    )
    assert c.for_listener("SASL_PLAINTEXT", "connections.max.reauth.ms", "SCRAM-SHA-256") == 3000
    assert c.for_listener("SASL_PLAINTEXT", "connections.max.reauth.ms", "PLAIN") == 2000
    assert c.for_listener("OTHER", "connections.max.reauth.ms") == 1000
    assert c.for_listener("sasl_plaintext", "sasl.enabled.mechanisms") == ["SCRAM-SHA-256"]
    assert c.for_listener("SASL_PLAINTEXT", "sasl.jaas.config", "PLAIN", fallback=False) is None


def test_unknown_listener_scoped_names_are_refused():
    with pytest.raises(ConfigError, match="unknown setting: listener.name.x.no.such"):
        BrokerConfig({"listener.name.x.no.such": "1"})
    with pytest.raises(ConfigError, match="invalid value"):
        BrokerConfig({"listener.name.x.connections.max.reauth.ms": "-1"})


def test_a_valid_sasl_listener():
    listeners = SaslServer.check_config(config())
    assert list(listeners) == ["SASL_PLAINTEXT"]
    assert listeners["SASL_PLAINTEXT"].mechanisms == ("PLAIN",)
    assert listeners["SASL_PLAINTEXT"].plain_users == {"alice": "pw"}
    assert listeners["SASL_PLAINTEXT"].max_receive_size == 524288


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sasl__enabled__mechanisms": "GSSAPI"}, "GSSAPI is not implemented"),
        ({"sasl__enabled__mechanisms": "PLAIN,OAUTHBEARER"}, "OAUTHBEARER is not implemented"),
        ({"sasl__enabled__mechanisms": "SCRAM-SHA-1"}, "unknown SASL mechanism SCRAM-SHA-1"),
        ({"sasl__enabled__mechanisms": "SCRAM-SHA-256"}, "scram-sha-256.sasl.jaas.config is not set"),
        ({"listener__name__sasl_plaintext__plain__sasl__jaas__config": SCRAM_JAAS}, "PLAIN needs"),
        ({"listener__name__sasl_plaintext__plain__sasl__jaas__config": "x required"}, "semi-colon"),
    ],
)
def test_refused_at_startup(extra, message):
    with pytest.raises(ConfigError, match=message):
        SaslServer.check_config(config(**extra))


def test_kafkas_default_gssapi_is_refused_only_with_a_sasl_listener():
    assert SaslServer.check_config(BrokerConfig({})) == {}
    with pytest.raises(ConfigError, match="GSSAPI"):
        SaslServer.check_config(BrokerConfig({"listeners": "PLAINTEXT://:0,SASL_PLAINTEXT://:1"}))
