"""Dynamic passwords encoded as Kafka 3.9's PasswordEncoder encodes them (KIP-226): values that
Kafka's encoder produced (tests/support/java/PasswordEncoderVector.java, run once against
.deps/kafka-3.9's kafka-server-common jar) decode here, and odradek's encoder, given the same salt
and initialization vector, produces exactly Kafka's fields; the old secret decodes what it
encoded; a wrong secret or a damaged value fails without naming the secret or the password."""

from __future__ import annotations

import pytest

from odradek.broker.password_encoder import (
    GCM,
    PasswordDecodeError,
    PasswordEncoder,
    check_settings,
    java_length,
)

# Kafka 3.9.2: PasswordEncoder.encrypting(new Password("s3cret"), "PBKDF2WithHmacSHA512",
# "AES/CBC/PKCS5Padding", 128, 4096).encode(new Password("keystore-pass")) (the broker's defaults)
KAFKA_CBC = (
    "initializationVector:3jJYlkDPGHyIVtSOiG4sLA==,"
    "keyLength:128,"
    "salt:JWsKePzow7BSVF+zlIwoEJbVTC+2TNxsHEqArPXdujH3/r4HtAyR0ahRuWKzur7xxnI7kKk4AHtgXYuiRMzdxUHOD1O388u+aIcY4wDeUO"
    "A03UhS3OmrQm0RvEcjAyk1mGnYLmPYq6ueEm+agCQkSpaBDEbER9szmCDQPr08rFhj/qUCCWdZzFheFy+eqcjtt9TF4j1hPBAsEPgTGmqEfy"
    "ctjBzbgRo8h84terxFNvilTkFj6KvSUJqiccqzdhjHUPObpzBCyI5uAuh4l04XozfH3AhS3HYJdoDCfC0uzegEBkAPfqYTjyPYfJCG5AXXooIu"
    "GdX/r+ycGFrQxqpDaQ==,"
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA512,"
    "cipherAlgorithm:AES/CBC/PKCS5Padding,"
    "iterations:4096,"
    "passwordLength:13,"
    "encryptedPassword:9XwJVPIGC11R3ibhkthalw=="
)
# Kafka 3.9.2: secret "other-sécret", PBKDF2WithHmacSHA1, AES/GCM/NoPadding, 256, 1024; the
# password "p€ss-😀" (7 Java chars: the emoji is two)
KAFKA_GCM = (
    "initializationVector:oF+X0AlSuBok9lN7,"
    "keyLength:256,"
    "salt:2v/opn9Q1Fz/hfAPVga7BtcQNqKJ6yHALfv9Gr+v0ax5V1hrGl4ZkfsapoAJpoPkO0WD40YEbxnim3xNaxjlKcixmOLwep/SirRjMCgnDi"
    "dCCG9Paxt+9DuzbqnqxkYhA71mORw2TgWd7ibSV/Q9sF8QsOMZdfF3cJFqFj4af7Deuf93Wy2gZbIbuzaI07IQm1eRtipHxkNk0cQJZ2vTeq5"
    "4pI9/9t/nXxTVcGe2kJ7NaeAg8U4dhTJat4fg1UyFaaBZymn/npD86gv22GMWGkw5XMbGVYlaXmWP9mHlA1mn+G2r3xE/t9TlRVSihJtE1kh"
    "42t4MQKMls6BKUx/b5g==,"
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA1,"
    "cipherAlgorithm:AES/GCM/NoPadding,"
    "authenticationTagLength:128,"
    "iterations:1024,"
    "passwordLength:7,"
    "encryptedPassword:CPx+rLVAE2xXADS02g2Dpead6sfdGemYkgx9"
)
GCM_ENCODER = PasswordEncoder(
    "other-sécret", key_factory="PBKDF2WithHmacSHA1", cipher=GCM, key_length=256, iterations=1024
)


def _fields(encoded: str) -> dict[str, str]:
    return dict(item.partition(":")[::2] for item in encoded.split(","))


def test_kafka_encoded_values_decode():
    assert PasswordEncoder("s3cret").decode(KAFKA_CBC) == "keystore-pass"
    assert GCM_ENCODER.decode(KAFKA_GCM) == "p€ss-😀"


@pytest.mark.parametrize(
    ("encoder", "password", "vector"),
    [(PasswordEncoder("s3cret"), "keystore-pass", KAFKA_CBC), (GCM_ENCODER, "p€ss-😀", KAFKA_GCM)],
)
def test_encoding_is_kafkas_given_the_same_salt_and_iv(encoder, password, vector):
    import base64

    kafka = _fields(vector)
    salt, iv = base64.b64decode(kafka["salt"]), base64.b64decode(kafka["initializationVector"])
    assert _fields(encoder.encode(password, salt=salt, iv=iv)) == kafka


def test_a_random_encoding_round_trips_and_differs_each_time():
    e = PasswordEncoder("s3cret")
    one, two = e.encode("keystore-pass"), e.encode("keystore-pass")
    assert one != two and e.decode(one) == e.decode(two) == "keystore-pass"
    assert len(_fields(one)["salt"]) == 344  # 256 bytes, as Kafka's


def test_the_old_secret_decodes_what_it_encoded():
    assert PasswordEncoder("new-secret", old_secret="s3cret").decode(KAFKA_CBC) == "keystore-pass"
    with pytest.raises(PasswordDecodeError):
        PasswordEncoder("new-secret").decode(KAFKA_CBC)


@pytest.mark.parametrize(
    "encoded",
    [
        KAFKA_CBC.replace("passwordLength:13", "passwordLength:12"),
        KAFKA_CBC.replace("encryptedPassword:9X", "encryptedPassword:8X"),
        KAFKA_GCM.replace("encryptedPassword:CP", "encryptedPassword:DP"),  # the tag no longer matches
        KAFKA_CBC.replace("iterations:4096,", ""),
        "keystore-pass",  # a value kept in clear
        KAFKA_CBC.replace("PBKDF2WithHmacSHA512", "PBKDF2WithHmacMD5"),
    ],
)
def test_damaged_values_and_wrong_secrets_fail_without_naming_secrets(encoded):
    for encoder in (PasswordEncoder("s3cret"), GCM_ENCODER, PasswordEncoder("wrong")):
        with pytest.raises(PasswordDecodeError) as e:
            encoder.decode(encoded)
        for secret in ("s3cret", "other-sécret", "keystore-pass", "p€ss"):
            assert secret not in str(e.value) and secret not in repr(e.value)
    assert "s3cret" not in repr(PasswordEncoder("s3cret", old_secret="s3cret"))


def test_java_length_counts_utf16_units():
    assert java_length("p€ss-😀") == 7 and len("p€ss-😀") == 6


def test_settings_check_names_what_is_unsupported():
    good = {
        "password.encoder.keyfactory.algorithm": "",
        "password.encoder.cipher.algorithm": "AES/CBC/PKCS5Padding",
        "password.encoder.key.length": 128,
    }
    assert check_settings(good) is None
    assert "AES/CTR/NoPadding is not supported" in str(
        check_settings({**good, "password.encoder.cipher.algorithm": "AES/CTR/NoPadding"})
    )
    assert "PBKDF2WithHmacMD5 is not supported" in str(
        check_settings({**good, "password.encoder.keyfactory.algorithm": "PBKDF2WithHmacMD5"})
    )
    assert "not an AES key length" in str(check_settings({**good, "password.encoder.key.length": 64}))
