"""AlterUserScramCredentials (key 51), v0: add, replace or delete users' SCRAM credentials.

The client sends the salted password (never the password); the broker derives StoredKey and
ServerKey and keeps Kafka's credential string in the metadata store (ZooKeeper's
/config/users/<user> with a change notification; the single node's metadata file), which
every broker's SASL listeners read. Kafka's checks and codes per user (ZkAdminManager):
empty name or iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, unknown mechanism
UNSUPPORTED_SASL_MECHANISM, one user and mechanism twice DUPLICATE_RESOURCE, deleting a
credential that does not exist RESOURCE_NOT_FOUND (broker/security/scram_users.py).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security import scram_users
from odradek.cluster.store import MetadataUnavailable
from odradek.protocol.errors import ErrorCode


@handles(51, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    upsertions = [
        scram_users.Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        for u in req.upsertions
    ]
    deletions = [scram_users.Deletion(d.name, d.mechanism) for d in req.deletions]
    try:
        results = await scram_users.alter(ctx.services.metadata, upsertions, deletions)
    except MetadataUnavailable as e:
        users = dict.fromkeys([u.name for u in upsertions] + [d.name for d in deletions])
        results = [scram_users.UserResult(u, ErrorCode.unknown_server_error, str(e)) for u in users]
    return ctx.respond(
        throttle_time=0,
        results=tuple(
            ctx.nested("AlterUserScramCredentialsResult", user=r.user, error_code=r.error, error_message=r.message)
            for r in results
        ),
    )
