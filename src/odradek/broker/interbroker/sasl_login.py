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

**Authentication before the first request.** `SaslConnection` is a client connection that,
after ApiVersions, runs SaslHandshake v1 and SaslAuthenticate (v0-2; SCRAM checks the server's
signature) before it is handed to any caller: a failure fails the connect (the channels back off
and try again, as for a peer that cannot be reached).

**Re-authentication (KIP-368).** When the server gives the session a lifetime
(`connections.max.reauth.ms`, SaslAuthenticate v1+'s `session_lifetime_ms`), the connection
re-authenticates on itself at a random point between 85 % and 95 % of it (the Java client's
window): new requests wait, the ones in flight are answered (requests on one connection are
answered in order; a re-authentication must not interleave with them), then SaslHandshake and
SaslAuthenticate again, with the same mechanism and user, and the waiting requests go on. A
failed re-authentication closes the connection; its users reconnect through the channels.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.broker.security.sasl import SASL_PROTOCOLS
from odradek.client.conn import Connection
from odradek.client.errors import KafkaConnectionError
from odradek.client.sasl import exchange
from odradek.protocol.sasl import SERVED_MECHANISMS

__all__ = ["InterBrokerLogin", "SaslConnection", "inter_broker_login"]

log = logging.getLogger("odradek.broker.interbroker")

REAUTH_WINDOW = (0.85, 0.95)  # of the session lifetime: the Java client's re-authentication point

Request = Callable[..., Awaitable[Any]]


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


async def authenticate(request: Request, conn: Connection, login: InterBrokerLogin) -> int:
    """One SASL exchange on `conn` (`request`: how to send on it): the client's
    (client/sasl.py `exchange`); the session lifetime the server gives, in ms (0: none)."""
    return await exchange(request, conn, login.mechanism, login.username, login.password)


class SaslConnection(Connection):
    """A connection to another broker's SASL inter-broker listener: authenticated before its
    first request, re-authenticated within its session's lifetime (module doc)."""

    def __init__(
        self, host: str, port: int, *, login: InterBrokerLogin, rand: Callable[[], float] = random.random, **kw: Any
    ) -> None:
        super().__init__(host, port, authenticate=self._first_login, **kw)
        self.login = login
        self._rand = rand
        self._open = asyncio.Event()  # clear while re-authenticating: new requests wait
        self._open.set()
        self._drained: asyncio.Event | None = None  # set when the last request in flight is answered
        self._timer: asyncio.TimerHandle | None = None
        self._reauth: asyncio.Task | None = None
        self.reauthentications = 0  # completed re-authentications (tests, logs)
        self.on_close(self._stop_reauth)

    async def request(self, api_key: int, data: Any, **kw: Any) -> Any:
        while not self._open.is_set():
            await self._open.wait()
        try:
            return await super().request(api_key, data, **kw)
        finally:
            if self._drained is not None and not self.in_flight:
                self._drained.set()

    async def _first_login(self, _conn: Connection) -> None:
        self._schedule(await authenticate(super().request, self, self.login))

    def _schedule(self, lifetime_ms: int) -> None:
        if lifetime_ms <= 0 or not self.connected:
            return
        lo, hi = REAUTH_WINDOW
        delay = lifetime_ms * (lo + (hi - lo) * self._rand()) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._start_reauth)

    def _start_reauth(self) -> None:
        self._timer = None
        if self.connected:
            self._reauth = asyncio.ensure_future(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        self._open.clear()
        try:
            if self.in_flight:
                self._drained = asyncio.Event()
                await asyncio.wait_for(self._drained.wait(), self.request_timeout)
            if not self.connected:
                return
            lifetime = await authenticate(super().request, self, self.login)
            self.reauthentications += 1
            log.debug("re-authenticated to %s:%d (%s)", self.host, self.port, self.login.mechanism)
            self._schedule(lifetime)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure ends this connection; its users reconnect
            log.warning("re-authentication to %s:%d failed, closing the connection: %s", self.host, self.port, e)
            self.close(KafkaConnectionError(f"SASL re-authentication to {self.host}:{self.port} failed: {e}"))
        finally:
            self._drained = None
            self._open.set()

    def _stop_reauth(self, _conn: Connection) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._reauth = self._reauth, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
