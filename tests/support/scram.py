"""A SCRAM user created through AlterUserScramCredentials on an in-process broker."""

from __future__ import annotations

from support.inprocess import InProcessBroker
from support.raw import nested

from odradek.protocol.scram import salted_password


async def scram_user(b: InProcessBroker, user: str, password: str, mechanism: str) -> None:
    salt = b"salt-" + user.encode()
    up = nested(
        51,
        0,
        "ScramCredentialUpsertion",
        name=user,
        mechanism={"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}[mechanism],
        iterations=4096,
        salt=salt,
        salted_password=salted_password(mechanism, password, salt, 4096),
    )
    r = await b.call(51, 0, deletions=(), upsertions=(up,))
    assert r.results[0].error_code == 0
