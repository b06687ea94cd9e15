"""SCRAM (protocol/scram.py): RFC 7677's test vector, Kafka's credential string, the message
grammar and the server's refusals."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from odradek.protocol.scram import (
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    make_credential,
    parse_client_first,
    sasl_name,
    username_of,
)

SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_vector_both_sides():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    server = ScramServer("SCRAM-SHA-256", nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = client.first()
    assert first == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert server.parse_first(first).username == "user"
    server_first = server.first(make_credential("SCRAM-SHA-256", "pencil", 4096, SALT))
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(server_first)
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    server_final = server.final(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete
    client.verify(server_final)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_the_proof(mechanism):
    credential = make_credential(mechanism, "right", 4096)
    client, server = ScramClient(mechanism, "u", "wrong"), ScramServer(mechanism)
    server.parse_first(client.first())
    with pytest.raises(ScramError, match="Invalid client credentials"):
        server.final(client.final(server.first(credential)))
    assert not server.complete


def test_a_changed_nonce_is_refused():
    client, server = ScramClient("SCRAM-SHA-256", "u", "p"), ScramServer("SCRAM-SHA-256")
    server.parse_first(client.first())
    final = client.final(server.first(make_credential("SCRAM-SHA-256", "p")))
    with pytest.raises(ScramError, match="nonce"):
        server.final(final.replace(b",p=", b"x,p=", 1))


def test_a_final_nonce_ending_with_the_combined_one_is_accepted_as_kafka_does():
    """librdkafka 2.0.2 (Debian's kcat) sends the client nonce again in front of the combined
    one; Kafka's ScramSaslServer checks only that it ends with it. The proof is over what was sent."""
    server = ScramServer("SCRAM-SHA-256", nonce="SERVER")
    server.parse_first(b"n,,n=u,r=CLIENT")
    credential = make_credential("SCRAM-SHA-256", "p", salt=b"salt")
    server_first = server.first(credential).decode()
    without_proof = "c=biws,r=CLIENTCLIENTSERVER"
    auth = f"n=u,r=CLIENT,{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha256", b"p", b"salt", 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    assert server.final(f"{without_proof},p={proof}".encode()).startswith(b"v=")
    assert server.complete


def test_too_few_iterations_refused():
    server = ScramServer("SCRAM-SHA-256")
    server.parse_first(b"n,,n=u,r=abc")
    with pytest.raises(ScramError, match="less than the minimum 4096"):
        server.first(make_credential("SCRAM-SHA-256", "p", 4095))


def test_kafka_credential_string_round_trip():
    c = make_credential("SCRAM-SHA-512", "secret", 8192)
    text = c.to_string()
    assert (
        text.startswith("salt=")
        and ",stored_key=" in text
        and ",server_key=" in text
        and text.endswith(",iterations=8192")
    )
    assert ScramCredential.from_string(text) == c
    for bad in ("", "salt=AA==", "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x", "a=b,c=d,e=f,g=h"):
        with pytest.raises(ScramError):
            ScramCredential.from_string(bad)


def test_client_first_grammar_and_extensions():
    first = parse_client_first(b"n,a=bob,n=bob,r=nonce1,tokenauth=true")
    assert (first.authzid, first.username, first.nonce, first.extensions) == (
        "bob",
        "bob",
        "nonce1",
        {"tokenauth": "true"},
    )
    assert first.bare == "n=bob,r=nonce1,tokenauth=true"
    for bad in (b"", b"y,,n=a,r=b", b"n,,n=a", b"n,,n=a,b,r=c", b"\xff\xfe"):
        with pytest.raises(ScramError):
            parse_client_first(bad)


def test_an_authorization_id_other_than_the_user_is_refused():
    with pytest.raises(ScramError, match="authorization id"):
        ScramServer("SCRAM-SHA-256").parse_first(b"n,a=admin,n=bob,r=abc")


def test_saslname_escapes():
    assert sasl_name("a=b,c") == "a=3Db=2Cc"
    assert username_of("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ScramError):
        username_of("a=4Fb")
