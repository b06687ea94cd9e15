"""One connection's SASL state machine (SaslSession): Kafka's order of requests, PLAIN and SCRAM,
failures, re-authentication and session lifetime."""

from __future__ import annotations

import pytest

from odradek.broker.security.sasl import AuthenticationFailed, ListenerSasl, SaslServer, State
from odradek.protocol.sasl import plain
from odradek.protocol.scram import ScramClient, make_credential

CREDS = {("SCRAM-SHA-256", "bob"): make_credential("SCRAM-SHA-256", "bob-pw")}


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def server(reauth_ms: int = 0, clock: Clock | None = None) -> SaslServer:
    listener = ListenerSasl(
        "SASL_PLAINTEXT",
        ("PLAIN", "SCRAM-SHA-256"),
        {"alice": "alice-pw"},
        {"PLAIN": reauth_ms, "SCRAM-SHA-256": reauth_ms},
        1000,
    )
    return SaslServer({"SASL_PLAINTEXT": listener}, lambda m, u: CREDS.get((m, u)), clock=clock or Clock())


def test_order_of_requests():
    s = server().session("SASL_PLAINTEXT", "10.0.0.1:5000")
    assert s.allows(18) and s.allows(17) and not s.allows(36) and not s.allows(3)
    s.versions_answered()
    assert not s.allows(18) and s.allows(17)
    assert s.handshake("PLAIN", 1)
    assert s.allows(36) and not s.allows(17) and not s.allows(18)
    assert s.authenticate(plain("alice", "alice-pw")) == b""
    assert s.state is State.COMPLETE and s.principal == "User:alice" and s.allows(3)


def test_plain_wrong_password_and_unknown_user():
    for user, pw in (("alice", "nope"), ("mallory", "x")):
        s = server().session("SASL_PLAINTEXT", "p:1")
        s.handshake("PLAIN", 1)
        with pytest.raises(AuthenticationFailed, match="^Authentication failed: Invalid username or password$"):
            s.authenticate(plain(user, pw))
        assert s.state is State.FAILED


def test_unknown_mechanism():
    s = server().session("SASL_PLAINTEXT", "p:1")
    assert not s.handshake("GSSAPI", 1)
    assert s.enabled == ["PLAIN", "SCRAM-SHA-256"]


def test_scram_exchange_and_failures():
    s = server().session("SASL_PLAINTEXT", "p:1")
    s.handshake("SCRAM-SHA-256", 1)
    c = ScramClient("SCRAM-SHA-256", "bob", "bob-pw")
    c.verify(s.authenticate(c.final(s.authenticate(c.first()))))
    assert s.principal == "User:bob"
    failed = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    for client in (ScramClient("SCRAM-SHA-256", "nobody", "x"), ScramClient("SCRAM-SHA-256", "bob", "wrong")):
        s = server().session("SASL_PLAINTEXT", "p:1")
        s.handshake("SCRAM-SHA-256", 1)
        with pytest.raises(AuthenticationFailed) as e:
            s.authenticate(client.final(s.authenticate(client.first())))
        assert str(e.value) == failed
    s = server().session("SASL_PLAINTEXT", "p:1")
    s.handshake("SCRAM-SHA-256", 1)
    with pytest.raises(AuthenticationFailed):
        s.authenticate(ScramClient("SCRAM-SHA-256", "bob", "bob-pw", extensions={"tokenauth": "true"}).first())


def test_oversized_token():
    s = server().session("SASL_PLAINTEXT", "p:1")
    s.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed, match="invalid receive size"):
        s.authenticate(b"x" * 1001)


def test_session_lifetime_and_reauthentication():
    clock = Clock()
    s = server(reauth_ms=5000, clock=clock).session("SASL_PLAINTEXT", "p:1")
    s.handshake("PLAIN", 1)
    s.authenticate(plain("alice", "alice-pw"))
    assert s.session_lifetime_ms == 5000 and not s.expired()
    clock.now += 5.0
    assert s.expired()
    assert s.handshake("PLAIN", 1)  # re-authentication, same mechanism
    s.authenticate(plain("alice", "alice-pw"))
    assert s.state is State.COMPLETE and not s.expired()
    assert not s.handshake("SCRAM-SHA-256", 1)  # another mechanism: refused


def test_reauthentication_cannot_change_the_principal():
    srv = server()
    srv.listeners["SASL_PLAINTEXT"].plain_users["bob"] = "bob-pw"  # type: ignore[index]
    s = srv.session("SASL_PLAINTEXT", "p:1")
    s.handshake("PLAIN", 1)
    s.authenticate(plain("alice", "alice-pw"))
    s.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed, match="Cannot change principals"):
        s.authenticate(plain("bob", "bob-pw"))
