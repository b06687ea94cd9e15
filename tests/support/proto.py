"""Raw protocol calls shared by the differential scenarios: kio entities over a bare socket, at
versions both Kafka 4.x and odradek serve (Kafka 3.9 serves them too, except where a test says).

Each helper takes an open :class:`support.raw.RawConnection` and returns the response entity
(or one part of it), unchanged: the comparison normalises it.
"""

from __future__ import annotations

import time
from typing import Any

from support.raw import RawConnection, nested

from odradek.protocol.records import Record, build_batch

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, API_VERSIONS = 15, 18
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INC_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 33, 37, 44, 60

V_PRODUCE, V_FETCH, V_LIST_OFFSETS, V_METADATA = 11, 12, 9, 12
V_CREATE, V_DELETE, V_DELETE_RECORDS = 7, 6, 2
V_DESCRIBE_CONFIGS, V_ALTER_CONFIGS, V_INC_ALTER, V_CREATE_PARTITIONS, V_DESCRIBE_CLUSTER = 4, 2, 1, 3, 1
V_COMMIT, V_OFFSET_FETCH, V_JOIN, V_SYNC, V_HEARTBEAT, V_LEAVE = 9, 8, 9, 5, 4, 5

TOPIC, BROKER = 2, 4  # config resource types


# --------------------------------------------------------------------------- topics


def create_topics(c: RawConnection, *topics: dict, validate_only: bool = False) -> Any:
    """CreateTopics; each topic a dict: name, partitions=1, rf=1, configs={}, assignments=None."""
    entities = []
    for t in topics:
        cfg = tuple(
            nested(CREATE_TOPICS, V_CREATE, "CreatableTopicConfig", name=k, value=v)
            for k, v in (t.get("configs") or {}).items()
        )
        asg = tuple(
            nested(CREATE_TOPICS, V_CREATE, "CreatableReplicaAssignment", partition_index=i, broker_ids=tuple(b))
            for i, b in enumerate(t.get("assignments") or ())
        )
        entities.append(
            nested(
                CREATE_TOPICS,
                V_CREATE,
                "CreatableTopic",
                name=t["name"],
                num_partitions=t.get("partitions", 1),
                replication_factor=t.get("rf", 1),
                assignments=asg,
                configs=cfg,
            )
        )
    return c.call(CREATE_TOPICS, V_CREATE, topics=tuple(entities), timeout=15000, validate_only=validate_only)


def create_topic(c: RawConnection, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    """Create a topic and wait until this broker has a leader for each of its partitions (Kafka's
    metadata cache learns of a new topic a moment after CreateTopics answers)."""
    r = create_topics(c, {"name": name, "partitions": partitions, "configs": configs or {}}).topics[0]
    assert int(r.error_code) == 0, f"create {name}: {r.error_code} {r.error_message}"
    wait_for_leaders(c, name, partitions)


def wait_for_leaders(c: RawConnection, name: str, partitions: int, timeout: float = 15) -> None:
    """Until Metadata names a leader for every partition and the leader serves them: Kafka's
    metadata cache can name this broker leader a moment before its replica manager has made the
    partition, and a ListOffsets then gets NOT_LEADER_OR_FOLLOWER (seen once in CI)."""
    deadline = time.monotonic() + timeout
    while True:
        t = metadata(c, [name], auto=False).topics[0]
        if int(t.error_code) == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions):
            served = list_offsets(c, name, [(p, -1) for p in range(partitions)])
            if all(int(p.error_code) == 0 for p in served.partitions):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: no leaders serving after {timeout}s: {t}")
        time.sleep(0.05)


def metadata(c: RawConnection, names: list[str] | None, *, auto: bool = False, topic_ops: bool = False) -> Any:
    topics = (
        None
        if names is None
        else tuple(nested(METADATA, V_METADATA, "MetadataRequestTopic", name=n, topic_id=None) for n in names)
    )
    return c.call(
        METADATA,
        V_METADATA,
        topics=topics,
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=topic_ops,
    )


# --------------------------------------------------------------------------- records


def produce(
    c: RawConnection,
    topic: str,
    batches: list[bytes],
    partition: int = 0,
    *,
    acks: int = -1,
    version: int = V_PRODUCE,
) -> Any:
    """One Produce request of ``batches`` (concatenated) to one partition; the partition's response."""
    pd = nested(PRODUCE, version, "PartitionProduceData", index=partition, records=b"".join(batches))
    td = nested(PRODUCE, version, "TopicProduceData", name=topic, partition_data=(pd,))
    r = c.call(PRODUCE, version, transactional_id=None, acks=acks, timeout=10000, topic_data=(td,))
    return r.responses[0].partition_responses[0]


