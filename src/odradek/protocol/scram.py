"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them, sans-IO.

Both sides of the exchange, shared by the broker (broker/security/sasl.py) and the client
(client/sasl.py): the credential a server keeps (salt, StoredKey, ServerKey, iterations, in
Kafka's string form `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`), the four
messages, and the two state machines. No channel binding (Kafka sends `n,,`); extensions in
the client-first message are kept (Kafka's `tokenauth=true` marks delegation-token
authentication, which the broker refuses while there are no delegation tokens).

Kafka's rules kept here: a username is escaped in the message as saslname (`=2C` for `,`,
`=3D` for `=`); at least 4096 iterations (ScramMechanism.minIterations); the server's nonce
is appended to the client's; the final client message's nonce must end with that combined
nonce (Kafka's ScramSaslServer checks no more: librdkafka 2.0's, Debian kcat's, repeats the
client nonce in front of it).
Randomness is the caller's (`nonce`, `salt` arguments) where a test needs it fixed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = [
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramServer",
    "make_credential",
]

# mechanism -> hashlib's name of its hash
MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials refuses more (ControllerApis / ZkAdminManager)
TOKEN_AUTH = "tokenauth"


class ScramError(Exception):
    """The exchange cannot go on: malformed message, wrong nonce, wrong proof, unknown user."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ScramError(f"invalid base64 in {what}") from None


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, _hash(mechanism)).digest()


def _h(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_hash(mechanism), data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        """Kafka's form (ScramCredentialUtils.credentialToString), as kept in ZooKeeper."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_string(cls, text: str) -> ScramCredential:
        props: dict[str, str] = {}
        for token in text.split(","):
            key, eq, value = token.partition("=")
            if not key or not eq:
                raise ScramError("credentials not valid")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ScramError("credentials not valid")
        try:
            iterations = int(props["iterations"])
        except ValueError:
            raise ScramError("credentials not valid") from None
        return cls(
            _unb64(props["salt"], "salt"),
            _unb64(props["stored_key"], "stored_key"),
            _unb64(props["server_key"], "server_key"),
            iterations,
        )


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The credential of a salted password (AlterUserScramCredentials sends the salted password)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, _h(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for `password` (a random salt unless given)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(saslname: str) -> str:
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ScramError("invalid username")
    return name.replace("=3D", "=")


def new_nonce() -> str:
    """Kafka's form: printable characters without ','. (URL-safe base64 of 24 random bytes.)"""
    return base64.urlsafe_b64encode(secrets.token_bytes(24)).decode("ascii").rstrip("=")


# RFC 5802 grammar as Kafka's ScramMessages reads it
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # \x01-\x7f without ','
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>(?:,[A-Za-z]+={_VALUE})*)"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+)(?:,[A-Za-z]+={_VALUE})*"
)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE})(?:,[A-Za-z]+={_VALUE})*,p=(?P<proof>{_B64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE})|v=(?P<signature>{_B64}))(?:,[A-Za-z]+={_VALUE})*")


def _text(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"invalid SCRAM {what} message: not UTF-8") from None


@dataclass(frozen=True, slots=True)
class ClientFirst:
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, for the AuthMessage


def parse_client_first(data: bytes) -> ClientFirst:
    text = _text(data, "client first")
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        raise ScramError("invalid SCRAM client first message format")
    extensions: dict[str, str] = {}
    for item in m.group("extensions")[1:].split(",") if m.group("extensions") else ():
        key, _, value = item.partition("=")
        extensions[key] = value
    authzid = username_of(m.group("authzid")) if m.group("authzid") else ""
    bare = text[text.index(",", 2) + 1 :]  # after the gs2 header "n,[a=authzid],"
    return ClientFirst(authzid, username_of(m.group("saslname")), m.group("nonce"), extensions, bare)


class ScramServer:
    """The server's side of one exchange: `first(message)` -> server-first (after the caller
    looked the credential up, `credential`), `final(message)` -> server-final. Raises
    ScramError on anything wrong; the caller answers SASL_AUTHENTICATION_FAILED and closes."""

    def __init__(self, mechanism: str, *, nonce: str | None = None) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._server_nonce = nonce if nonce is not None else new_nonce()
        self._client_first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.complete = False

    def parse_first(self, data: bytes) -> ClientFirst:
        """Step 1a: read the client-first message (who, which extensions)."""
        self._client_first = first = parse_client_first(data)
        if first.authzid and first.authzid != first.username:
            raise ScramError("Client requested an authorization id that is different from username")
        return first

    def first(self, credential: ScramCredential) -> bytes:
        """Step 1b: the server-first message for the user's credential."""
        first = self._client_first
        if first is None:
            raise ScramError("client first message not read")
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}"
            )
        self._credential = credential
        self._server_first = f"r={first.nonce}{self._server_nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def final(self, data: bytes) -> bytes:
        """Step 2: check the client's proof; the server-final message (its signature)."""
        first, credential = self._client_first, self._credential
        if first is None or credential is None:
            raise ScramError("unexpected SCRAM client final message")
        text = _text(data, "client final")
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise ScramError("invalid SCRAM client final message format")
        # Kafka's check is "ends with" the combined nonce (librdkafka before 2.x.y repeats the
        # client's nonce in front of it; Kafka accepts that)
        if not m.group("nonce").endswith(first.nonce + self._server_nonce):
            raise ScramError("Invalid client nonce in the final client message.")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        proof = _unb64(m.group("proof"), "proof")
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        computed = _h(self.mechanism, _xor(client_signature, proof))
        if not hmac.compare_digest(computed, credential.stored_key):
            raise ScramError("Invalid client credentials")
        self.complete = True
        self._credential = None
        return f"v={_b64(_hmac(self.mechanism, credential.server_key, auth_message))}".encode("ascii")


class ScramClient:
    """The client's side: `first()` -> client-first, `final(server_first)` -> client-final,
    `verify(server_final)` checks the server's signature."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        extensions: dict[str, str] | None = None,
    ) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce if nonce is not None else new_nonce()
        self._extensions = dict(extensions or {})
        self._bare = ""
        self._server_signature = b""

    def first(self) -> bytes:
        ext = "".join(f",{k}={v}" for k, v in self._extensions.items())
        self._bare = f"n={sasl_name(self._username)},r={self._nonce}{ext}"
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first, "server first")
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise ScramError("invalid SCRAM server first message format")
        nonce = m.group("nonce")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("invalid server nonce: it does not start with the client nonce")
        iterations = int(m.group("iterations"))
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"requested iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
        salt = _unb64(m.group("salt"), "salt")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        client_signature = _hmac(self.mechanism, _h(self.mechanism, client_key), auth_message)
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={_b64(_xor(client_key, client_signature))}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        m = _SERVER_FINAL.fullmatch(_text(server_final, "server final"))
        if m is None:
            raise ScramError("invalid SCRAM server final message format")
        if m.group("error"):
            raise ScramError(f"SCRAM authentication failed: {m.group('error')}")
        if not hmac.compare_digest(_unb64(m.group("signature"), "server signature"), self._server_signature):
            raise ScramError("invalid server signature in the SCRAM server final message")
