"""SASL authentication on the broker's side (Kafka's SaslServerAuthenticator), PLAIN and SCRAM.

`SaslServer` is built once from the settings (`SaslServer.from_config`, which refuses at startup
what is not served: GSSAPI, OAUTHBEARER, unknown mechanisms, a SASL listener without a JAAS
configuration for a mechanism it enables; the broker's own login to a SASL inter-broker listener
is broker/interbroker/sasl_login.py). Each connection on a
SASL listener gets a `SaslSession` (its state in ConnectionState.sasl), driven by the
SaslHandshake (k17) and SaslAuthenticate (k36) handlers:

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake--> AUTHENTICATE
        --SaslAuthenticate...--> COMPLETE (principal User:<name>) | FAILED (answered, then closed)

As in Kafka: ApiVersions only before the handshake; after it only SaslAuthenticate (anything
else closes the connection); an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM (33) with the
enabled list and the connection closed; a failed authentication gets SASL_AUTHENTICATION_FAILED
(58) with Kafka's message and the connection closed. SaslHandshake v0 is Kafka's legacy form:
the SASL tokens then follow as bare size-prefixed frames, not SaslAuthenticate requests
(protocol/connection.py's raw token mode); Kafka 4 still serves it.

Re-authentication (KIP-368): with `connections.max.reauth.ms` > 0 the session lifetime goes to
the client in SaslAuthenticate v1+; past it, a request other than SaslHandshake/SaslAuthenticate
closes the connection (broker/connection.py asks `expired`). A re-authentication must keep the
mechanism and the principal.

Credentials never reach a log line or an error message; failures are counted per peer
(BrokerMetrics.authentication_failed) and logged with the peer and the mechanism only.
"""

from __future__ import annotations

import enum
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.protocol.sasl import PLAIN, SCRAM_MECHANISMS, SERVED_MECHANISMS, UNSERVED_MECHANISMS, PlainError
from odradek.protocol.sasl import parse_plain as _parse_plain
from odradek.protocol.scram import TOKEN_AUTH, ScramCredential, ScramError, ScramServer

if TYPE_CHECKING:
    from odradek.broker.metrics import BrokerMetrics

__all__ = ["SASL_PROTOCOLS", "AuthenticationFailed", "SaslServer", "SaslSession", "State"]

log = logging.getLogger("odradek.broker.security.sasl")

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

# (mechanism, user) -> the user's credential for that mechanism, or None
CredentialLookup = Callable[[str, str], "ScramCredential | None"]


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class AuthenticationFailed(Exception):
    """The client failed to authenticate; the text is what the client is told (Kafka's message)."""


@dataclass(frozen=True)
class ListenerSasl:
    """What one SASL listener accepts."""

    name: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(repr=False)  # user -> password (PlainLoginModule user_<name>)
    reauth_ms: Mapping[str, int]  # mechanism -> connections.max.reauth.ms (0: none)
    max_receive_size: int


