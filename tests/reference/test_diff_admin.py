"""Differential: topic administration, metadata and configs, odradek against Apache Kafka 4.x.

Each test runs one scenario on both brokers (tests/support/diff.py) and compares the
responses field by field; what legitimately differs (ids, hosts, ports, throttle times, message
texts) is left out by the harness, anything else a test leaves out is named with its reason.
"""

from __future__ import annotations

import socket
import struct

import pytest
from support.diff import Target, unique
from support.proto import (
    API_VERSIONS,
    BROKER,
    CREATE_PARTITIONS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    TOPIC,
    V_CREATE_PARTITIONS,
    V_DELETE,
    V_DESCRIBE_CLUSTER,
    alter_configs,
    create_topic,
    create_topics,
    describe_configs,
    incremental_alter,
    metadata,
    wait_for_leaders,
)
from support.raw import nested

pytestmark = pytest.mark.reference

#: config lists are compared on the names both brokers declare; which names each has is compared
#: in test_topic_config_names
CONFIGS = ("*.configs",)
#: Kafka 4's KRaft bootstrap (StorageTool format) writes min.insync.replicas=1 as a cluster-wide
#: dynamic default, so its source there is DYNAMIC_DEFAULT_BROKER_CONFIG (3); an artefact of how
#: a KRaft cluster is formatted, with the same value (Kafka 3.9 shows DEFAULT_CONFIG, as odradek:
#: test_describe_topic_configs_against_kafka_39)
MIN_ISR_SOURCE = ("*.configs[min.insync.replicas].config_source", "*.configs[min.insync.replicas].synonyms")


def test_create_topics_validation(pair):
    """Bad input to CreateTopics: every error code, in one request (and validate_only)."""
    base = unique("ct")

    def scenario(t):
        with t.raw() as c:
            ok = create_topics(
                c,
                {"name": f"{base}-ok", "partitions": 2},
                {"name": "bad name!"},
                {"name": "a" * 250},
                {"name": "."},
                {"name": f"{base}-zero", "partitions": 0},
                {"name": f"{base}-neg", "partitions": -5},
                {"name": f"{base}-rf3", "rf": 3},
                {"name": f"{base}-rf0", "rf": 0},
                {"name": f"{base}-cfg", "configs": {"retention.ms": "soon"}},
                {"name": f"{base}-unknown", "configs": {"no.such.config": "1"}},
                {"name": f"{base}-policy", "configs": {"cleanup.policy": "shred"}},
                {"name": f"{base}-null", "configs": {"retention.ms": None}},
                {"name": f"{base}-asg", "partitions": -1, "rf": -1, "assignments": [[1], [2]]},
                {"name": f"{base}-asgdup", "partitions": -1, "rf": -1, "assignments": [[1, 1]]},
                {"name": f"{base}-default", "partitions": -1, "rf": -1},
            )
            again = create_topics(c, {"name": f"{base}-ok", "partitions": 2})
            dry = create_topics(c, {"name": f"{base}-dry", "partitions": 3}, validate_only=True)
            listed = metadata(c, [f"{base}-dry"]).topics
            return {"create": ok, "again": again, "dry": dry, "dry_listed": listed}

    got = pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)
    codes = {t["name"]: t["error_code"] for t in got["create"]["topics"]}
    assert codes[f"{base}-ok"] == 0 and codes["bad name!"] == 17 and codes[f"{base}-rf3"] == 38


def test_create_topics_returns_effective_configs(pair):
    """v5+ CreateTopics returns every config of the new topic: names, values, sources, flags."""
    name = unique("ctcfg")

    def scenario(t):
        with t.raw() as c:
            return create_topics(c, {"name": name, "partitions": 1, "configs": {"retention.bytes": "12345"}})

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


def test_metadata_shape(pair):
    """Metadata for a topic, an unknown topic, an invalid name, an internal-looking name."""
    name, nope = unique("md"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 3)
            md = metadata(c, [name, nope, "bad name!", "__nope"], auto=False)
            return {"brokers": md.brokers, "controller_id": md.controller_id, "topics": md.topics}

    got = pair.same(scenario, ignore=("topics[*].partitions[*].leader_epoch",))
    assert len(got["topics"]) == 4


