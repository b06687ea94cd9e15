"""consumer_byte_rate beside Apache Kafka 3.9 (ZooKeeper mode): the same greedy confluent-kafka
consumer, limited to 1 MB/s with kafka-configs, reads the same topic (40 MB of 1000-byte values,
more than the quota lets through in the time measured) from both brokers, and gets the same rate
from both over 20 s past its first burst (quota.window.num=3 on both: see
tests/interop/security/test_quota_kafka_configs.py), with throttle times reported by both:
odradek's never above the quota and no less than Kafka's (less 10 %)."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command
from support.quota_load import MB, consume_for, fill

WINDOWS = {"quota.window.num": "3"}


def limited_rate(bootstrap: str, fetch_bytes: int | None) -> tuple[float, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected handle fails its futures
    admin.create_topics([NewTopic("data", 1, 1)])["data"].result(60)
    fill(bootstrap, "data", 40_000)
    cmd = tool_command("3.9", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--alter",
                       "--entity-type", "clients", "--entity-name", "slow",
                       "--add-config", f"consumer_byte_rate={MB}", jvm=SHORT_JVM)  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    time.sleep(1)  # Kafka applies it from its change notification
    return consume_for(bootstrap, "slow", "data", 25, 5, fetch_bytes)


@pytest.mark.parametrize("fetch_bytes", [32768, None], ids=["32KB-fetches", "default-fetches"])
def test_the_same_consumer_gets_the_same_rate_from_kafka_and_odradek(kafka_factory, broker_factory, fetch_bytes):
    kafka = kafka_factory(line="3.9", zookeeper=True, overrides=WINDOWS)
    k_rate, k_throttle = limited_rate(kafka.bootstrap, fetch_bytes)
    kafka.kill()  # one broker at a time: the machine's two cores
    o_rate, o_throttle = limited_rate(broker_factory(WINDOWS).bootstrap, fetch_bytes)
    print(f"Kafka 3.9: {k_rate / MB:.3f} MB/s, odradek: {o_rate / MB:.3f} MB/s")
    assert k_throttle > 0 and o_throttle > 0
    said = f"odradek {o_rate / MB:.3f} MB/s, Kafka {k_rate / MB:.3f} MB/s"
    # never above the quota, and at least what Kafka gives the same consumer less 10 %: a loaded
    # machine slows Kafka's JVM more than the quota does (0.790 against 0.913 MB/s with 32 KB
    # fetches in two runs of one day), so "the same rate to 10 %" failed on Kafka's side alone
    assert o_rate <= 1.05 * MB, said
    assert o_rate >= 0.9 * k_rate, said
