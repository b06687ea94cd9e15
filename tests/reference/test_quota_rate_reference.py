"""producer_byte_rate beside Apache Kafka 3.9 (ZooKeeper mode): the same greedy confluent-kafka
producer, limited to 1 MB/s with kafka-configs, gets the same rate from both brokers over 30 s
(quota.window.num=3 on both: see tests/interop/security/test_quota_kafka_configs.py), and
both report throttle times to it."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka.admin import AdminClient, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command
from support.quota_load import MB, Produced, produce_until

WINDOWS = {"quota.window.num": "3"}


def limited_rate(bootstrap: str) -> tuple[float, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected handle fails its futures
    admin.create_topics([NewTopic("limited", 1, 1)])["limited"].result(60)
    cmd = tool_command("3.9", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--alter",
                       "--entity-type", "clients", "--entity-name", "limited",
                       "--add-config", f"producer_byte_rate={MB}", jvm=SHORT_JVM)  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    time.sleep(1)  # Kafka applies it from its change notification
    produced = Produced()
    start = time.monotonic()
    produce_until(bootstrap, "limited", "limited", start + 35, produced)
    return produced.rate(start + 5, start + 35), produced.throttle_max


def test_the_same_producer_gets_the_same_rate_from_kafka_and_odradek(kafka_factory, broker_factory):
    kafka = kafka_factory(line="3.9", zookeeper=True, overrides=WINDOWS)
    k_rate, k_throttle = limited_rate(kafka.bootstrap)
    kafka.kill()  # one broker at a time: the machine's two cores
    o_rate, o_throttle = limited_rate(broker_factory(WINDOWS).bootstrap)
    print(f"Kafka 3.9: {k_rate / MB:.3f} MB/s, odradek: {o_rate / MB:.3f} MB/s")
    assert k_throttle > 0 and o_throttle > 0
    assert 0.9 * MB <= o_rate <= 1.1 * MB, f"odradek {o_rate / MB:.3f} MB/s"
    assert abs(o_rate - k_rate) <= 0.1 * k_rate, f"odradek {o_rate / MB:.3f} MB/s, Kafka {k_rate / MB:.3f} MB/s"