def test_metadata_auto_creation(pair):
    """A documented difference (docs/compatibility.md): the Metadata request that auto-creates a
    topic gets UNKNOWN_TOPIC_OR_PARTITION from Kafka 4 (the creation goes to its controller and
    lands a moment later) and the topic with its leader from odradek (a single node creates it
    with its leader at once); the next request agrees."""
    name = unique("auto")

    def scenario(t):
        with t.raw() as c:
            first = metadata(c, [name], auto=True).topics[0]
            wait_for_leaders(c, name, 1)
            return {"first": (int(first.error_code), len(first.partitions)), "then": metadata(c, [name]).topics}

    kafka, odradek = pair.run(scenario)
    assert (kafka["first"], odradek["first"]) == ((3, 0), (0, 1))
    pair.compare(kafka["then"], odradek["then"], ignore=("*.leader_epoch",))


def test_metadata_auto_creation_above_the_live_brokers(kafka_factory, broker_factory):
    """default.replication.factor 3 on one broker: Kafka 3.9 in ZooKeeper mode (the mode
    odradek's cluster follows) answers the auto-creating Metadata INVALID_REPLICATION_FACTOR and
    creates nothing, and so does odradek; Kafka 4 answers UNKNOWN_TOPIC_OR_PARTITION (its
    controller refuses the creation), a documented difference (docs/compatibility.md)."""
    overrides = {"default.replication.factor": "3"}
    kafka39 = kafka_factory(line="3.9", zookeeper=True, overrides=overrides)
    kafka4 = kafka_factory(line="4", overrides=overrides)
    odradek = broker_factory(overrides)
    name = unique("wide")

    def answers(bootstrap: str) -> tuple[int, int]:
        with Target("any", bootstrap, "").raw() as c:
            first = metadata(c, [name], auto=True).topics[0]
            then = metadata(c, [name], auto=False).topics[0]
            return int(first.error_code), int(then.error_code)

    assert answers(kafka39.bootstrap) == (38, 3)  # INVALID_REPLICATION_FACTOR, then unknown: none created
    assert answers(odradek.bootstrap) == (38, 3)
    assert answers(kafka4.bootstrap) == (3, 3)


def test_metadata_topic_authorized_operations(pair):
    """Without an authorizer Kafka lists every topic operation when asked (DescribeTopics with
    includeAuthorizedOperations), and the cluster's."""
    name, nope = unique("mdops"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name)
            asked = metadata(c, [name, nope, "bad name!"], topic_ops=True)
            unasked = metadata(c, [name], topic_ops=False)
            return {"asked": asked.topics, "unasked": unasked.topics}

    pair.same(scenario, ignore=("*.partitions",))


@pytest.mark.parametrize("ops", [True, False])
def test_describe_cluster_shape(pair, ops):
    def scenario(t):
        with t.raw() as c:
            return c.call(
                DESCRIBE_CLUSTER, V_DESCRIBE_CLUSTER, include_cluster_authorized_operations=ops, endpoint_type=1
            )

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


def test_delete_topics_unknown_and_invalid(pair):
    gone = unique("gone")

    def scenario(t):
        with t.raw() as c:
            states = tuple(
                nested(DELETE_TOPICS, V_DELETE, "DeleteTopicState", name=n, topic_id=None) for n in (gone, "bad name!")
            )
            return c.call(DELETE_TOPICS, V_DELETE, topics=states, timeout=10000)

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


def test_create_partitions_validation(pair):
    name, nope = unique("cp"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 2)

            def grow(topic, count, validate_only=False):
                tp = nested(
                    CREATE_PARTITIONS,
                    V_CREATE_PARTITIONS,
                    "CreatePartitionsTopic",
                    name=topic,
                    count=count,
                    assignments=None,
                )
                return c.call(
                    CREATE_PARTITIONS, V_CREATE_PARTITIONS, topics=(tp,), timeout=10000, validate_only=validate_only
                ).results

            return {
                "same": grow(name, 2),
                "fewer": grow(name, 1),
                "dry": grow(name, 4, True),
                "more": grow(name, 3),
                "unknown": grow(nope, 3),
            }

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


