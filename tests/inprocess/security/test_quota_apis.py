"""DescribeClientQuotas (48) and AlterClientQuotas (49) on one broker in this process: quotas set
per user, client id, user's client id and defaults, described by filter, kept beside a user's
SCRAM credentials and across a restart (the metadata file), validate_only changing nothing,
Kafka's per-entry errors, and both APIs authorized on the cluster when an authorizer is set."""

from __future__ import annotations

import asyncio
import datetime

from support.inprocess import InProcessBroker

from odradek.protocol import messages

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}


def _entry(entity: dict[str, str | None], ops: dict[str, float | None], version: int = 1):
    m = messages.module_of(messages.request_class(49, version))
    return m.EntryData(
        entity=tuple(m.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=tuple(m.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()),
    )


async def alter(b: InProcessBroker, *entries, validate_only: bool = False, version: int = 1, **kw) -> list:
    r = await b.call(49, version, entries=entries, validate_only=validate_only, **kw)
    return [(int(e.error_code), e.error_message, {x.entity_type: x.entity_name for x in e.entity}) for e in r.entries]


async def describe(b: InProcessBroker, *components: tuple[str, int, str | None], strict=False, version=1, **kw):
    m = messages.module_of(messages.request_class(48, version))
    comps = tuple(m.ComponentData(entity_type=t, match_type=mt, match=n) for t, mt, n in components)
    r = await b.call(48, version, components=comps, strict=strict, **kw)
    if int(r.error_code):
        return int(r.error_code), r.error_message, r.entries
    return sorted(
        (
            tuple(sorted((e.entity_type, e.entity_name or "<default>") for e in x.entity)),
            {v.key: v.value for v in x.values},
        )
        for x in r.entries
    )


def test_quotas_are_set_described_and_kept_across_a_restart(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path) as b:
            ok = await alter(
                b,
                _entry({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 50.5}),
                _entry({"user": None}, {"consumer_byte_rate": 2048.0}),
                _entry({"client-id": "app"}, {"producer_byte_rate": 4096.0}),
                _entry({"user": "alice", "client-id": None}, {"controller_mutation_rate": 10.0}),
            )
            assert [e[:2] for e in ok] == [(0, None)] * 4
            everything = await describe(b)
            assert everything == [
                ((("client-id", "<default>"), ("user", "alice")), {"controller_mutation_rate": 10.0}),
                ((("client-id", "app"),), {"producer_byte_rate": 4096.0}),
                ((("user", "<default>"),), {"consumer_byte_rate": 2048.0}),
                ((("user", "alice"),), {"producer_byte_rate": 1024.0, "request_percentage": 50.5}),
            ]
            assert await describe(b, ("user", 0, "alice"), strict=True) == [everything[3]]
            assert await describe(b, ("user", 1, None)) == [everything[2]]
            assert await describe(b, ("client-id", 2, None)) == everything[:2]
            assert await describe(b, ("user", 0, "bob")) == []
            assert b.services.snapshot.user_configs["alice"] == {
                "producer_byte_rate": "1024",
                "request_percentage": "50.5",
            }
            # validate_only changes nothing; a removal removes the key only
            await alter(b, _entry({"user": "alice"}, {"producer_byte_rate": 1.0}), validate_only=True)
            await alter(b, _entry({"user": "alice"}, {"request_percentage": None}))
            assert await describe(b, ("user", 0, "alice"), strict=True) == [
                ((("user", "alice"),), {"producer_byte_rate": 1024.0})
            ]
        async with InProcessBroker(tmp_path) as b:  # the metadata file kept them
            assert len(await describe(b)) == 4

    asyncio.run(main())


def test_a_user_named_default_is_not_the_default_user(tmp_path):
    """Kafka keeps the two apart (the name sanitized, %3Cdefault%3E; the default `<default>`)."""

    async def main():
        async with InProcessBroker(tmp_path) as b:
            await alter(b, _entry({"user": None}, {"producer_byte_rate": 1000.0}))
            await alter(b, _entry({"user": "<default>"}, {"producer_byte_rate": 7.0}))
            named = await describe(b, ("user", 0, "<default>"), strict=True)
            default = await describe(b, ("user", 1, None), strict=True)
            assert [v for _e, v in named] == [{"producer_byte_rate": 7.0}]
            assert [v for _e, v in default] == [{"producer_byte_rate": 1000.0}]
        async with InProcessBroker(tmp_path) as b:  # the metadata file kept them apart
            assert [v for _e, v in await describe(b, ("user", 0, "<default>"), strict=True)] == [
                {"producer_byte_rate": 7.0}
            ]
            assert [v for _e, v in await describe(b, ("user", 1, None), strict=True)] == [
                {"producer_byte_rate": 1000.0}
            ]

    asyncio.run(main())


def test_kafkas_errors_per_entry_and_per_request(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path) as b:
            got = await alter(
                b,
                _entry({"user": "a"}, {"producer_byte_rate": 1.5}),
                _entry({"user": "b"}, {"nope": 1.0}),
                _entry({"group": "g"}, {"producer_byte_rate": 1.0}),
                _entry({"user": ""}, {"producer_byte_rate": 1.0}),
                _entry({}, {"producer_byte_rate": 1.0}),
                _entry({"user": "c"}, {"producer_byte_rate": 7.0}),
            )
            assert [e[:2] for e in got] == [
                (42, "Configuration producer_byte_rate must be a LONG value"),
                (42, "Invalid configuration key nope"),
                (42, "Unhandled client quota entity type: group"),
                (42, "Empty user not supported"),
                (42, "Invalid empty client quota entity"),
                (0, None),
            ]
            assert await describe(b) == [((("user", "c"),), {"producer_byte_rate": 7.0})]
            assert await describe(b, ("user", 0, "a"), ("user", 0, "b")) == (
                42,
                "Duplicate user filter component entity type",
                None,
            )
            assert (await describe(b, ("topic", 0, "a")))[:2] == (35, "Custom entity type 'topic' not supported")

    asyncio.run(main())


def test_an_authorizer_requires_cluster_describe_configs_and_alter_configs(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path, AUTHORIZER) as b:
            bob = b.connection()
            bob.principal = "User:bob"
            got = await alter(b, _entry({"user": "x"}, {"producer_byte_rate": 1.0}), connection=bob)
            assert [e[:2] for e in got] == [(31, "Cluster authorization failed.")]
            assert await describe(b, connection=bob) == (31, "Cluster authorization failed.", None)
            admin = b.connection()
            admin.principal = "User:admin"
            got = await alter(b, _entry({"user": "x"}, {"producer_byte_rate": 1.0}), connection=admin)
            assert [e[:2] for e in got] == [(0, None)]
            assert await describe(b, connection=admin) == [((("user", "x"),), {"producer_byte_rate": 1.0})]

    asyncio.run(main())


def _topic(name: str, partitions: int, version: int = 7):
    m = messages.module_of(messages.request_class(19, version))
    return m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=(), configs=())


