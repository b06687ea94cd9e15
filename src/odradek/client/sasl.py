"""SASL PLAIN and SCRAM-SHA-256/512 on the client's connections (the Java client's settings).

`authenticator(config)` reads `security.protocol`, `sasl.mechanism` and the credentials
(`sasl.username` / `sasl.password`, librdkafka's names, or the Java client's
`sasl.jaas.config` with `username="..." password="..."`) and returns what
`Connection.connect` runs after ApiVersions: SaslHandshake v1, then SaslAuthenticate until
the exchange completes (SCRAM: the server's signature is checked), as the Java client does, and
returns the session lifetime SaslAuthenticate v1+ gave: the connection runs the same exchange
again before it ends (KIP-368, client/conn.py).
A failure raises the broker's error (SaslAuthenticationError, UnsupportedSaslMechanismError)
and the connection is closed. Settings the client does not serve (GSSAPI, OAUTHBEARER, TLS
here) are refused when the client is built. The messages themselves are protocol/sasl.py and
protocol/scram.py, shared with the broker.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import error_class
from odradek.protocol.sasl import PLAIN, SCRAM_MECHANISMS, plain
from odradek.protocol.scram import ScramClient, ScramError

from ._wire import ms

if TYPE_CHECKING:
    from .conn import Connection

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATION_FAILED = 58
# authentication errors are final (the Java client's AuthenticationException): no other server is tried
FATAL_CODES = frozenset({33, SASL_AUTHENTICATION_FAILED})  # UNSUPPORTED_SASL_MECHANISM too
Authenticate = Callable[["Connection"], Awaitable[int]]  # -> the session lifetime in ms (0: none)

_JAAS_OPTION = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;]+))""")


def _credentials(config: dict[str, Any]) -> tuple[str, str]:
    user, password = config.get("sasl.username"), config.get("sasl.password")
    jaas = config.get("sasl.jaas.config")
    if jaas and (user is None or password is None):
        options = {m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _JAAS_OPTION.finditer(jaas)}
        user, password = options.get("username"), options.get("password")
    if not user or password is None:
        raise ValueError("SASL needs sasl.username and sasl.password (or sasl.jaas.config with username and password)")
    return str(user), str(password)


async def exchange(
    request: Callable[..., Awaitable[Any]], conn: Connection, mechanism: str, user: str, password: str
) -> int:
    """One SASL exchange on `conn`, each request sent by `request` (`conn.request`, or a path
    past what holds requests during a re-authentication): SaslHandshake v1, then
    SaslAuthenticate until it completes (SCRAM: the server's signature checked). Returns the
    session lifetime SaslAuthenticate v1+ gave, in ms (0: none); raises the server's error."""
    r = await request(SASL_HANDSHAKE, {"mechanism": mechanism}, version=1)
    if int(r.error_code):
        raise error_class(int(r.error_code))(
            f"{conn.host}:{conn.port}: SASL mechanism {mechanism} refused; enabled: {', '.join(r.mechanisms)}"
        )
    version = min(2, conn.version(SASL_AUTHENTICATE))
    lifetime_ms = 0

    async def step(token: bytes) -> bytes:
        nonlocal lifetime_ms
        resp = await request(SASL_AUTHENTICATE, {"auth_bytes": token}, version=version)
        if int(resp.error_code):
            raise error_class(int(resp.error_code))(f"{conn.host}:{conn.port}: {resp.error_message}")
        lifetime_ms = max(0, ms(getattr(resp, "session_lifetime", 0)))  # v1+ (KIP-368)
        return bytes(resp.auth_bytes)

    if mechanism == PLAIN:
        await step(plain(user, password))
        return lifetime_ms
    scram = ScramClient(mechanism, user, password)
    try:
        scram.verify(await step(scram.final(await step(scram.first()))))
    except ScramError as e:
        raise error_class(SASL_AUTHENTICATION_FAILED)(f"{conn.host}:{conn.port}: {e}") from None
    return lifetime_ms


def authenticator(config: dict[str, Any]) -> Authenticate | None:
    """What a new connection runs to authenticate, or None (PLAINTEXT). ValueError for what is
    not served."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol in ("PLAINTEXT", "SSL"):
        return None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"security.protocol={protocol} is not supported by odradek's client yet")
    mechanism = str(config.get("sasl.mechanism", "GSSAPI")).upper()
    if mechanism != PLAIN and mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"sasl.mechanism={mechanism} is not supported by odradek's client (PLAIN, SCRAM-SHA-256/512)")
    user, password = _credentials(config)

    async def authenticate(conn: Connection) -> int:
        return await exchange(conn.request, conn, mechanism, user, password)

    return authenticate