# --------------------------------------------------------------------------- DescribeConfigs


def test_describe_topic_configs(pair):
    """Every topic config: names, values, sources, synonyms, read-only and sensitive flags; a
    topic override and its synonyms."""
    name, nope = unique("dc"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, configs={"retention.ms": "3600000", "cleanup.policy": "compact"})
            return {
                "all": describe_configs(c, TOPIC, name),
                "some": describe_configs(c, TOPIC, name, keys=["retention.ms", "max.message.bytes"], synonyms=False),
                "unknown": describe_configs(c, TOPIC, nope),
            }

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


def test_describe_broker_configs(pair):
    """The broker's settings as Kafka lists them (the ones odradek declares), with their
    sources, synonyms and flags. Settings Kafka has and odradek lacks are compared by name
    only in test_broker_config_names."""
    keys = [
        "message.max.bytes",
        "log.retention.hours",
        "log.retention.ms",
        "log.segment.bytes",
        "num.partitions",
        "auto.create.topics.enable",
        "log.cleanup.policy",
        "min.insync.replicas",
        "compression.type",
        "log.dirs",
        "offsets.topic.num.partitions",
        "group.initial.rebalance.delay.ms",
    ]

    def scenario(t):
        with t.raw() as c:
            return {
                "some": describe_configs(c, BROKER, "1", keys=keys),
                "other": describe_configs(c, BROKER, "7", keys=["num.partitions"]),
                "not_a_number": describe_configs(c, BROKER, "one", keys=["num.partitions"]),
                # the cluster-wide dynamic defaults: none set on either broker
                "default": describe_configs(c, BROKER, "", keys=["num.partitions"]),
            }

    # each broker's own data directory
    pair.same(scenario, ignore=(*MIN_ISR_SOURCE, "*configs[log.dirs]*value"), common=CONFIGS)


# --------------------------------------------------------------------------- altering configs


def test_incremental_alter_topic_configs_validation(pair):
    name, nope = unique("iac"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name)
            out = {
                "bad_value": incremental_alter(c, TOPIC, name, [("retention.ms", 0, "never")], False),
                "unknown_key": incremental_alter(c, TOPIC, name, [("no.such.config", 0, "1")], False),
                "append_non_list": incremental_alter(c, TOPIC, name, [("retention.ms", 2, "5")], False),
                "unknown_topic": incremental_alter(c, TOPIC, nope, [("retention.ms", 0, "1")], False),
                "dup_key": incremental_alter(
                    c, TOPIC, name, [("retention.ms", 0, "1"), ("retention.ms", 1, None)], False
                ),
                "ok": incremental_alter(c, TOPIC, name, [("retention.ms", 0, "7200000")], False),
                "append": incremental_alter(c, TOPIC, name, [("cleanup.policy", 2, "compact")], False),
                "delete_absent": incremental_alter(c, TOPIC, name, [("segment.ms", 1, None)], False),
            }
            out["after"] = describe_configs(c, TOPIC, name, keys=["retention.ms", "cleanup.policy"])
            return out

    pair.same(scenario, ignore=MIN_ISR_SOURCE, common=CONFIGS)


#: dynamic broker settings (cluster-wide default, resource name "") Kafka accepts; validate_only
#: so neither shared broker changes
DYNAMIC_BROKER_SETTINGS = {
    "log.retention.ms": "3600000",
    "log.segment.bytes": "104857600",
    "message.max.bytes": "2000000",
    "log.cleanup.policy": "compact",
    "compression.type": "gzip",
    "compression.gzip.level": "9",
    "compression.lz4.level": "1",
    "compression.zstd.level": "-5",
    "log.cleaner.backoff.ms": "1000",
    "log.cleaner.dedupe.buffer.size": "67108864",
    "log.cleaner.io.buffer.load.factor": "0.8",
    "log.retention.bytes": "1000000",
    "log.flush.interval.ms": "1000",
    "log.roll.ms": "100000",
    "log.message.timestamp.type": "LogAppendTime",
}