def batch(*records: tuple[bytes | None, bytes | None] | Record, **kw) -> bytes:
    """A RecordBatch v2 of (key, value) pairs (or Records)."""
    recs = [r if isinstance(r, Record) else Record(key=r[0], value=r[1]) for r in records]
    return build_batch(recs, **kw)


def fetch(
    c: RawConnection,
    parts: list[tuple[str, int, int, int]],
    *,
    max_bytes: int = 50 * 1024 * 1024,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    version: int = V_FETCH,
) -> Any:
    """Fetch (sessionless) of [(topic, partition, fetch offset, partition max bytes)]."""
    by_topic: dict[str, list] = {}
    for topic, p, offset, pmax in parts:
        by_topic.setdefault(topic, []).append(
            nested(
                FETCH,
                version,
                "FetchPartition",
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=pmax,
            )
        )
    topics = tuple(nested(FETCH, version, "FetchTopic", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    return c.call(
        FETCH,
        version,
        cluster_id=None,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets(c: RawConnection, topic: str, timestamps: list[tuple[int, int]], isolation: int = 0) -> Any:
    """ListOffsets of [(partition, timestamp)]; the topic's response."""
    parts = tuple(
        nested(
            LIST_OFFSETS,
            V_LIST_OFFSETS,
            "ListOffsetsPartition",
            partition_index=p,
            current_leader_epoch=-1,
            timestamp=ts,
        )
        for p, ts in timestamps
    )
    t = nested(LIST_OFFSETS, V_LIST_OFFSETS, "ListOffsetsTopic", name=topic, partitions=parts)
    return c.call(LIST_OFFSETS, V_LIST_OFFSETS, replica_id=-1, isolation_level=isolation, topics=(t,)).topics[0]


def delete_records(c: RawConnection, topic: str, offsets: list[tuple[int, int]]) -> Any:
    parts = tuple(
        nested(DELETE_RECORDS, V_DELETE_RECORDS, "DeleteRecordsPartition", partition_index=p, offset=o)
        for p, o in offsets
    )
    t = nested(DELETE_RECORDS, V_DELETE_RECORDS, "DeleteRecordsTopic", name=topic, partitions=parts)
    return c.call(DELETE_RECORDS, V_DELETE_RECORDS, topics=(t,), timeout=10000).topics[0]


# --------------------------------------------------------------------------- configs


def describe_configs(
    c: RawConnection, resource_type: int, name: str, keys: list[str] | None = None, synonyms: bool = True
) -> Any:
    res = nested(
        DESCRIBE_CONFIGS,
        V_DESCRIBE_CONFIGS,
        "DescribeConfigsResource",
        resource_type=resource_type,
        resource_name=name,
        configuration_keys=None if keys is None else tuple(keys),
    )
    return c.call(
        DESCRIBE_CONFIGS, V_DESCRIBE_CONFIGS, resources=(res,), include_synonyms=synonyms, include_documentation=False
    ).results[0]


def incremental_alter(
    c: RawConnection, resource_type: int, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool
) -> Any:
    """IncrementalAlterConfigs of one resource: ops are (name, operation 0 SET/1 DELETE/2 APPEND/3 SUBTRACT, value)."""
    cfgs = tuple(
        nested(INC_ALTER_CONFIGS, V_INC_ALTER, "AlterableConfig", name=n, config_operation=op, value=v)
        for n, op, v in ops
    )
    rs = nested(
        INC_ALTER_CONFIGS,
        V_INC_ALTER,
        "AlterConfigsResource",
        resource_type=resource_type,
        resource_name=name,
        configs=cfgs,
    )
    return c.call(INC_ALTER_CONFIGS, V_INC_ALTER, resources=(rs,), validate_only=validate_only).responses[0]


def alter_configs(c: RawConnection, resource_type: int, name: str, configs: dict[str, str], validate_only: bool) -> Any:
    cfgs = tuple(nested(ALTER_CONFIGS, V_ALTER_CONFIGS, "AlterableConfig", name=k, value=v) for k, v in configs.items())
    rs = nested(
        ALTER_CONFIGS,
        V_ALTER_CONFIGS,
        "AlterConfigsResource",
        resource_type=resource_type,
        resource_name=name,
        configs=cfgs,
    )
    return c.call(ALTER_CONFIGS, V_ALTER_CONFIGS, resources=(rs,), validate_only=validate_only).responses[0]


RETRIABLE = {3, 5, 6}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER


def produce_ok(c: RawConnection, topic: str, batches: list[bytes], partition: int = 0, timeout: float = 10) -> Any:
    """Produce that must succeed (set-up of a scenario): retried while the broker is still
    learning of a new topic, then asserted."""
    deadline = time.monotonic() + timeout
    while True:
        r = produce(c, topic, batches, partition)
        if int(r.error_code) not in RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert int(r.error_code) == 0, f"produce to {topic}-{partition}: {r.error_code} {r.error_message}"
    return r
