"""Client quotas on a 3-broker cluster: set with Kafka 3.9's kafka-configs through one broker,
stored in ZooKeeper in Kafka 3.9's layout (/config/users/<user> beside the user's SCRAM
credential, /config/users/<default>, /config/clients/<client>, /config/users/<u>/clients/<c>,
/config/changes notifications) and described by every broker within a second; a removal likewise."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason
from support.odradek_cluster import OdradekCluster
from support.raw import RawConnection, nested

from odradek.cluster.zk_client import connect


def kafka_configs(bootstrap: str, *args: str) -> None:
    import subprocess

    cmd = tool_command("3.9", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args, jvm=SHORT_JVM)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def described(bootstrap: str) -> dict:
    with RawConnection(bootstrap) as c:
        r = c.call(48, 1, components=(), strict=False)
    assert int(r.error_code) == 0, r.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)): {v.key: v.value for v in x.values}
        for x in r.entries
    }


def wait_everywhere(c: OdradekCluster, wanted: dict, since: float) -> float:
    """Seconds from `since` until every broker describes `wanted`."""
    deadline = time.monotonic() + 10
    pending = set(c.brokers)
    while pending:
        for i in sorted(pending):
            if described(c.brokers[i].bootstrap) == wanted:
                pending.discard(i)
        assert time.monotonic() < deadline, f"brokers {sorted(pending)} did not describe {wanted}"
        time.sleep(0.05)
    return time.monotonic() - since


@pytest.mark.serial  # timed: every broker within 1.5 s (tests/README.md)
def test_quotas_altered_through_one_broker_apply_on_every_broker(tmp_path):
    if unavailable_reason("3.9"):
        pytest.skip(unavailable_reason("3.9"))
    with OdradekCluster(tmp_path, brokers=3) as c:
        one = c.brokers[1].bootstrap
        admin = AdminClient({"bootstrap.servers": one})
        up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(timeout=30)
        kafka_configs(one, "--alter", "--entity-type", "users", "--entity-name", "alice",
                      "--add-config", "producer_byte_rate=1024")  # fmt: skip
        kafka_configs(one, "--alter", "--entity-type", "users", "--entity-default",
                      "--add-config", "request_percentage=50")  # fmt: skip
        kafka_configs(one, "--alter", "--entity-type", "clients", "--entity-name", "app",
                      "--add-config", "consumer_byte_rate=2048")  # fmt: skip
        start = time.monotonic()
        with RawConnection(one) as conn:  # the fourth through the API itself, to time the propagation
            entry = nested(49, 1, "EntryData",
                entity=(nested(49, 1, "EntityData", entity_type="user", entity_name="alice"),
                        nested(49, 1, "EntityData", entity_type="client-id", entity_name=None)),
                ops=(nested(49, 1, "OpData", key="controller_mutation_rate", value=5.0, remove=False),),
            )  # fmt: skip
            r = conn.call(49, 1, entries=(entry,), validate_only=False)
            assert int(r.entries[0].error_code) == 0
        wanted = {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("user", None),): {"request_percentage": 50.0},
            (("client-id", "app"),): {"consumer_byte_rate": 2048.0},
            (("client-id", None), ("user", "alice")): {"controller_mutation_rate": 5.0},
        }
        assert wait_everywhere(c, wanted, start) < 1.5
        zk = connect(c.zookeeper_connect, 10000, 10000)
        try:
            alice = json.loads(zk.get("/config/users/alice")[0])
            default = json.loads(zk.get("/config/users/<default>")[0])
            app = json.loads(zk.get("/config/clients/app")[0])
            pair = json.loads(zk.get("/config/users/alice/clients/<default>")[0])
            changes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]
        finally:
            zk.stop()
            zk.close()
        assert set(alice["config"]) == {"SCRAM-SHA-256", "producer_byte_rate"}  # the two in one node
        assert alice["config"]["producer_byte_rate"] == "1024"
        assert default == {"version": 1, "config": {"request_percentage": "50.0"}}
        assert app == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
        assert pair == {"version": 1, "config": {"controller_mutation_rate": "5.0"}}
        paths = {ch["entity_path"] for ch in changes}
        assert {"users/alice", "users/<default>", "clients/app", "users/alice/clients/<default>"} <= paths
        # a removal, through another broker
        kafka_configs(c.brokers[2].bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "app",
                      "--delete-config", "consumer_byte_rate")  # fmt: skip
        del wanted[(("client-id", "app"),)]
        wait_everywhere(c, wanted, time.monotonic())