@pytest.mark.parametrize("api", ["incremental", "legacy"])
def test_alter_dynamic_broker_configs(pair, api):
    """Dynamic broker settings Kafka accepts through (Incremental)AlterConfigs, validate_only;
    and read-only ones it refuses (INVALID_REQUEST). The legacy API is compared on the broker's
    own resource only: on the cluster default ("") it replaces the whole set of cluster-wide
    configs, and Kafka 4 then refuses to drop the min.insync.replicas its KRaft bootstrap wrote."""

    def scenario(t):
        out = {}
        with t.raw() as c:
            for key, value in DYNAMIC_BROKER_SETTINGS.items():
                for resource in ("", "1") if api == "incremental" else ("1",):
                    if api == "incremental":
                        r = incremental_alter(c, BROKER, resource, [(key, 0, value)], True)
                    else:
                        r = alter_configs(c, BROKER, resource, {key: value}, True)
                    out[f"{key}@{resource or 'default'}"] = r.error_code
            for key in ("log.dirs", "node.id", "num.partitions", "offsets.topic.num.partitions"):
                r = incremental_alter(c, BROKER, "", [(key, 0, "1")], True)
                out[f"{key}@default"] = r.error_code
            r = incremental_alter(c, BROKER, "1", [("log.retention.ms", 0, "soon")], True)
            out["bad value"] = r.error_code
            r = incremental_alter(c, BROKER, "1", [("log.retention.ms", 0, "1"), ("log.retention.ms", 1, None)], True)
            out["duplicate key"] = r.error_code
        return out

    pair.same(scenario)


def test_unknown_broker_settings_refused_unlike_kafka(pair):
    """A documented difference (docs/compatibility.md): Kafka stores any setting name on a broker
    resource (plugins read their own), odradek refuses a name it does not know (INVALID_CONFIG),
    since nothing would read it. zookeeper.connect is unknown to Kafka 4 and read-only here;
    num.recovery.threads.per.data.dir is read at start-up only here, and dynamic settings are not
    kept across a restart, so a change could never act: read-only."""

    def scenario(t):
        with t.raw() as c:
            return {
                key: incremental_alter(c, BROKER, "", [(key, 0, "1")], True).error_code
                for key in ("no.such.setting", "zookeeper.connect", "num.recovery.threads.per.data.dir")
            }

    kafka, odradek = pair.run(scenario)
    assert {k: int(v) for k, v in kafka.items()} == {
        "no.such.setting": 0,
        "zookeeper.connect": 0,
        "num.recovery.threads.per.data.dir": 0,
    }
    assert {k: int(v) for k, v in odradek.items()} == {
        "no.such.setting": 40,
        "zookeeper.connect": 42,
        "num.recovery.threads.per.data.dir": 42,
    }


#: topic configs Kafka 4.x declares and odradek does not, each for a feature odradek lacks
#: (docs/compatibility.md): tiered storage, replication throttles, share-group dead-letter queues,
#: the decompressed-size guard
KAFKA_ONLY_TOPIC_CONFIGS = {
    "errors.deadletterqueue.group.enable",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.decompressed.message.bytes",
    "remote.copy.lag.bytes",
    "remote.copy.lag.ms",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
}


def test_topic_config_names(pair):
    """Which topic configs each broker declares: odradek's are all Kafka's; Kafka's others are the
    documented list above."""
    name = unique("names")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name)
            return {x.name for x in describe_configs(c, TOPIC, name, synonyms=False).configs}

    kafka, odradek = pair.run(scenario)
    assert odradek - kafka == set()
    assert kafka - odradek == KAFKA_ONLY_TOPIC_CONFIGS


