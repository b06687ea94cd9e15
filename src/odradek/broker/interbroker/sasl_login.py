"""The broker's own SASL login to the other brokers' inter-broker listener, and KIP-368
re-authentication on those connections.

**The login, as Kafka takes it.** When the inter-broker listener's security protocol is
SASL_PLAINTEXT or SASL_SSL, the broker authenticates each of its connections to the other
brokers with `sasl.mechanism.inter.broker.protocol` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's
default GSSAPI is refused at startup, as on a listener), which must be one the listener enables.
Its user and password are the `username` and `password` options of the listener's JAAS setting
for that mechanism, `listener.name.<listener>.<mechanism>.sasl.jaas.config`, the same entry that
serves the listener (Kafka's broker reads its client login from it), or else of the broker-wide
`sasl.jaas.config`:

    listener.name.replication.scram-sha-512.sasl.jaas.config=\
        org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="...";

A missing option stops startup with a message naming the setting (never the values). With
SCRAM the user must exist before the brokers start (created in ZooKeeper, as Kafka's docs do
with `kafka-configs --zookeeper`); with PLAIN it must be one of the entry's `user_<name>`.

**Authentication before the first request.** `login_authenticator(login)` is what the
channels give a client connection (client/conn.py) to run after ApiVersions: SaslHandshake v1 and
SaslAuthenticate (v0-2; SCRAM checks the server's signature), client/sasl.py's `exchange`, before
it is handed to any caller: a failure fails the connect (the channels back off and try again, as
for a peer that cannot be reached).

**Re-authentication (KIP-368)** is the client connection's own: when the server gives the session
a lifetime (`connections.max.reauth.ms`), it runs the exchange again at 85-95 % of it, behind the
requests in flight, with the requests made meanwhile written after it; a failure closes the
connection, and its users reconnect through the channels.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.broker.security.sasl import SASL_PROTOCOLS
from odradek.client.conn import Connection
from odradek.client.sasl import exchange
from odradek.protocol.sasl import SERVED_MECHANISMS

__all__ = ["InterBrokerLogin", "inter_broker_login", "login_authenticator"]

log = logging.getLogger("odradek.broker.interbroker")


@dataclass(frozen=True)
class InterBrokerLogin:
    """The mechanism, user and password this broker authenticates to the others with."""

    listener: str
    mechanism: str
    username: str
    password: str = field(repr=False)


def inter_broker_login(config: BrokerConfig) -> InterBrokerLogin | None:
    """The broker's login for a SASL inter-broker listener (None when it is not SASL);
    ConfigError for what cannot be served."""
    listener = config.inter_broker_listener
    if config.security_protocol(listener) not in SASL_PROTOCOLS:
        return None
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
    if mechanism not in SERVED_MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener {listener} is SASL and "
            f"odradek's brokers authenticate to each other with {', '.join(SERVED_MECHANISMS)} only"
        )
    enabled = [str(m).upper() for m in config.for_listener(listener, "sasl.enabled.mechanisms")]
    if mechanism not in enabled:
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism} must be one of the mechanisms the inter-broker "
            f"listener {listener} enables (sasl.enabled.mechanisms: {', '.join(enabled)})"
        )
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.for_listener(listener, "sasl.jaas.config", mechanism)
    if not jaas:
        raise ConfigError(f"the inter-broker listener {listener} is SASL: {key} (or sasl.jaas.config) is not set")
    try:
        options = parse_jaas(jaas).options
    except JaasError as e:
        raise ConfigError(f"invalid {key}: {e}") from None
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(
            f"{key} needs username and password options: the broker's own login to the other brokers "
            f"({mechanism} on the inter-broker listener {listener})"
        )
    return InterBrokerLogin(listener, mechanism, username, password)


def login_authenticator(login: InterBrokerLogin) -> Callable[[Connection], Awaitable[int]]:
    """What a client connection runs to log in with `login` (and again to re-authenticate):
    the session lifetime the server gives, in ms (0: none)."""

    async def authenticate(conn: Connection) -> int:
        return await exchange(conn.request, conn, login.mechanism, login.username, login.password)

    return authenticate
