"""A whole broker in this process: requests through handlers, codecs and the real services."""

from __future__ import annotations

import asyncio
import datetime
import os

from support.batches import batch

from odradek.broker.handlers.k00_produce import _ONE_BATCH
from odradek.broker.registry import load_handlers
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import CONTROL_COMMIT, build_control_batch

MS = datetime.timedelta(milliseconds=1)


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return getattr(messages.module_of(messages.request_class(api_key, version)), class_name)(**fields)


async def create(b, name: str, partitions: int = 1, configs: dict | None = None):
    cfgs = tuple(nested(19, 7, "CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items())
    t = nested(
        19,
        7,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=-1,
        assignments=(),
        configs=cfgs,
    )
    r = await b.call(19, 7, topics=(t,), timeout=1000 * MS, validate_only=False)
    assert r.topics[0].error_code == 0, r.topics[0].error_message
    return r.topics[0]


async def produce(b, topic: str, records: bytes, acks: int = -1):
    pd = nested(0, 9, "PartitionProduceData", index=0, records=records)
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    return (await b.call(0, 9, transactional_id=None, acks=acks, timeout=1000 * MS, topic_data=(td,))).responses[0]


def test_api_versions_come_from_the_registry_and_name_the_client(inprocess):
    async def main():
        async with inprocess() as b:
            conn = b.connection()
            r = await b.call(18, 3, connection=conn, client_software_name="odradek-test", client_software_version="1.0")
            assert r.error_code == 0
            served = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
            assert served == {h.api_key: (h.advertised_min, h.max_version) for h in load_handlers().values()}
            assert (conn.client_software_name, conn.client_software_version) == ("odradek-test", "1.0")

    asyncio.run(main())


def test_topics_are_created_and_deleted_through_the_metadata_store(inprocess, tmp_path):
    async def main():
        async with inprocess() as b:
            info = await create(b, "orders", 3)
            rm = b.services.replica_manager
            assert sorted(rm.partitions) == [("orders", 0), ("orders", 1), ("orders", 2)]
            assert all(rm.partitions[k].is_leader for k in rm.partitions)
            assert os.path.isdir(tmp_path / "data" / "orders-2")
            r = await b.call(
                20, 6, topics=(nested(20, 6, "DeleteTopicState", name=None, topic_id=info.topic_id),), timeout=1000 * MS
            )
            assert r.responses[0].error_code == 0 and r.responses[0].name == "orders"
            assert not rm.partitions and "orders" not in b.services.snapshot.topics
            assert not os.path.isdir(tmp_path / "data" / "orders-2")

    asyncio.run(main())


def test_a_waiting_fetch_is_answered_when_records_become_visible(inprocess):
    async def main():
        async with inprocess() as b:
            info = await create(b, "events")
            fp = nested(
                1,
                16,
                "FetchPartition",
                partition=0,
                current_leader_epoch=0,
                fetch_offset=0,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
            ft = nested(1, 16, "FetchTopic", topic_id=info.topic_id, partitions=(fp,))
            fetch = asyncio.ensure_future(
                b.call(
                    1,
                    16,
                    max_wait=5000 * MS,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=(ft,),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            await asyncio.sleep(0.05)
            assert not fetch.done() and len(b.services.replica_manager.fetch_purgatory) == 1
            records = batch(2)
            p = await produce(b, "events", records)
            assert (p.partition_responses[0].error_code, p.partition_responses[0].base_offset) == (0, 0)
            r = await asyncio.wait_for(fetch, 1)
            part = r.responses[0].partitions[0]
            assert part.error_code == 0 and part.high_watermark == 2 and len(part.records) == len(records)

    asyncio.run(main())


def test_min_insync_replicas_above_the_isr_refuses_acks_all_only(inprocess):
    async def main():
        async with inprocess() as b:
            await create(b, "strict", configs={"min.insync.replicas": "2"})
            r = await produce(b, "strict", batch(1), acks=-1)
            assert r.partition_responses[0].error_code == ErrorCode.not_enough_replicas
            r = await produce(b, "strict", batch(1), acks=1)
            assert (r.partition_responses[0].error_code, r.partition_responses[0].base_offset) == (0, 0)

    asyncio.run(main())


def test_a_produce_partition_takes_one_client_batch(inprocess):
    """Kafka's LogValidator: exactly one batch per partition from a client, never a control batch
    (INVALID_RECORD, nothing written); a batch cut short is storage's to refuse (CORRUPT_MESSAGE)."""

    async def main():
        async with inprocess() as b:
            await create(b, "one")
            two = batch(1) + batch(1)
            r = (await produce(b, "one", two)).partition_responses[0]
            assert (r.error_code, r.error_message) == (ErrorCode.invalid_record, _ONE_BATCH)
            marker = build_control_batch(CONTROL_COMMIT, producer_id=5, producer_epoch=0, timestamp=1)
            r = (await produce(b, "one", marker)).partition_responses[0]
            assert r.error_code == ErrorCode.invalid_record and "control records" in r.error_message
            r = (await produce(b, "one", batch(1)[:-1])).partition_responses[0]
            assert r.error_code == ErrorCode.corrupt_message
            assert b.services.replica_manager.get_partition("one", 0).log.log_end_offset == 0
            r = (await produce(b, "one", batch(2))).partition_responses[0]
            assert (r.error_code, r.base_offset) == (0, 0)

    asyncio.run(main())


def test_dynamic_cleaner_settings_reach_the_log_manager(inprocess):
    """The log.cleaner.* settings are dynamic, as in Kafka: an
    IncrementalAlterConfigs on the broker changes what the log manager uses; a read-only
    setting is refused with INVALID_REQUEST and changes nothing."""

    async def main():
        async with inprocess() as b:

            async def alter(name: str, value: str) -> int:
                cfg = nested(44, 1, "AlterableConfig", name=name, config_operation=0, value=value)
                res = nested(44, 1, "AlterConfigsResource", resource_type=4, resource_name="", configs=(cfg,))
                return (await b.call(44, 1, resources=(res,), validate_only=False)).responses[0].error_code

            logs = b.services.replica_manager.logs
            assert await alter("log.cleaner.backoff.ms", "250") == 0 and logs.cleaner_backoff_ms == 250
            assert await alter("log.cleaner.dedupe.buffer.size", "1048576") == 0
            assert await alter("log.cleaner.io.buffer.load.factor", "0.5") == 0
            assert (logs.cleaner_dedupe_buffer_size, logs.cleaner_io_buffer_load_factor) == (1048576, 0.5)
            # used only at start-up, and dynamic settings are not kept across a restart: never dynamic here
            assert await alter("num.recovery.threads.per.data.dir", "3") == ErrorCode.invalid_request
            assert await alter("num.partitions", "7") == ErrorCode.invalid_request
            assert b.services.config["num.partitions"] != 7

    asyncio.run(main())


def _alter_broker(b, entity: str, **settings: str):
    mod = messages.module_of(messages.request_class(44, 1))
    configs = tuple(mod.AlterableConfig(name=k, config_operation=0, value=v) for k, v in settings.items())
    res = mod.AlterConfigsResource(resource_type=4, resource_name=entity, configs=configs)
    return b.call(44, 1, resources=(res,), validate_only=False)


async def _describe_broker(b, name: str | None, resource_name: str = "1"):
    """The one entry of `name` (all entries when None) of a broker resource, or its result when in error."""
    mod = messages.module_of(messages.request_class(32, 4))
    keys = None if name is None else (name,)
    res = mod.DescribeConfigsResource(resource_type=4, resource_name=resource_name, configuration_keys=keys)
    r = await b.call(32, 4, resources=(res,), include_synonyms=True, include_documentation=False)
    result = r.results[0]
    if result.error_code or name is None:
        return result
    (entry,) = result.configs
    return entry


def test_the_default_broker_resource_lists_the_cluster_wide_dynamic_defaults_only(inprocess):
    """DescribeConfigs of broker "" as Kafka's ConfigHelper: only the settings with a
    cluster-wide dynamic default, with that layer alone among the synonyms;
    another broker's id and a name that is not a number: INVALID_REQUEST with Kafka's message."""

    async def main():
        async with inprocess(**{"node.id": "1"}) as b:
            assert (await _describe_broker(b, None, "")).configs == ()
            assert (await _alter_broker(b, "", **{"log.cleaner.backoff.ms": "500"})).responses[0].error_code == 0
            assert (await _alter_broker(b, "1", **{"log.cleaner.backoff.ms": "777"})).responses[0].error_code == 0
            (e,) = (await _describe_broker(b, None, "")).configs
            assert (e.name, e.value, e.config_source) == ("log.cleaner.backoff.ms", "500", 3)
            # its cluster-wide layer only, no default: Kafka 3.9 field by field
            # (tests/reference/test_diff_describe_broker_configs.py)
            assert [(s.value, s.source) for s in e.synonyms] == [("500", 3)]
            assert (await _describe_broker(b, "log.cleaner.backoff.ms")).value == "777"
            other = await _describe_broker(b, None, "7")
            assert other.error_code == ErrorCode.invalid_request
            assert other.error_message == "Unexpected broker id, expected 1 or empty string, but received 7"
            bad = await _describe_broker(b, None, "one")
            assert bad.error_code == ErrorCode.invalid_request
            assert bad.error_message == "Broker id must be an integer, but it is: one"
            mod = messages.module_of(messages.request_class(32, 4))
            loggers = [mod.DescribeConfigsResource(resource_type=8, resource_name=n) for n in ("", "7", "1")]
            r = await b.call(32, 4, resources=tuple(loggers), include_synonyms=False, include_documentation=False)
            assert [(x.error_code, x.error_message) for x in r.results] == [
                (ErrorCode.invalid_request, "Broker id must not be empty"),
                (ErrorCode.invalid_request, "Unexpected broker id, expected 1 but received 7"),
                (0, None),
            ]

    asyncio.run(main())


def test_dynamic_broker_settings_are_kept_across_restarts(inprocess):
    async def main():
        async with inprocess(**{"node.id": "1"}) as b:
            r = await _alter_broker(b, "", **{"log.retention.ms": "3600000"})
            assert r.responses[0].error_code == 0
            r = await _alter_broker(b, "1", **{"log.cleaner.backoff.ms": "777"})
            assert r.responses[0].error_code == 0
            assert b.services.replica_manager.logs.cleaner_backoff_ms == 777
        async with inprocess(**{"node.id": "1"}) as b:  # restarted on the same directory
            e = await _describe_broker(b, "log.retention.ms")
            assert (e.value, e.config_source) == ("3600000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
            e = await _describe_broker(b, "log.cleaner.backoff.ms")
            assert (e.value, e.config_source) == ("777", 2)  # DYNAMIC_BROKER_CONFIG
            assert [(s.value, s.source) for s in e.synonyms] == [("777", 2), ("15000", 5)]
            assert b.services.replica_manager.logs.cleaner_backoff_ms == 777
            # removing the per-broker value falls back to the default layer
            mod = messages.module_of(messages.request_class(44, 1))
            op = mod.AlterableConfig(name="log.cleaner.backoff.ms", config_operation=1, value=None)
            res = mod.AlterConfigsResource(resource_type=4, resource_name="1", configs=(op,))
            await b.call(44, 1, resources=(res,), validate_only=False)
            e = await _describe_broker(b, "log.cleaner.backoff.ms")
            assert (e.value, e.config_source) == ("15000", 5)

    asyncio.run(main())


async def session_fetch(b, topic_id, session_id: int, epoch: int, partitions: dict[int, tuple[int, int]], **kw):
    """Fetch v16 in a session: `partitions` maps each partition named to (fetch offset, last
    fetched epoch); the answer's session id and its partitions by index."""
    fps = tuple(
        nested(
            1,
            16,
            "FetchPartition",
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=last_epoch,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p, (offset, last_epoch) in partitions.items()
    )
    topics = (nested(1, 16, "FetchTopic", topic_id=topic_id, partitions=fps),) if fps else ()
    fields = {"max_wait": 0 * MS, "min_bytes": 0, "max_bytes": 1 << 20, **kw}
    r = await b.call(
        1,
        16,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
        **fields,
    )
    assert r.error_code == 0
    return r.session_id, {p.partition_index: p for t in r.responses for p in t.partitions}


def test_in_an_incremental_fetch_session_a_partition_that_returned_records_is_read_last(inprocess):
    """As Kafka's FetchSession: with a response too small for both partitions' records (the
    first read gets one batch, the response limit then stops the rest), the partition that
    returned records moves to the end of the session, so the other gets its turn next."""

    async def main():
        async with inprocess() as b:
            info = await create(b, "rot", 2)
            for p in (0, 1):
                pd = nested(0, 9, "PartitionProduceData", index=p, records=batch(2))
                td = nested(0, 9, "TopicProduceData", name="rot", partition_data=(pd,))
                r = await b.call(0, 9, transactional_id=None, acks=-1, timeout=1000 * MS, topic_data=(td,))
                assert r.responses[0].partition_responses[0].error_code == 0

            async def fetch(session_id: int, epoch: int, partitions: tuple[int, ...]):
                sid, answered = await session_fetch(
                    b, info.topic_id, session_id, epoch, {p: (0, -1) for p in partitions}, max_bytes=1
                )
                return sid, [i for i, p in answered.items() if p.records]

            sid, got = await fetch(0, 0, (0, 1))  # full: opens the session, reads 0 then 1
            assert sid and got == [0]
            _, got = await fetch(sid, 1, ())  # incremental, nothing changed: 0 read first again
            assert got == [0]
            _, got = await fetch(sid, 2, ())  # 0 returned records: now 1 is read first
            assert got == [1]
            _, got = await fetch(sid, 3, ())
            assert got == [0]

    asyncio.run(main())


def test_an_incremental_fetch_session_answers_a_diverging_epoch_every_time(inprocess):
    """As Kafka's FetchSession: a partition whose read answers a diverging epoch (KIP-320) is in
    every incremental response that reads it so, not only in the first: a follower whose
    truncation did not yet reach where the logs meet asks again, in the same position, and
    must hear it again (else it waits for news that never come, out of the ISR for good)."""

    async def main():
        async with inprocess() as b:
            info = await create(b, "div", 2)
            for p in (0, 1):
                pd = nested(0, 9, "PartitionProduceData", index=p, records=batch(3))
                td = nested(0, 9, "TopicProduceData", name="div", partition_data=(pd,))
                r = await b.call(0, 9, transactional_id=None, acks=-1, timeout=1000 * MS, topic_data=(td,))
                assert r.responses[0].partition_responses[0].error_code == 0
            # partition 0 as a replica whose log of epoch 0 goes on past this leader's (to 5):
            # diverging at the leader's end of epoch 0; partition 1 caught up, idle
            sid, answered = await session_fetch(b, info.topic_id, 0, 0, {0: (5, 0), 1: (3, 0)})
            assert sid and set(answered) == {0, 1}

            def diverging(p) -> tuple[int, int]:
                return (p.diverging_epoch.epoch, p.diverging_epoch.end_offset)

            assert diverging(answered[0]) == (0, 3) and not answered[0].records
            for epoch in (1, 2):  # nothing changed in the request: partition 0 diverges still
                _, answered = await session_fetch(b, info.topic_id, sid, epoch, {})
                assert set(answered) == {0}, epoch
                assert diverging(answered[0]) == (0, 3)
            # in the position the answer points to nothing diverges, and nothing is new
            _, answered = await session_fetch(b, info.topic_id, sid, 3, {0: (3, 0)})
            assert answered == {}
            pd = nested(0, 9, "PartitionProduceData", index=0, records=batch(1))
            td = nested(0, 9, "TopicProduceData", name="div", partition_data=(pd,))
            r = await b.call(0, 9, transactional_id=None, acks=-1, timeout=1000 * MS, topic_data=(td,))
            assert r.responses[0].partition_responses[0].error_code == 0
            _, answered = await session_fetch(b, info.topic_id, sid, 4, {})
            assert set(answered) == {0} and diverging(answered[0]) == (-1, -1) and answered[0].records

    asyncio.run(main())
