"""SaslHandshake (key 17), v0-1: the client names its SASL mechanism (Kafka 4 still serves v0).

Only on a SASL listener, before authentication (or to begin a KIP-368 re-authentication, v1
with the same mechanism): an enabled mechanism is answered with error NONE and the enabled
list, and the exchange starts (v1: in SaslAuthenticate requests; v0: as bare size-prefixed
tokens, Kafka's legacy framing); any other gets UNSUPPORTED_SASL_MECHANISM (33) with the
enabled list, and the connection is closed after the answer, as Kafka's is. On a listener
without SASL the answer is ILLEGAL_SASL_STATE (34), as Kafka's KafkaApis gives.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.errors import ErrorCode

KEY = 17


@handles(KEY, 0, 1)
async def handle(ctx: RequestContext, req) -> object:
    session = ctx.connection.sasl
    if session is None:
        return ctx.respond(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if not session.handshake(req.mechanism, ctx.api_version):
        ctx.connection.close_after_response = f"unsupported SASL mechanism {req.mechanism!r}"
        return ctx.respond(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(session.enabled))
    return ctx.respond(error_code=ErrorCode.none, mechanisms=tuple(session.enabled))
