"""SCRAM users in a cluster: a credential created through one broker is stored in ZooKeeper in
Kafka 3.9's layout (/config/users/<user> and a /config/changes notification) and used by every
broker's SASL listener within seconds; a deletion likewise."""

from __future__ import annotations

import json
import re
import time

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from support.broker import free_port
from support.odradek_cluster import OdradekCluster
from support.raw import RawConnection

from odradek.cluster.zk_client import connect
from odradek.protocol.scram import ScramClient

SASL = {
    "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
    "inter.broker.listener.name": "PLAINTEXT",
}


class SaslCluster(OdradekCluster):
    """Each broker with its PLAINTEXT listener (brokers, admin) and a SASL_PLAINTEXT one."""

    def __init__(self, *args, **kw) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kw)
        self.sasl_ports = {i: free_port() for i in range(1, self.count + 1)}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        return {"listeners": f"PLAINTEXT://127.0.0.1:{client},SASL_PLAINTEXT://127.0.0.1:{self.sasl_ports[i]}"}


def login(port: int, user: str, password: str) -> int:
    with RawConnection(f"127.0.0.1:{port}") as c:
        assert c.call(17, 1, mechanism="SCRAM-SHA-256").error_code == 0
        scram = ScramClient("SCRAM-SHA-256", user, password)
        r = c.call(36, 2, auth_bytes=scram.first())
        if r.error_code == 0:
            r = c.call(36, 2, auth_bytes=scram.final(r.auth_bytes))
        return int(r.error_code)


def wait_for_login(port: int, user: str, password: str, code: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (got := login(port, user, password)) != code:
        assert time.monotonic() < deadline, f"login of {user} on port {port}: {got}, waited for {code}"
        time.sleep(0.1)


def test_a_user_created_on_one_broker_logs_in_on_the_other(tmp_path):
    with SaslCluster(tmp_path, brokers=2, overrides=SASL) as c:
        admin = AdminClient({"bootstrap.servers": c.brokers[1].bootstrap})
        up = UserScramCredentialUpsertion("zed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"zed-pw")
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(timeout=30)
        zk = connect(c.zookeeper_connect, 10000, 10000)
        try:
            doc = json.loads(zk.get("/config/users/zed")[0])
            changes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]
        finally:
            zk.stop()
            zk.close()
        assert doc["version"] == 1 and set(doc["config"]) == {"SCRAM-SHA-256"}
        assert re.fullmatch(
            r"salt=[A-Za-z0-9+/=]+,stored_key=[A-Za-z0-9+/=]+,server_key=[A-Za-z0-9+/=]+,iterations=4096",
            doc["config"]["SCRAM-SHA-256"],
        )
        assert {"version": 2, "entity_path": "users/zed"} in changes
        wait_for_login(c.sasl_ports[2], "zed", "zed-pw", 0)
        assert login(c.sasl_ports[1], "zed", "zed-pw") == 0
        assert login(c.sasl_ports[2], "zed", "other") == 58
        admin2 = AdminClient({"bootstrap.servers": c.brokers[2].bootstrap})
        rm = UserScramCredentialDeletion("zed", ScramMechanism.SCRAM_SHA_256)
        for f in admin2.alter_user_scram_credentials([rm]).values():
            f.result(timeout=30)
        wait_for_login(c.sasl_ports[1], "zed", "zed-pw", 58)
