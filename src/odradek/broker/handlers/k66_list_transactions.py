"""ListTransactions (key 66), v0-2.

The transactions of the `__transaction_state` partitions this broker coordinates (admin
clients ask every broker and merge), filtered by state names (names Kafka does not know
come back in `unknown_state_filters` and match nothing), by producer ids, by how long
they have been running (v1+, `duration_filter` ms; -1 none) and by a regular expression
the whole transactional id must match (v2+, `transactional_id_pattern`; null or empty:
none; one that does not compile is INVALID_REGULAR_EXPRESSION). While a partition is
loading the answer carries COORDINATOR_LOAD_IN_PROGRESS with what is loaded.
Only the transactional ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations

import re

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(66, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    pattern = getattr(req, "transactional_id_pattern", None)
    matcher = None
    if pattern:
        try:
            matcher = re.compile(pattern)
        except re.error:
            return ctx.respond(
                throttle_time=0,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )
    err, unknown, listed = ctx.services.txn_coordinator.list_transactions(
        req.state_filters, req.producer_id_filters, getattr(req, "duration_filter", -1)
    )
    states = tuple(
        nested(
            ctx,
            "TransactionState",
            transactional_id=t.transactional_id,
            producer_id=t.producer_id,
            transaction_state=t.state,
        )
        for t in listed
        if (matcher is None or matcher.fullmatch(t.transactional_id))
        and ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
    )
    return ctx.respond(throttle_time=0, error_code=err, unknown_state_filters=tuple(unknown), transaction_states=states)
