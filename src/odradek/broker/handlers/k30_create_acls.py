"""CreateAcls (key 30), v1-3 (Kafka 4's range).

Needs ALTER on the cluster (else every creation gets CLUSTER_AUTHORIZATION_FAILED). With no
`authorizer.class.name` every creation gets SECURITY_DISABLED with Kafka's message. Otherwise
each binding is checked as Kafka checks it (known resource, pattern, operation and permission
types; the CLUSTER resource named `kafka-cluster`; a non-empty name; a `Type:name` principal:
INVALID_REQUEST otherwise) and the valid ones are stored together (broker/security/acl_store.py);
creating a binding that exists already succeeds.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclBinding, AclOperation, ResourceType, creation_problem
from odradek.broker.security.acl_wire import binding_of_creation
from odradek.protocol.errors import ErrorCode

NO_AUTHORIZER = "No Authorizer is configured."


@handles(30, 1, 3)
async def handle(ctx: RequestContext, req) -> object:
    def results(outcomes: list[tuple[int, str | None]]) -> object:
        out = tuple(ctx.nested("AclCreationResult", error_code=c, error_message=m) for c, m in outcomes)
        return ctx.respond(throttle_time=0, results=out)

    n = len(req.creations)
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER):
        return results([(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")] * n)
    acls = ctx.services.acls
    if acls is None:
        return results([(ErrorCode.security_disabled, NO_AUTHORIZER)] * n)
    outcomes: list[tuple[int, str | None]] = []
    valid: list[AclBinding] = []
    for creation in req.creations:
        binding = binding_of_creation(creation)
        problem = "Invalid ACL creation" if binding is None else creation_problem(binding)
        if binding is None or problem is not None:
            outcomes.append((ErrorCode.invalid_request, problem))
        else:
            outcomes.append((0, None))
            valid.append(binding)
    if valid:
        error = await acls.create(valid)
        if error is not None:
            outcomes = [(error[0], error[1]) if c == 0 else (c, m) for c, m in outcomes]
    return results(outcomes)
