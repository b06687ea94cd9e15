"""Differential: DescribeConfigs of brokers, messages included (tests/reference/test_diff_admin.py
compares the codes and entries, the harness leaving error messages out): another broker's id, a
name that is no number, and an empty, a non-numeric and another broker's name for a broker's
loggers, against Kafka 4.x and Kafka 3.9 in ZooKeeper mode (the mode odradek's cluster follows);
and the cluster-wide defaults (broker "") with a default set by IncrementalAlterConfigs, on
brokers of the test's own (the session's brokers are not reconfigured)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from support.diff import Pair, Target
from support.proto import BROKER, describe_configs, incremental_alter

pytestmark = pytest.mark.reference

BROKER_LOGGER = 8


def _errors(bootstrap: str) -> dict[str, Any]:
    out = {}
    with Target("any", bootstrap, "").raw() as c:
        for label, kind, name in (
            ("broker 7", BROKER, "7"),
            ("broker one", BROKER, "one"),
            ("loggers of ''", BROKER_LOGGER, ""),
            ("loggers of one", BROKER_LOGGER, "one"),
            ("loggers of 7", BROKER_LOGGER, "7"),
        ):
            r = describe_configs(c, kind, name, keys=None if kind == BROKER_LOGGER else ["num.partitions"])
            out[label] = (int(r.error_code), r.error_message, len(r.configs))
    return out


@pytest.mark.xdist_group("kafka39_zk")  # started on one worker (tests/reference/test_fixture.py _one_worker)
def test_invalid_request_messages_as_kafka(kafka4, kafka39_zk, odradek_ref):
    ours = _errors(odradek_ref.bootstrap)
    assert _errors(kafka4.bootstrap) == ours
    assert _errors(kafka39_zk.bootstrap) == ours
    assert ours["broker 7"] == (42, "Unexpected broker id, expected 1 or empty string, but received 7", 0)


def _defaults(bootstrap: str) -> dict[str, Any]:
    """Two cluster-wide defaults set, then broker "" (every entry, with synonyms) and broker 1
    (the two, with synonyms: the dynamic default under the static one)."""
    with Target("any", bootstrap, "").raw() as c:
        set_ = incremental_alter(
            c, BROKER, "", [("log.retention.ms", 0, "3600000"), ("message.max.bytes", 0, "2000000")], False
        )
        assert set_.error_code == 0, set_
        deadline = time.monotonic() + 30
        while True:  # Kafka applies it from ZooKeeper's notification or its metadata log, a moment later
            everything = describe_configs(c, BROKER, "")
            names = {e.name for e in everything.configs}
            if {"log.retention.ms", "message.max.bytes"} <= names or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        keys = describe_configs(c, BROKER, "", keys=["log.retention.ms", "num.partitions"])
        own = describe_configs(c, BROKER, "1", keys=["log.retention.ms", "message.max.bytes"])
    return {"all": everything, "keys": keys, "own": own}


def test_cluster_wide_defaults_as_kafka(kafka_factory, broker_factory):
    odradek = broker_factory({"num.partitions": "1", "offsets.topic.replication.factor": "1"})
    ours = _defaults(odradek.bootstrap)
    assert sorted(e.name for e in ours["all"].configs) == ["log.retention.ms", "message.max.bytes"]
    for line, zookeeper in (("3.9", True), ("4", False)):
        kafka = kafka_factory(line=line, zookeeper=zookeeper)
        theirs = _defaults(kafka.bootstrap)
        if line == "4":  # its KRaft bootstrap writes min.insync.replicas=1 as a cluster-wide default
            kept = tuple(e for e in theirs["all"].configs if e.name != "min.insync.replicas")
            theirs["all"] = dataclasses.replace(theirs["all"], configs=kept)
        pair = Pair(Target("kafka", kafka.bootstrap, line), Target("odradek", odradek.bootstrap, "odradek"))
        pair.compare(theirs, ours)
        kafka.kill()
