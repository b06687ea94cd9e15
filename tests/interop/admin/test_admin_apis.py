"""Admin and metadata APIs at the protocol level, against a real broker process."""

from __future__ import annotations

import time
import uuid

import pytest
from support.raw import RawConnection, nested

from odradek.protocol.records import Record, build_batch

pytestmark = pytest.mark.interop

PRODUCE, LIST_OFFSETS, METADATA, CREATE, DELETE, DELETE_RECORDS, INIT_PID, OFFSET_FOR_EPOCH = (
    0,
    2,
    3,
    19,
    20,
    21,
    22,
    23,
)
DESCRIBE_CONFIGS, INC_ALTER, LOG_DIRS, CREATE_PARTITIONS, DESCRIBE_CLUSTER = 32, 44, 35, 37, 60


def create(c, name, partitions=1, rf=1, configs=None, validate_only=False):
    cfg = tuple(nested(CREATE, 7, "CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items())
    t = nested(
        CREATE,
        7,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=(),
        configs=cfg,
    )
    return c.call(CREATE, 7, topics=(t,), timeout=10000, validate_only=validate_only).topics[0]


def produce(c, topic, records, partition=0, **batch_kw):
    batch = build_batch(records, **batch_kw)
    pd = nested(PRODUCE, 9, "PartitionProduceData", index=partition, records=batch)
    td = nested(PRODUCE, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    return c.call(PRODUCE, 9, acks=-1, timeout=10000, topic_data=(td,)).responses[0].partition_responses[0]


def list_offset(c, topic, ts, partition=0):
    p = nested(
        LIST_OFFSETS, 8, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=ts
    )
    t = nested(LIST_OFFSETS, 8, "ListOffsetsTopic", name=topic, partitions=(p,))
    return c.call(LIST_OFFSETS, 8, replica_id=-1, isolation_level=0, topics=(t,)).topics[0].partitions[0]


def metadata(c, names, version=12, auto=True):
    topics = (
        None
        if names is None
        else tuple(nested(METADATA, version, "MetadataRequestTopic", name=n, topic_id=None) for n in names)
    )
    return c.call(
        METADATA, version, topics=topics, allow_auto_topic_creation=auto, include_topic_authorized_operations=False
    )


def test_create_topics_validation(broker):
    with RawConnection(broker.bootstrap) as c:
        assert int(create(c, "ok", 3).error_code) == 0
        assert int(create(c, "ok", 3).error_code) == 36  # TOPIC_ALREADY_EXISTS
        assert int(create(c, "bad name", 1).error_code) == 17  # INVALID_TOPIC_EXCEPTION
        assert int(create(c, "zero", 0).error_code) == 37  # INVALID_PARTITIONS
        assert int(create(c, "rf", 1, rf=3).error_code) == 38  # INVALID_REPLICATION_FACTOR
        assert int(create(c, "cfg", 1, configs={"retention.ms": "soon"}).error_code) == 40  # INVALID_CONFIG
        assert int(create(c, "cfg", 1, configs={"no.such.config": "1"}).error_code) == 40
        r = create(c, "dry", 2, validate_only=True)
        assert int(r.error_code) == 0 and r.num_partitions == 2
        assert "dry" not in {t.name for t in metadata(c, None).topics}
        r = create(c, "withcfg", 2, configs={"retention.bytes": "12345"})
        assert {x.name: x.value for x in r.configs}["retention.bytes"] == "12345"


def test_topic_ids_are_stable_across_restart_and_delete_by_id(broker):
    with RawConnection(broker.bootstrap) as c:
        tid = create(c, "stable", 2).topic_id
        assert tid != uuid.UUID(int=0)
    broker.restart()
    with RawConnection(broker.bootstrap) as c:
        md = metadata(c, ["stable"])
        assert md.topics[0].topic_id == tid
        assert md.cluster_id and md.controller_id == 1
        r = c.call(DELETE, 6, topics=(nested(DELETE, 6, "DeleteTopicState", name=None, topic_id=tid),), timeout=10000)
        assert int(r.responses[0].error_code) == 0 and r.responses[0].name == "stable"
        r = c.call(DELETE, 6, topics=(nested(DELETE, 6, "DeleteTopicState", name=None, topic_id=tid),), timeout=10000)
        assert int(r.responses[0].error_code) == 100  # UNKNOWN_TOPIC_ID


def test_metadata_auto_creation_follows_the_setting(broker_factory):
    on = broker_factory()
    off = broker_factory(overrides={"auto.create.topics.enable": "false"})
    with RawConnection(on.bootstrap) as c:
        t = metadata(c, ["auto1"]).topics[0]
        assert int(t.error_code) == 0 and len(t.partitions) == 1
        t = metadata(c, ["auto2"], auto=False).topics[0]
        assert int(t.error_code) == 3
        assert int(metadata(c, ["bad/name"]).topics[0].error_code) == 17
        assert metadata(c, [], version=4).topics == ()  # empty list: no topics (v1+)
        old = metadata(c, ["auto3"], version=0)  # v0 always auto-creates
        assert int(old.topics[0].error_code) == 0
    with RawConnection(off.bootstrap) as c:
        assert int(metadata(c, ["nope"]).topics[0].error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_create_partitions_describe_cluster_and_log_dirs(broker):
    with RawConnection(broker.bootstrap) as c:
        create(c, "grow", 2)
        t = nested(CREATE_PARTITIONS, 3, "CreatePartitionsTopic", name="grow", count=5, assignments=None)
        assert (
            int(c.call(CREATE_PARTITIONS, 3, topics=(t,), timeout=10000, validate_only=False).results[0].error_code)
            == 0
        )
        assert len(metadata(c, ["grow"]).topics[0].partitions) == 5
        t = nested(CREATE_PARTITIONS, 3, "CreatePartitionsTopic", name="grow", count=3, assignments=None)
        assert (
            int(c.call(CREATE_PARTITIONS, 3, topics=(t,), timeout=10000, validate_only=False).results[0].error_code)
            == 37
        )
        produce(c, "grow", [Record(value=b"x" * 1000)], partition=4)
        cl = c.call(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=1)
        assert [(b.broker_id, b.port) for b in cl.brokers] == [(1, int(broker.bootstrap.rsplit(":", 1)[1]))]
        dirs = c.call(LOG_DIRS, 4, topics=None)
        assert len(dirs.results) == 1 and int(dirs.results[0].error_code) == 0
        sizes = {(t.name, p.partition_index): p.partition_size for t in dirs.results[0].topics for p in t.partitions}
        assert sizes[("grow", 4)] > 1000 and sizes[("grow", 0)] == 0


def test_configs_describe_and_incremental_alter_reach_storage(broker):
    with RawConnection(broker.bootstrap) as c:
        create(c, "cfg", 1)
        res = nested(
            DESCRIBE_CONFIGS,
            4,
            "DescribeConfigsResource",
            resource_type=2,
            resource_name="cfg",
            configuration_keys=None,
        )
        r = c.call(DESCRIBE_CONFIGS, 4, resources=(res,), include_synonyms=True, include_documentation=True).results[0]
        by = {x.name: x for x in r.configs}
        assert by["cleanup.policy"].value == "delete" and by["retention.ms"].value == "604800000"
        assert by["retention.ms"].config_source == 5  # DEFAULT_CONFIG
        # Switch the topic to LogAppendTime, then a record's stored timestamp is the broker's clock.
        cfgs = (
            nested(
                INC_ALTER,
                1,
                "AlterableConfig",
                name="message.timestamp.type",
                config_operation=0,
                value="LogAppendTime",
            ),
        )
        rs = nested(INC_ALTER, 1, "AlterConfigsResource", resource_type=2, resource_name="cfg", configs=cfgs)
        assert int(c.call(INC_ALTER, 1, resources=(rs,), validate_only=False).responses[0].error_code) == 0
        p = produce(c, "cfg", [Record(value=b"v", timestamp=1000)])
        assert abs(p.log_append_time.timestamp() - time.time()) < 60
        r = c.call(DESCRIBE_CONFIGS, 4, resources=(res,), include_synonyms=False, include_documentation=False).results[
            0
        ]
        m = {x.name: x for x in r.configs}["message.timestamp.type"]
        assert m.value == "LogAppendTime" and m.config_source == 1  # TOPIC_CONFIG
        bad = (nested(INC_ALTER, 1, "AlterableConfig", name="retention.ms", config_operation=0, value="never"),)
        rs = nested(INC_ALTER, 1, "AlterConfigsResource", resource_type=2, resource_name="cfg", configs=bad)
        assert int(c.call(INC_ALTER, 1, resources=(rs,), validate_only=False).responses[0].error_code) == 40


def test_list_offsets_delete_records_and_epochs(broker):
    with RawConnection(broker.bootstrap) as c:
        create(c, "lo", 1)
        base = int(time.time() * 1000) - 50_000
        for i in range(10):
            produce(c, "lo", [Record(value=f"{i}".encode(), timestamp=base + i * 1000 if i != 7 else base + 99_000)])
        assert list_offset(c, "lo", -2).offset == 0
        assert list_offset(c, "lo", -1).offset == 10
        mx = list_offset(c, "lo", -3)
        assert (mx.offset, mx.timestamp) == (7, base + 99_000)
        assert list_offset(c, "lo", base + 2500).offset == 3
        assert list_offset(c, "lo", base + 10**7).offset == -1
        dp = nested(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=4)
        dt = nested(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="lo", partitions=(dp,))
        r = c.call(DELETE_RECORDS, 2, topics=(dt,), timeout=10000).topics[0].partitions[0]
        assert int(r.error_code) == 0 and r.low_watermark == 4
        assert list_offset(c, "lo", -2).offset == 4
        dp = nested(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=50)
        dt = nested(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="lo", partitions=(dp,))
        assert int(c.call(DELETE_RECORDS, 2, topics=(dt,), timeout=10000).topics[0].partitions[0].error_code) == 1
        ep = nested(
            OFFSET_FOR_EPOCH, 4, "OffsetForLeaderPartition", partition=0, current_leader_epoch=0, leader_epoch=0
        )
        et = nested(OFFSET_FOR_EPOCH, 4, "OffsetForLeaderTopic", topic="lo", partitions=(ep,))
        e = c.call(OFFSET_FOR_EPOCH, 4, replica_id=-1, topics=(et,)).topics[0].partitions[0]
        assert int(e.error_code) == 0 and (e.leader_epoch, e.end_offset) == (0, 10)
    broker.restart()
    with RawConnection(broker.bootstrap) as c:
        assert list_offset(c, "lo", -2).offset == 4  # log start offset persisted


def test_idempotent_produce_dedupes_orders_and_fences(broker):
    with RawConnection(broker.bootstrap) as c:
        create(c, "idem", 1)
        r = c.call(INIT_PID, 4, transactional_id=None, transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        pid, epoch = r.producer_id, r.producer_epoch
        assert int(r.error_code) == 0 and pid >= 0 and epoch == 0
        kw = dict(producer_id=pid, producer_epoch=epoch)
        first = produce(c, "idem", [Record(value=b"a"), Record(value=b"b")], base_sequence=0, **kw)
        assert int(first.error_code) == 0 and first.base_offset == 0
        dup = produce(c, "idem", [Record(value=b"a"), Record(value=b"b")], base_sequence=0, **kw)
        assert int(dup.error_code) == 0 and dup.base_offset == 0  # acknowledged again, not re-appended
        gap = produce(c, "idem", [Record(value=b"c")], base_sequence=5, **kw)
        assert int(gap.error_code) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = produce(c, "idem", [Record(value=b"c")], base_sequence=2, **kw)
        assert int(nxt.error_code) == 0 and nxt.base_offset == 2
        bumped = c.call(
            INIT_PID, 4, transactional_id=None, transaction_timeout=60000, producer_id=pid, producer_epoch=epoch
        )
        assert bumped.producer_id == pid and bumped.producer_epoch == epoch + 1
        produce(c, "idem", [Record(value=b"d")], base_sequence=0, producer_id=pid, producer_epoch=epoch + 1)
        fenced = produce(c, "idem", [Record(value=b"e")], base_sequence=3, **kw)
        assert int(fenced.error_code) == 47  # INVALID_PRODUCER_EPOCH
        assert list_offset(c, "idem", -1).offset == 4
        other = c.call(INIT_PID, 4, transactional_id=None, transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        assert other.producer_id != pid
