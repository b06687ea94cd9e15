"""A new snapshot rebuilds the topics that changed, not every partition of the cluster.

Issue 28: creating 10,000 partitions on three brokers grew faster than linear. Every watch
event made each broker build its snapshot from the whole cache (`build_snapshot`: a
PartitionInfo for every partition), compare it with the previous one and walk both for the
changed partitions: O(all partitions) per change. The cache now numbers each topic's changes
(`CacheView.topic_gens`) and `build_snapshot` takes the previous call's unchanged topics as
they were, the same objects, so the comparisons skip them too.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from support.fake_zk import FakeZk

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import BrokerInfo, MetadataDelta
from odradek.cluster.zk_cache import CachedState, CacheView, ZkCache
from odradek.cluster.zookeeper import BuiltTopic, build_snapshot


def view(n: int = 4) -> CacheView:
    v = CacheView(cluster_id="c", controller=1)
    v.brokers = {b: BrokerInfo(b, f"h{b}", 9092) for b in (1, 2, 3)}
    v.broker_sessions = {1: 11, 2: 12, 3: 13}
    for g, name in enumerate(("a", "b", "c")):
        v.topics[name] = L.TopicAssignment(uuid.uuid4(), {p: (1, 2, 3) for p in range(n)}, {}, {})
        v.topic_gens[name] = g + 1
        for p in range(n - 1):  # the last partition has no state yet
            v.states[(name, p)] = CachedState(L.PartitionState(1, 0, (1, 2, 3), 1), 0)
    v.topic_configs["b"] = {"retention.ms": "1000"}
    return v


def test_unchanged_topics_are_the_previous_snapshots_and_the_result_is_a_fresh_builds():
    built: dict[str, BuiltTopic] = {}
    v = view()
    s1 = build_snapshot(v, None, (1, 11), built)
    assert s1 == build_snapshot(v, None, (1, 11))

    # a state of topic a changes (the cache gives a a new number): only a is built again
    v.states[("a", 3)] = CachedState(L.PartitionState(2, 0, (2, 3), 1), 0)
    v.topic_gens["a"] = 10
    s2 = build_snapshot(v, None, (1, 11), built)
    assert s2 == build_snapshot(v, None, (1, 11))
    assert s2.topics["a"] is not s1.topics["a"] and s2.topics["a"].partitions[3].leader == 2
    assert s2.topics["b"] is s1.topics["b"] and s2.topics["c"] is s1.topics["c"]
    assert [(t.name, p.partition) for t, p in MetadataDelta(s1, s2).changed_partitions()] == [("a", 3)]

    # a change the cache did not number is not seen: the number is what tells
    v.states[("c", 0)] = CachedState(L.PartitionState(3, 1, (3,), 1), 1)
    assert build_snapshot(v, None, (1, 11), built).topics["c"] is s1.topics["c"]

    # configs changed: that topic again
    v.topic_configs["b"] = {"retention.ms": "2000"}
    s3 = build_snapshot(v, None, (1, 11), built)
    assert s3.topics["b"].configs == {"retention.ms": "2000"} and s3.topics["a"] is s2.topics["a"]

    # a broker gone: every partition names it offline, every topic is built again
    del v.brokers[3]
    s4 = build_snapshot(v, None, (1, 11), built)
    assert s4 == build_snapshot(v, None, (1, 11))
    assert all(p.offline_replicas == (3,) for t in s4.topics.values() for p in t.partitions)

    # a topic being deleted is left out, and forgotten
    v.deleting = frozenset({"a"})
    s5 = build_snapshot(v, None, (1, 11), built)
    assert "a" not in s5.topics and "a" not in built and s5.topics["b"] is s4.topics["b"]

    # a view without numbers (read once, `read_view`) is built in full
    v2 = view()
    v2.topic_gens.clear()
    assert build_snapshot(v2, None, None, built) == build_snapshot(v2)


def test_the_cache_numbers_a_topic_anew_with_each_state_of_its_partitions():
    cache = ZkCache(FakeZk(), 1, "PLAINTEXT", lambda: None)
    state = L.encode_partition_state(L.PartitionState(1, 0, (1, 2), 1))
    seen = []
    for version in range(3):
        cache._state_watcher("a", 0)(state, SimpleNamespace(version=version))
        seen.append(cache.view().topic_gens["a"])
    cache._state_watcher("a", 0)(None, None)  # deleted
    seen.append(cache.view().topic_gens["a"])
    assert len(set(seen)) == 4, seen
    assert "b" not in cache.view().topic_gens
