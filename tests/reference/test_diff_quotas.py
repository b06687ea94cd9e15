"""DescribeClientQuotas (48) and AlterClientQuotas (49), Apache Kafka 3.9 in ZooKeeper mode (the
mode odradek's cluster follows) and odradek side by side: the same requests by hand, the same
answers field by field, error messages included (per entity for alterations, per request for
a refused filter), validate_only changing nothing, removals; v0 and v1."""

from __future__ import annotations

import time

import pytest
from support.diff import Pair, Target
from support.proto import V_PRODUCE, batch, create_topic, fetch, produce_ok
from support.raw import nested

QUOTAS = [
    ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
    ({"user": None}, {"consumer_byte_rate": 2048.0}),
    ({"client-id": "app"}, {"producer_byte_rate": 4096.0}),
    ({"user": "alice", "client-id": None}, {"controller_mutation_rate": 10.0}),
    ({"user": None, "client-id": None}, {"consumer_byte_rate": 100.0}),
    ({"user": "bob", "client-id": "app"}, {"request_percentage": 300.0}),
]
REFUSED = [
    ({"user": ""}, {"producer_byte_rate": 1.0}),
    ({"user": "carol"}, {"no_such_quota": 1.0}),
    ({"user": "dave"}, {"consumer_byte_rate": 1.5}),
    ({"group": "g"}, {"producer_byte_rate": 1.0}),
    ({}, {"producer_byte_rate": 1.0}),
]


def entry(v: int, entity: dict, ops: dict):
    return nested(
        49,
        v,
        "EntryData",
        entity=tuple(nested(49, v, "EntityData", entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=tuple(nested(49, v, "OpData", key=k, value=x or 0.0, remove=x is None) for k, x in ops.items()),
    )


def alter(c, v: int, entries, validate_only: bool = False) -> list:
    r = c.call(49, v, entries=tuple(entry(v, e, o) for e, o in entries), validate_only=validate_only)
    return sorted(
        (sorted((x.entity_type, x.entity_name or "") for x in e.entity), int(e.error_code), e.error_message)
        for e in r.entries
    )


def describe(c, v: int, components=(), strict: bool = False):
    comps = tuple(nested(48, v, "ComponentData", entity_type=t, match_type=m, match=n) for t, m, n in components)
    r = c.call(48, v, components=comps, strict=strict)
    if int(r.error_code):
        return int(r.error_code), r.error_message, r.entries
    return sorted(
        (
            sorted((e.entity_type, e.entity_name or "<default>") for e in x.entity),
            sorted((val.key, val.value) for val in x.values),
        )
        for x in r.entries
    )


@pytest.fixture
def pair39(kafka_factory, broker_factory) -> Pair:
    k = kafka_factory(line="3.9", zookeeper=True)
    o = broker_factory()
    return Pair(Target("kafka", k.bootstrap, k.version), Target("odradek", o.bootstrap, "odradek"))


def test_alter_and_describe_client_quotas_as_kafka_3_9(pair39):
    def scenario(t: Target):
        with t.raw() as c:
            out = {"set": alter(c, 1, QUOTAS), "refused": alter(c, 1, REFUSED)}
            out["validate_only"] = alter(c, 0, [({"user": "erin"}, {"producer_byte_rate": 5.0})], validate_only=True)
            out["all"] = describe(c, 1)
            out["strict_none"] = describe(c, 1, strict=True)
            out["alice"] = describe(c, 1, [("user", 0, "alice")])
            out["alice_strict"] = describe(c, 1, [("user", 0, "alice")], strict=True)
            out["default_user"] = describe(c, 1, [("user", 1, None)])
            out["exact_null"] = describe(c, 0, [("user", 0, None)], strict=True)  # Kafka: UNKNOWN_SERVER_ERROR
            out["any_user_strict"] = describe(c, 1, [("user", 2, None)], strict=True)
            out["any_client"] = describe(c, 1, [("client-id", 2, None)])
            out["user_and_client"] = describe(c, 1, [("user", 2, None), ("client-id", 1, None)])
            out["nobody"] = describe(c, 1, [("user", 0, "nobody")])
            out["ip"] = describe(c, 1, [("ip", 2, None)])
            out["duplicate"] = describe(c, 1, [("user", 0, "a"), ("user", 0, "b")])
            out["custom"] = describe(c, 1, [("topic", 0, "a")])
            out["empty_type"] = describe(c, 1, [("", 0, "a")])
            out["ip_and_user"] = describe(c, 1, [("ip", 2, None), ("user", 2, None)])
            out["removed"] = alter(c, 1, [({"user": "alice"}, {"request_percentage": None})])
            out["after_removal"] = describe(c, 1, [("user", 0, "alice")], strict=True)
            return out

    got = pair39.same(scenario)
    assert got["refused"] and all(code == 42 for _e, code, _m in got["refused"])
    assert len(got["all"]) == len(QUOTAS) and got["strict_none"] == []


def test_a_request_quota_throttle_is_in_produce_and_fetch_answers_as_kafka_3_9(pair39):
    """request_percentage (0.001 % of a thread: far less than any request costs) for this client
    id: Produce answers carry the request throttle in throttle_time_ms and so do Fetch answers,
    which come back empty (Kafka's getThrottledResponse: the bytes are not sent, whichever quota
    throttled)."""

    def scenario(t: Target):
        with t.raw() as c:
            create_topic(c, "rq")
            produce_ok(c, "rq", [batch((b"k", b"v" * 100))])
            alter(c, 1, [({"client-id": "raw-test"}, {"request_percentage": 0.001})])
            deadline = time.monotonic() + 15
            while True:  # Kafka applies the quota from its change notification
                part = nested(0, V_PRODUCE, "PartitionProduceData", index=0, records=batch((b"k", b"v")))
                topic = nested(0, V_PRODUCE, "TopicProduceData", name="rq", partition_data=(part,))
                r = c.call(0, V_PRODUCE, transactional_id=None, acks=1, timeout=10000, topic_data=(topic,))
                if r.throttle_time.total_seconds() > 0 or time.monotonic() > deadline:
                    break
            produced = (int(r.responses[0].partition_responses[0].error_code), r.throttle_time.total_seconds() > 0)
            f = fetch(c, [("rq", 0, 0, 1 << 20)])
            fetched = (
                int(f.error_code),
                0 < f.throttle_time.total_seconds() <= 1,  # capped at one quota window (1 s)
                [(x.topic, [(int(p.error_code), len(p.records or b"")) for p in x.partitions]) for x in f.responses],
            )
            return {"produce": produced, "fetch": fetched}

    got = pair39.same(scenario)
    assert got == {"produce": [0, True], "fetch": [0, True, []]}