def test_api_versions_of_the_apis_odradek_serves(pair):
    """The version ranges of every API odradek serves are Kafka's; an ApiVersions request of a
    version neither knows is answered UNSUPPORTED_VERSION in the v0 layout (KIP-511)."""

    def scenario(t):
        with t.raw() as c:
            r = c.call(API_VERSIONS, 3, client_software_name="diff", client_software_version="1")
        with socket.create_connection(t.bootstrap.rsplit(":", 1), timeout=10) as s:
            # a request header v2 (client id, no tagged fields) of ApiVersions v127, no body
            header = struct.pack(">hhi", API_VERSIONS, 127, 7) + struct.pack(">h", 4) + b"diff" + b"\x00"
            s.sendall(struct.pack(">i", len(header)) + header)
            size = struct.unpack(">i", _read(s, 4))[0]
            frame = _read(s, size)
        correlation, code = struct.unpack_from(">ih", frame)
        return {"api_keys": r.api_keys, "error_code": r.error_code, "unknown_version": (correlation, code)}

    kafka, odradek = pair.run(scenario)
    # ZooKeeper-mode cluster APIs: Kafka 4's brokers serve neither, Kafka 3.9's in ZooKeeper mode both
    theirs = {k.api_key for k in kafka["api_keys"]}
    assert {k.api_key for k in odradek["api_keys"]} - theirs == ZOOKEEPER_MODE_APIS
    odradek["api_keys"] = [k for k in odradek["api_keys"] if k.api_key not in ZOOKEEPER_MODE_APIS]
    ours = {k.api_key: k for k in odradek["api_keys"]}
    kafka["api_keys"] = [k for k in kafka["api_keys"] if k.api_key in ours]
    # Kafka 4.4 serves a newer version of these APIs than odradek (docs/compatibility.md)
    newer = {k.api_key: k.max_version for k in kafka["api_keys"] if k.max_version > ours[k.api_key].max_version}
    assert newer == KAFKA_NEWER_VERSIONS
    pair.compare(kafka, odradek, ignore=tuple(f"api_keys[{k}].max_version" for k in newer))


#: ControlledShutdown (7) and AlterPartition (56), which odradek's ZooKeeper-mode cluster uses
#: between brokers, as Kafka 3.9 in ZooKeeper mode does
ZOOKEEPER_MODE_APIS = {7, 56}

#: api key -> the newest version Kafka 4.4 serves, above odradek's: ApiVersions v5 and
#: DeleteGroups v3 have no kio schema yet; ListOffsets v11, OffsetCommit v10 and OffsetFetch v10
#: (topic ids), DescribeGroups v6 and DescribeLogDirs v5 have one and are not served yet;
#: TxnOffsetCommit: v5 (transactions v2, KIP-890 part 2) is not served, v6 (topic ids, KIP-1319)
#: has no kio schema yet
KAFKA_NEWER_VERSIONS = {2: 11, 8: 10, 9: 10, 15: 6, 18: 5, 28: 6, 35: 5, 42: 3}


def _read(s, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


@pytest.mark.xdist_group("kafka39")  # kafka39 started on one worker (tests/reference/test_fixture.py _one_worker)
def test_describe_topic_configs_against_kafka_39(pair39):
    """Against Kafka 3.9 (KRaft), whose bootstrap writes no cluster-wide min.insync.replicas:
    there its source is DEFAULT_CONFIG, as in odradek. Compared on the configs whose defaults did
    not change between 3.9 and 4.x (4.0 changed message.timestamp.after.max.ms and
    segment.bytes' bounds; odradek follows 4.x)."""
    name = unique("dc39")
    keys = ["min.insync.replicas", "cleanup.policy", "retention.ms", "max.message.bytes", "segment.ms"]

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, configs={"retention.ms": "3600000"})
            return describe_configs(c, TOPIC, name, keys=keys)

    got = pair39.same(scenario)
    assert {x["name"]: x["config_source"] for x in got["configs"]}["min.insync.replicas"] == 5
