"""Kafka 4.4's own `kafka-configs` replaces the certificate of an odradek broker's SSL listener
without a restart (KIP-226): `--entity-type brokers --entity-name 1 --alter --add-config
listener.name.ssl.ssl.keystore.location=...`; new connections get the new certificate while an
open one goes on; the file rewritten in place and the same path set again is reloaded; a
certificate with another distinguished name is refused with Kafka's message; the setting is kept
(the single node's metadata) and in effect again after a restart."""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason
from support.broker import BrokerProcess, free_port
from support.tls import Pki

pytestmark = pytest.mark.skipif(unavailable_reason("4") is not None, reason=str(unavailable_reason("4")))

LOCATION = "listener.name.ssl.ssl.keystore.location"
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)


def kafka_configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    cmd = tool_command(
        "4", "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap,
        "--entity-type", "brokers", "--entity-name", "1", "--alter", *args, jvm=SHORT_JVM,
    )  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _der(keystore: Path) -> bytes:
    text = keystore.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    return ssl.PEM_cert_to_DER_cert(text[start : text.index("-----END CERTIFICATE-----", start) + 25])


class _Tls:
    def __init__(self, port: int, ca: Path) -> None:
        self.port = port
        self.ctx = ssl.create_default_context(cafile=str(ca))

    def open(self) -> ssl.SSLSocket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return self.ctx.wrap_socket(sock, server_hostname="localhost")

    def certificate(self) -> bytes:
        with self.open() as s:
            assert _api_versions(s)
            return s.getpeercert(binary_form=True)

    def wait_for(self, der: bytes, timeout: float = 15) -> bytes:
        """The certificate new connections get, once it is `der` (or when `timeout` passed)."""
        deadline = time.monotonic() + timeout
        while (got := self.certificate()) != der and time.monotonic() < deadline:
            time.sleep(0.2)
        return got


def _api_versions(s: ssl.SSLSocket) -> bool:
    s.sendall(API_VERSIONS_V0)
    head = _recv_exactly(s, 4)
    return len(head) == 4 and len(_recv_exactly(s, struct.unpack(">i", head)[0])) > 0


def _recv_exactly(s: ssl.SSLSocket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def test_kafka_configs_replaces_the_certificate_without_a_restart(tmp_path):
    pki = Pki.create(tmp_path / "pki")
    hosts = ("127.0.0.1", "localhost")
    first, second, third = (pki.identity(n, "/CN=localhost", hosts=hosts).keystore for n in ("a", "b", "c"))
    other = pki.identity("other", "/CN=elsewhere", hosts=hosts).keystore
    live = tmp_path / "live.keystore.pem"
    shutil.copy(second, live)
    plain, tls_port = free_port(), free_port()
    b = BrokerProcess(
        tmp_path / "broker",
        {
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            LOCATION: str(first),
        },
        port=plain,
    )
    b.start(timeout=30)
    try:
        tls = _Tls(tls_port, pki.ca)
        assert tls.certificate() == _der(first)
        with tls.open() as held:  # open across the updates
            assert _api_versions(held)

            r = kafka_configs(b.bootstrap, "--add-config", f"{LOCATION}={live}")
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            assert tls.wait_for(_der(second)) == _der(second)
            assert _api_versions(held) and held.getpeercert(binary_form=True) == _der(first)

            shutil.copy(third, live)  # a renewed certificate written over the file
            r = kafka_configs(b.bootstrap, "--add-config", f"{LOCATION}={live}")
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            assert tls.wait_for(_der(third)) == _der(third)

            r = kafka_configs(b.bootstrap, "--add-config", f"{LOCATION}={other}")
            assert r.returncode != 0
            assert "Keystore DistinguishedName does not match" in r.stdout + r.stderr
            assert tls.certificate() == _der(third)
            assert _api_versions(held)

        b.stop()
        b.start(timeout=30)
        assert tls.wait_for(_der(third)) == _der(third)  # kept, and in effect after the restart
    finally:
        b.kill()
