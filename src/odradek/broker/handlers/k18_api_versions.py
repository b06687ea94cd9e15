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

# The advertised list, built once per response version and registry content: every client
# connection asks for it, and building its ~50 entries was most of the handler's cost.
_ADVERTISED: dict[tuple[object, tuple[tuple[int, int, int], ...]], tuple[object, ...]] = {}


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
    return ctx.respond(error_code=error, api_keys=advertised(ctx), throttle_time=0)


def advertised(ctx: RequestContext) -> tuple[object, ...]:
    """The ApiVersion entries of the registry's handlers, in key order, for ctx's version."""
    rows = tuple(sorted((h.api_key, h.advertised_min, h.max_version) for h in REGISTRY.values()))
    cache_key = (ctx.module, rows)
    keys = _ADVERTISED.get(cache_key)
    if keys is None:
        keys = _ADVERTISED[cache_key] = tuple(
            ctx.nested("ApiVersion", api_key=k, min_version=lo, max_version=hi) for k, lo, hi in rows
        )
    return keys
