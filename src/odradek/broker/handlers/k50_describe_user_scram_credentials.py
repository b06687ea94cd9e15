"""DescribeUserScramCredentials (key 50), v0: which SCRAM mechanisms and iterations each user has.

Never the salt or keys. No users (null or empty): every user with a credential, sorted; named
users in their order, an unknown one RESOURCE_NOT_FOUND, an empty name RESOURCE_NOT_FOUND
("Username must not be empty"), one named twice DUPLICATE_RESOURCE (Kafka's ZkAdminManager;
broker/security/scram_users.py).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security import scram_users


@handles(50, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    users = [u.name for u in req.users] if req.users is not None else None
    results = tuple(
        ctx.nested(
            "DescribeUserScramCredentialsResult",
            user=r.user,
            error_code=r.error,
            error_message=r.message,
            credential_infos=tuple(ctx.nested("CredentialInfo", mechanism=m, iterations=i) for m, i in r.credentials),
        )
        for r in scram_users.describe(ctx.services.snapshot, users)
    )
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, results=results)
