"""SASL mechanism names and the PLAIN message (RFC 4616), sans-IO; SCRAM is scram.py.

Kafka's PlainSaslServer reads `[authzid] NUL authcid NUL passwd` (UTF-8) and refuses an
empty username or password, a message of other than three parts, and an authorization id
different from the username; the messages below are Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.protocol.scram import MECHANISMS as SCRAM_MECHANISMS

__all__ = ["PLAIN", "SCRAM_MECHANISMS", "SERVED_MECHANISMS", "PlainError", "PlainMessage", "parse_plain", "plain"]

PLAIN = "PLAIN"
SERVED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
# Kafka's other mechanisms, not served by odradek (refused at startup when enabled)
UNSERVED_MECHANISMS = ("GSSAPI", "OAUTHBEARER")


class PlainError(Exception):
    """A malformed or refused PLAIN message; the text is Kafka's error message."""


@dataclass(frozen=True, slots=True)
class PlainMessage:
    authzid: str
    username: str
    password: str

    def __repr__(self) -> str:  # never the password
        return f"PlainMessage(authzid={self.authzid!r}, username={self.username!r})"


def parse_plain(data: bytes) -> PlainMessage:
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\x00", 3)
    if len(tokens) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise PlainError("Authentication failed: Client requested an authorization id that is different from username")
    return PlainMessage(authzid, username, password)


def plain(username: str, password: str, authzid: str = "") -> bytes:
    """The client's PLAIN message."""
    return f"{authzid}\x00{username}\x00{password}".encode()