def test_controller_mutation_rate_refuses_topics_past_the_burst_with_throttling_quota_exceeded(tmp_path):
    async def main():
        ms = datetime.timedelta(milliseconds=1)
        async with InProcessBroker(tmp_path) as b:
            # 1 partition/s: a burst of 11 (controller.quota.window.num x 1 s)
            await alter(b, _entry({"client-id": "ops"}, {"controller_mutation_rate": 1.0}))
            conn = b.connection()
            r = await b.call(19, 7, topics=(_topic("a", 10), _topic("b", 5), _topic("c", 1)), timeout=5000 * ms,
                             validate_only=False, client_id="ops", connection=conn)  # fmt: skip
            assert [(t.name, int(t.error_code), t.error_message) for t in r.topics] == [
                ("a", 0, None),
                ("b", 0, None),  # the bucket was not below zero before it: taken, now at -4
                ("c", 89, "The throttling quota has been exceeded."),
            ]
            assert 3000 <= conn.throttle_ms <= 4000  # for the connection to apply (muting, throttle_time_ms)
            assert "c" not in b.services.snapshot.topics
            # another client id is not limited; DeleteTopics v5+ and CreatePartitions v3+ are refused too
            r = await b.call(19, 7, topics=(_topic("d", 1),), timeout=5000 * ms, validate_only=False, client_id="x")
            assert int(r.topics[0].error_code) == 0
            m20 = messages.module_of(messages.request_class(20, 6))
            d = await b.call(20, 6, topics=(m20.DeleteTopicState(name="a", topic_id=None),), timeout=5000 * ms,
                             client_id="ops")  # fmt: skip
            assert int(d.responses[0].error_code) == 89
            m37 = messages.module_of(messages.request_class(37, 3))
            p = await b.call(37, 3, topics=(m37.CreatePartitionsTopic(name="d", count=2, assignments=None),),
                             timeout=5000 * ms, validate_only=False, client_id="ops")  # fmt: skip
            assert int(p.results[0].error_code) == 89
            # CreateTopics v5 is permissive: created, the client throttled
            conn = b.connection()
            r = await b.call(19, 5, topics=(_topic("e", 1, 5),), timeout=5000 * ms, validate_only=False,
                             client_id="ops", connection=conn)  # fmt: skip
            assert int(r.topics[0].error_code) == 0 and conn.throttle_ms > 0

    asyncio.run(main())
