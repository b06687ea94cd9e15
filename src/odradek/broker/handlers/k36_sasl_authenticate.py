"""SaslAuthenticate (key 36), v0-2: one SASL token of the exchange the handshake started.

The token goes to the connection's SaslSession (broker/security/sasl.py); its answer comes
back in auth_bytes. When the exchange completes the connection is authenticated as the
session's principal (`User:<name>`), and v1+ carries session_lifetime_ms
(connections.max.reauth.ms; 0: none, KIP-368). A failure answers SASL_AUTHENTICATION_FAILED
(58) with Kafka's message and closes the connection after the answer. A SaslAuthenticate
after authentication without a new handshake, or on a listener without SASL, gets
ILLEGAL_SASL_STATE (34), as from Kafka's KafkaApis (the gate in broker/connection.py closes a
connection that sends one before its handshake).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.sasl import AuthenticationFailed, State
from odradek.protocol.errors import ErrorCode

KEY = 36


@handles(KEY, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    conn = ctx.connection
    session = conn.sasl
    if session is None or session.state is not State.AUTHENTICATE:
        return ctx.respond(
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
            session_lifetime=0,
        )
    try:
        token = session.authenticate(bytes(req.auth_bytes))
    except AuthenticationFailed as e:
        conn.close_after_response = "SASL authentication failed"
        return ctx.respond(
            error_code=ErrorCode.sasl_authentication_failed,
            error_message=str(e),
            auth_bytes=b"",
            session_lifetime=0,
        )
    if session.complete:
        conn.principal, conn.authenticated = session.principal, True
    return ctx.respond(
        error_code=ErrorCode.none,
        error_message="",  # as Kafka's (an empty string, not null)
        auth_bytes=token,
        session_lifetime=session.session_lifetime_ms,
    )
