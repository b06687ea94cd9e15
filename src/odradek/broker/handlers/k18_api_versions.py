"""ApiVersions (key 18), v0-4.

The advertised list is built from the handler registry, so it can't drift from what
is served. A request version above ours never reaches this handler: the protocol layer
answers it with UNSUPPORTED_VERSION in the v0 layout and our ApiVersions range (KIP-511,
protocol/connection.py), so the client can retry at a version we know. v3+ requests
carry the client software name and version, kept on the connection's state; names that
fail Kafka's pattern get INVALID_REQUEST. Responses always use response header v0.
"""

from __future__ import annotations

import re

from odradek.broker.registry import REGISTRY, RequestContext, handles
from odradek.protocol.errors import ErrorCode

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
KEY = 18
MAX_VERSION = 4


@handles(KEY, 0, MAX_VERSION)
async def handle(ctx: RequestContext, req) -> object:
    error = ErrorCode.none
    name = getattr(req, "client_software_name", None)
    if name is not None:
        version = req.client_software_version
        if not _SOFTWARE.fullmatch(name) or not _SOFTWARE.fullmatch(version):
            error = ErrorCode.invalid_request
        else:
            ctx.connection.client_software_name = name
            ctx.connection.client_software_version = version
    keys = tuple(
        ctx.nested("ApiVersion", api_key=h.api_key, min_version=h.advertised_min, max_version=h.max_version)
        for h in sorted(REGISTRY.values(), key=lambda h: h.api_key)
    )
    return ctx.respond(error_code=error, api_keys=keys, throttle_time=0)
