"""DescribeAcls (key 29), v1-3 (Kafka 4's range).

Needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the request). With no
`authorizer.class.name`, SECURITY_DISABLED with Kafka's message, as Kafka without an authorizer
(clients such as MirrorMaker 2 take that quietly). Otherwise the ACLs the filter selects,
grouped by resource pattern. A filter with UNKNOWN elements is INVALID_REQUEST.
"""

from __future__ import annotations

from itertools import groupby

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclBindingFilter, AclOperation, ResourceType
from odradek.broker.security.acl_wire import binding_filter
from odradek.protocol.errors import ErrorCode

NO_AUTHORIZER = "No Authorizer is configured on the broker"


@handles(29, 1, 3)
async def handle(ctx: RequestContext, req) -> object:
    def fail(code: int, message: str) -> object:
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, resources=())

    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return fail(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    acls = ctx.services.acls
    if acls is None:
        return fail(ErrorCode.security_disabled, NO_AUTHORIZER)
    f: AclBindingFilter | None = binding_filter(req)
    if f is None or f.unknown_element():
        return fail(ErrorCode.invalid_request, "Filter contain UNKNOWN elements")
    resources = []
    for pattern, bindings in groupby(acls.authorizer.acls(f), key=lambda b: b.pattern):
        entries = tuple(
            ctx.nested(
                "AclDescription",
                principal=b.entry.principal,
                host=b.entry.host,
                operation=int(b.entry.operation),
                permission_type=int(b.entry.permission),
            )
            for b in bindings
        )
        resources.append(
            ctx.nested(
                "DescribeAclsResource",
                resource_type=int(pattern.resource_type),
                resource_name=pattern.name,
                pattern_type=int(pattern.pattern_type),
                acls=entries,
            )
        )
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, resources=tuple(resources))
