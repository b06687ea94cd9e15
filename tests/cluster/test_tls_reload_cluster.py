"""A dynamic keystore update (KIP-226) on one broker of a cluster takes effect there only: two
brokers whose CLIENTS listener is SSL with the same certificate; IncrementalAlterConfigs of
`listener.name.clients.ssl.keystore.location` for broker 2 (sent to broker 2, as Kafka requires)
is kept in ZooKeeper's /config/brokers/2 as Kafka 3.9 keeps it, and broker 2's new connections get
the new certificate while broker 1's keep the old one."""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path

import pytest
from support.broker import free_port
from support.odradek_cluster import OdradekCluster
from support.raw import RawConnection, nested
from support.tls import Pki

pytestmark = pytest.mark.cluster

LOCATION = "listener.name.clients.ssl.keystore.location"
HOSTS = ("127.0.0.1", "localhost")


class _Cluster(OdradekCluster):
    """Each broker: PLAINTEXT (inter-broker, the harness's checks) and CLIENTS (SSL)."""

    def __init__(self, directory, pki: Pki, keystore: Path, **kw) -> None:  # noqa: ANN003
        super().__init__(directory, **kw)
        self.pki = pki
        self.keystore = keystore
        self.tls_ports = {i: free_port() for i in range(1, self.count + 1)}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{client},CLIENTS://127.0.0.1:{self.tls_ports[i]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.clients.ssl.keystore.type": "PEM",
            LOCATION: str(self.keystore),
        }


def _der(keystore: Path) -> bytes:
    text = keystore.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    return ssl.PEM_cert_to_DER_cert(text[start : text.index("-----END CERTIFICATE-----", start) + 25])


def _certificate(port: int, ca: Path) -> bytes:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.getpeercert(binary_form=True)


def test_a_keystore_update_on_one_broker_takes_effect_there_only(tmp_path):
    pki = Pki.create(tmp_path / "pki")
    old = pki.identity("old", "/CN=localhost", hosts=HOSTS).keystore
    new = pki.identity("new", "/CN=localhost", hosts=HOSTS).keystore
    c = _Cluster(tmp_path / "cluster", pki, old, brokers=2)
    try:
        c.start()
        assert {_certificate(c.tls_ports[i], pki.ca) for i in (1, 2)} == {_der(old)}

        op = nested(44, 1, "AlterableConfig", name=LOCATION, config_operation=0, value=str(new))
        res = nested(44, 1, "AlterConfigsResource", resource_type=4, resource_name="2", configs=(op,))
        with RawConnection(c.brokers[1].bootstrap) as conn:  # broker 1 refuses another broker's update
            r = conn.call(44, 1, resources=(res,), validate_only=False).responses[0]
            assert (r.error_code, r.error_message) == (42, "Unexpected broker id, expected 1, but received 2")
        with RawConnection(c.brokers[2].bootstrap) as conn:
            r = conn.call(44, 1, resources=(res,), validate_only=False).responses[0]
            assert (r.error_code, r.error_message) == (0, None)

        deadline = time.monotonic() + 15
        while _certificate(c.tls_ports[2], pki.ca) != _der(new) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _certificate(c.tls_ports[2], pki.ca) == _der(new)
        time.sleep(1)  # the change has had time to reach broker 1 too, were it to apply there
        assert _certificate(c.tls_ports[1], pki.ca) == _der(old)

        c.snapshot()  # the harness's ZooKeeper connection
        data, _stat = c._zk.get("/config/brokers/2")
        assert json.loads(data) == {"version": 1, "config": {LOCATION: str(new)}}
        assert not c._zk.exists("/config/brokers/1")
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()
