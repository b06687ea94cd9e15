"""PLAIN messages (protocol/sasl.py), with Kafka's PlainSaslServer messages."""

from __future__ import annotations

import pytest

from odradek.protocol.sasl import PlainError, parse_plain, plain


def test_round_trip_and_repr_hides_the_password():
    m = parse_plain(plain("alice", "s3cret"))
    assert (m.authzid, m.username, m.password) == ("", "alice", "s3cret")
    assert "s3cret" not in repr(m)
    assert parse_plain(plain("alice", "p", authzid="alice")).authzid == "alice"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"alice\x00pw", "expected 3 tokens, got 2"),
        (b"\x00a\x00b\x00c", "expected 3 tokens, got 4"),
        (b"\x00\x00pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"bob\x00alice\x00pw", "authorization id that is different from username"),
        (b"\xff\x00a\x00b", "not UTF-8"),
    ],
)
def test_refusals(data, message):
    with pytest.raises(PlainError, match=message):
        parse_plain(data)
