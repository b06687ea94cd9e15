"""odradek's dynamic-password encoding against Kafka 3.9's own PasswordEncoder (run from the
kafka-server-common jar by tests/support/java/PasswordEncoderVector.java): what odradek encodes,
Kafka decodes, and the other way round, with the broker's default cipher (AES/CBC/PKCS5Padding,
PBKDF2WithHmacSHA512) and with AES/GCM/NoPadding, a 256-bit key and PBKDF2WithHmacSHA1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.apache_kafka import SHORT_JVM, java, libs, unavailable_reason

from odradek.broker.password_encoder import CBC, GCM, PasswordEncoder

pytestmark = pytest.mark.skipif(unavailable_reason("3.9") is not None, reason=str(unavailable_reason("3.9")))

SOURCE = Path(__file__).parent.parent / "support" / "java" / "PasswordEncoderVector.java"
CASES = [
    PasswordEncoder("broker-S3cret"),
    PasswordEncoder("other-sécret", key_factory="PBKDF2WithHmacSHA1", cipher=GCM, key_length=256, iterations=1024),
]


def _kafka(encoder: PasswordEncoder, op: str, value: str) -> str:
    factory = "" if encoder.key_factory == "PBKDF2WithHmacSHA512" and encoder.cipher == CBC else encoder.key_factory
    cmd = [
        java(), *SHORT_JVM, "-cp", f"{libs('3.9')}/*", str(SOURCE), op, encoder.secret, factory, encoder.cipher,
        str(encoder.key_length), str(encoder.iterations), value,
    ]  # fmt: skip
    env = {**os.environ, "LC_ALL": "C.UTF-8"}  # the arguments and the output in UTF-8 whatever the locale
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, encoding="utf-8", env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.parametrize("encoder", CASES, ids=["cbc-default", "gcm-sha1-256"])
def test_kafka_decodes_odradeks_encoding_and_odradek_kafkas(encoder):
    password = "keystore-pässword-😀"
    assert _kafka(encoder, "decode", encoder.encode(password)) == password
    assert encoder.decode(_kafka(encoder, "encode", password)) == password
