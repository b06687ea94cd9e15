"""DeleteAcls (key 31), v1-3 (Kafka 4's range).

Needs ALTER on the cluster (else every filter gets CLUSTER_AUTHORIZATION_FAILED). With no
`authorizer.class.name` every filter gets SECURITY_DISABLED with Kafka's message. Otherwise
each filter deletes the bindings it selects and answers them; a filter with UNKNOWN elements
gets INVALID_REQUEST.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.broker.security.acl_wire import binding_filter
from odradek.protocol.errors import ErrorCode

NO_AUTHORIZER = "No Authorizer is configured."


@handles(31, 1, 3)
async def handle(ctx: RequestContext, req) -> object:
    def result(code: int, message: str | None, matching: tuple = ()) -> object:
        return ctx.nested("DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=matching)

    n = len(req.filters)
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER):
        failed = result(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        return ctx.respond(throttle_time=0, filter_results=(failed,) * n)
    acls = ctx.services.acls
    if acls is None:
        return ctx.respond(throttle_time=0, filter_results=(result(ErrorCode.security_disabled, NO_AUTHORIZER),) * n)
    filters = [binding_filter(f) for f in req.filters]
    good = [f for f in filters if f is not None and not f.unknown_element()]
    deleted, error = await acls.delete(good)  # one list of deleted bindings per good filter
    out = []
    answered = iter(deleted)
    for f in filters:
        if f is None or f.unknown_element():
            out.append(result(ErrorCode.invalid_request, "Filter contain UNKNOWN elements"))
            continue
        if error is not None:
            out.append(result(error[0], error[1]))
            continue
        matching = tuple(
            ctx.nested(
                "DeleteAclsMatchingAcl",
                error_code=0,
                error_message=None,
                resource_type=int(b.pattern.resource_type),
                resource_name=b.pattern.name,
                pattern_type=int(b.pattern.pattern_type),
                principal=b.entry.principal,
                host=b.entry.host,
                operation=int(b.entry.operation),
                permission_type=int(b.entry.permission),
            )
            for b in next(answered)
        )
        out.append(result(0, None, matching))
    return ctx.respond(throttle_time=0, filter_results=tuple(out))
