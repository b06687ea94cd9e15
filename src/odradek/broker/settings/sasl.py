"""SASL settings (Kafka's BrokerSecurityConfigs and SaslConfigs): the mechanisms each listener
enables, its login module configuration, session lifetime and token size (broker/security/sasl.py).

Listener-scoped forms (Kafka's): `listener.name.<listener>.sasl.enabled.mechanisms`, and per
mechanism `listener.name.<listener>.<mechanism>.sasl.jaas.config` (the broker's server-side
JAAS configuration: Kafka reads no other for a listener) and
`listener.name.<listener>.<mechanism>.connections.max.reauth.ms`; BrokerConfig.for_listener.
GSSAPI and OAUTHBEARER are Kafka's names too, refused at startup on a SASL listener.
"""

from __future__ import annotations

from odradek.broker.settings.setting import Setting, at_least

S = Setting

SASL: tuple[Setting, ...] = (
    S(
        "sasl.enabled.mechanisms",
        "list",
        ["GSSAPI"],
        "SASL mechanisms a SASL listener accepts: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default, GSSAPI, "
        "and OAUTHBEARER are refused at startup on a SASL listener).",
    ),
    S(
        "sasl.mechanism.inter.broker.protocol",
        "string",
        "GSSAPI",
        "SASL mechanism brokers log in to each other with when the inter-broker listener is SASL_PLAINTEXT or "
        "SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, one the listener enables (GSSAPI is refused at startup). "
        "The user and password are the username and password options of "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config.",
    ),
    S(
        "sasl.jaas.config",
        "password",
        "",
        "JAAS login module for a mechanism with no listener.name.<listener>.<mechanism>.sasl.jaas.config: for the "
        "broker's own login to a SASL inter-broker listener (its username and password options). A listener's "
        "server side is listener.name.<listener>.<mechanism>.sasl.jaas.config only.",
    ),
    S(
        "connections.max.reauth.ms",
        "long",
        0,
        "Longest a SASL session lasts before the client must re-authenticate (KIP-368); 0: no limit. "
        "Sent to clients in SaslAuthenticate v1+; a connection past it that sends anything but a "
        "re-authentication is closed.",
        validate=at_least(0),
    ),
    S(
        "sasl.server.max.receive.size",
        "int",
        524288,
        "Largest SASL token (and request) a client may send before it has authenticated; a larger one "
        "closes the connection.",
        validate=at_least(1),
    ),
)

# names that may be given per listener, and per listener and mechanism (listener.name.<l>.[<mech>.]<name>)
LISTENER_SCOPED = frozenset({"sasl.enabled.mechanisms", "sasl.server.max.receive.size", "connections.max.reauth.ms"})
MECHANISM_SCOPED = frozenset({"sasl.jaas.config", "connections.max.reauth.ms"})
