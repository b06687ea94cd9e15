"""Inline PEM (KIP-651) as a properties file gives it: newlines lost to continuation lines, or
one line, read as Kafka's PEM parser reads it (the whitespace between the markers ignored)."""

from __future__ import annotations

import ssl
from pathlib import Path

from odradek.client.tls import pem_text, ssl_context

CERTS = Path(__file__).resolve().parents[2] / "support" / "tls_certs"


def test_blocks_rewrapped_whatever_the_whitespace():
    body = "QUJD" * 40
    joined = f"-----BEGIN CERTIFICATE-----{body}-----END CERTIFICATE-----"
    spaced = f"  -----BEGIN CERTIFICATE----- {body[:50]} {body[50:]}\n-----END CERTIFICATE-----  "
    expected = "-----BEGIN CERTIFICATE-----\n" + "\n".join([body[:64], body[64:128], body[128:]]) + "\n"
    expected += "-----END CERTIFICATE-----\n"
    assert pem_text(joined) == pem_text(spaced) == expected
    assert pem_text(joined + "\n" + joined) == expected * 2


def test_no_block_left_as_it_is():
    assert pem_text("not pem") == "not pem\n"


def test_inline_keystore_without_newlines_loads():
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": "".join((CERTS / "broker.key").read_text().splitlines()),
        "ssl.keystore.certificate.chain": "".join((CERTS / "broker.crt").read_text().splitlines()),
    }
    assert isinstance(ssl_context(settings, server=True), ssl.SSLContext)