def _listener_sasl(config: BrokerConfig, listener: str) -> ListenerSasl:
    mechanisms = tuple(config.for_listener(listener, "sasl.enabled.mechanisms"))
    if not mechanisms:
        raise ConfigError(f"listener {listener} is SASL but enables no SASL mechanism (sasl.enabled.mechanisms)")
    for m in mechanisms:
        if m in UNSERVED_MECHANISMS:
            raise ConfigError(
                f"listener {listener}: SASL mechanism {m} is not implemented in odradek (served: "
                f"{', '.join(SERVED_MECHANISMS)}); remove it from sasl.enabled.mechanisms"
            )
        if m not in SERVED_MECHANISMS:
            raise ConfigError(f"listener {listener}: unknown SASL mechanism {m} in sasl.enabled.mechanisms")
    plain_users: dict[str, str] = {}
    for m in mechanisms:
        key = f"listener.name.{listener.lower()}.{m.lower()}.sasl.jaas.config"
        jaas = config.for_listener(listener, "sasl.jaas.config", m, fallback=False)
        if not jaas:
            raise ConfigError(f"listener {listener} enables {m} but {key} is not set (its JAAS login module)")
        try:
            entry = parse_jaas(jaas)
        except JaasError as e:
            raise ConfigError(f"invalid {key}: {e}") from None
        wanted = PLAIN_LOGIN_MODULE if m == PLAIN else SCRAM_LOGIN_MODULE
        if entry.login_module != wanted:
            raise ConfigError(f"{key} names login module {entry.login_module}; {m} needs {wanted}")
        if m == PLAIN:
            plain_users = {k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_")}
    return ListenerSasl(
        listener,
        mechanisms,
        plain_users,
        {m: config.for_listener(listener, "connections.max.reauth.ms", m) for m in mechanisms},
        config.for_listener(listener, "sasl.server.max.receive.size"),
    )


class SaslServer:
    """The SASL listeners' settings and the credential source, shared by every session."""

    def __init__(
        self,
        listeners: Mapping[str, ListenerSasl],
        credentials: CredentialLookup,
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.listeners = dict(listeners)
        self.credentials = credentials
        self.metrics = metrics
        self.clock = clock

    @staticmethod
    def check_config(config: BrokerConfig) -> dict[str, ListenerSasl]:
        """Every SASL listener's settings; ConfigError (startup stops) for what is not served."""
        out = {}
        for name, _h, _p in config.listeners:
            if config.security_protocol(name) in SASL_PROTOCOLS:
                out[name] = _listener_sasl(config, name)
        return out

    def session(self, listener: str, peer: str) -> SaslSession:
        return SaslSession(self, self.listeners[listener], peer)

    def failed(self, session: SaslSession, reason: str) -> None:
        """The one line a failed authentication logs (the connection's close after it does not)."""
        log.warning(
            "failed authentication with /%s (listener %s, %s): %s",
            session.peer,
            session.listener.name,
            session.mechanism or "no mechanism",
            reason,
        )
        if self.metrics is not None:
            self.metrics.authentication_failed(session.listener.name, session.peer.rsplit(":", 1)[0])


class SaslSession:
    """One connection's authentication (and re-authentications)."""

    def __init__(self, server: SaslServer, listener: ListenerSasl, peer: str) -> None:
        self.server = server
        self.listener = listener
        self.peer = peer
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens come as bare frames
        self.expires_at: float | None = None  # monotonic seconds; None: no lifetime
        self.reauthenticating = False
        self._scram: ScramServer | None = None
        self.principal_pending: str | None = None  # SCRAM: the user of the client-first message

    # --------------------------------------------------------------- gate
    def allows(self, api_key: int) -> bool:
        """Whether a request of this API may come now (before authentication completes)."""
        if self.state is State.HANDSHAKE_OR_VERSIONS:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if self.state is State.HANDSHAKE:
            return api_key == SASL_HANDSHAKE
        if self.state is State.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE and not self.raw_tokens
        return self.state is State.COMPLETE

    def versions_answered(self) -> None:
        if self.state is State.HANDSHAKE_OR_VERSIONS:
            self.state = State.HANDSHAKE

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def expired(self) -> bool:
        return self.expires_at is not None and self.server.clock() >= self.expires_at

    # --------------------------------------------------------------- handshake
    def handshake(self, mechanism: str, version: int) -> bool:
        """SaslHandshake: True when the mechanism is enabled (the exchange starts), else False
        (the caller answers UNSUPPORTED_SASL_MECHANISM and closes)."""
        if self.state is State.COMPLETE:  # KIP-368 re-authentication
            if version < 1 or mechanism != self.mechanism:
                self.state = State.FAILED
                self.server.failed(self, f"re-authentication with mechanism {mechanism} after {self.mechanism}")
                return False
            self.reauthenticating = True
        elif mechanism not in self.listener.mechanisms:
            self.state = State.FAILED
            self.server.failed(self, f"unsupported SASL mechanism {mechanism!r}")
            return False
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self._scram = ScramServer(mechanism) if mechanism in SCRAM_MECHANISMS else None
        self.principal_pending = None
        self.state = State.AUTHENTICATE
        return True

    @property
    def enabled(self) -> list[str]:
        return list(self.listener.mechanisms)

    # --------------------------------------------------------------- tokens
    def authenticate(self, token: bytes) -> bytes:
        """One client token -> the server's token. Raises AuthenticationFailed with the message
        the client gets (then the connection is closed)."""
        if self.state is not State.AUTHENTICATE:
            raise AuthenticationFailed(f"Unexpected SASL token in state {self.state.value}")
        try:
            if len(token) > self.listener.max_receive_size:
                raise AuthenticationFailed("Failing SASL authentication due to invalid receive size")
            principal: str | None
            if self.mechanism == PLAIN:
                response, principal = b"", self._plain(token)
            else:
                response, principal = self._scram_step(token)
        except AuthenticationFailed as e:
            self.state = State.FAILED
            self.server.failed(self, str(e))
            raise
        if principal is not None:
            self._complete(principal)
        return response

    def _plain(self, token: bytes) -> str:
        """The principal, once the PLAIN message's password is the user's."""
        try:
            message = _parse_plain(token)
        except PlainError as e:
            raise AuthenticationFailed(str(e)) from None
        expected = self.listener.plain_users.get(message.username)
        if expected is None or not hmac.compare_digest(expected.encode(), message.password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        return "User:" + message.username

    def _scram_step(self, token: bytes) -> tuple[bytes, str | None]:
        scram = self._scram
        assert scram is not None and self.mechanism is not None
        failed = (
            f"Authentication failed during {'re-authentication' if self.reauthenticating else 'authentication'} "
            f"due to invalid credentials with SASL mechanism {self.mechanism}"
        )
        try:
            if self.principal_pending is None:
                first = scram.parse_first(token)
                if first.extensions.get(TOKEN_AUTH, "").lower() == "true":
                    raise ScramError("delegation tokens are not supported")  # Kafka: no token of that id
                credential = self.server.credentials(self.mechanism, first.username)
                if credential is None:
                    raise ScramError("Invalid user credentials")
                self.principal_pending = "User:" + first.username
                return scram.first(credential), None
            return scram.final(token), self.principal_pending
        except ScramError as e:
            reason = str(e)
            if "authorization id" in reason:
                raise AuthenticationFailed("Authentication failed: " + reason) from None
            raise AuthenticationFailed(failed) from None

    def _complete(self, principal: str) -> None:
        if self.reauthenticating and principal != self.principal:
            raise_msg = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            self.state = State.FAILED
            self.server.failed(self, raise_msg)
            raise AuthenticationFailed(raise_msg)
        self.principal = principal
        self.principal_pending = None
        self.state = State.COMPLETE
        self.reauthenticating = False
        lifetime = self.listener.reauth_ms.get(self.mechanism or "", 0)
        self.expires_at = self.server.clock() + lifetime / 1000 if lifetime > 0 else None

    @property
    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client once complete (0: no lifetime)."""
        if self.state is not State.COMPLETE:
            return 0
        return self.listener.reauth_ms.get(self.mechanism or "", 0)
