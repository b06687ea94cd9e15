"""Replica assignment: Kafka's spread of leaders and followers over brokers."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from odradek.cluster.assignment import AssignmentError, assign_replicas, assign_replicas_rack_aware, rack_alternated


def test_kafkas_documented_layout_for_five_brokers():
    # AdminUtils' example: 5 brokers, 10 partitions, replication factor 3, start index 0
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert got[:5] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    assert got[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


@pytest.mark.parametrize("brokers,partitions,rf", [(3, 12, 3), (4, 50, 2), (6, 7, 3), (1, 5, 1)])
def test_leaders_spread_evenly_and_no_partition_repeats_a_broker(brokers, partitions, rf):
    got = assign_replicas(list(range(brokers)), partitions, rf, rng=random.Random(7))
    assert len(got) == partitions and all(len(set(r)) == rf for r in got)
    leaders = Counter(r[0] for r in got)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(brokers)) <= 1


def test_new_partitions_continue_the_pattern():
    first = assign_replicas([0, 1, 2], 3, 2, start_index=0)
    more = assign_replicas([0, 1, 2], 3, 2, start_index=0, first_partition=3)
    assert first + more == assign_replicas([0, 1, 2], 6, 2, start_index=0)


@pytest.mark.parametrize("partitions,rf,message", [(0, 1, "partitions"), (1, 0, "Replication"), (1, 3, "larger than")])
def test_impossible_assignments_are_refused(partitions, rf, message):
    with pytest.raises(AssignmentError, match=message):
        assign_replicas([0, 1], partitions, rf)


RACKS = {0: "r1", 1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r2", 6: "r3", 7: "r3", 8: "r3"}


def test_brokers_alternate_by_rack():
    assert rack_alternated(RACKS) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


@pytest.mark.parametrize("rf", [1, 2, 3])
def test_rack_aware_replicas_span_distinct_racks_and_leaders_spread(rf):
    got = assign_replicas_rack_aware(RACKS, 18, rf, rng=random.Random(3))
    for replicas in got:
        assert len({RACKS[b] for b in replicas}) == rf and len(set(replicas)) == rf
    assert set(Counter(r[0] for r in got).values()) == {2}


def test_more_replicas_than_racks_still_spread_over_brokers():
    got = assign_replicas_rack_aware({1: "a", 2: "a", 3: "b", 4: "b"}, 8, 3, rng=random.Random(5))
    for replicas in got:
        assert len(set(replicas)) == 3 and {"a", "b"} <= {RACKS2[b] for b in replicas}


RACKS2 = {1: "a", 2: "a", 3: "b", 4: "b"}


def test_mixed_rack_information_is_refused_and_none_means_rack_unaware():
    with pytest.raises(AssignmentError, match="rack information"):
        assign_replicas_rack_aware({1: "a", 2: None}, 1, 1)
    assert assign_replicas_rack_aware({1: None, 2: None}, 2, 2, start_index=0) == assign_replicas(
        [1, 2], 2, 2, start_index=0
    )


def test_one_rack_per_host_keeps_replicas_on_different_hosts_with_several_brokers_per_host():
    """docs/cluster.md, "Using more than one core": two brokers per host, `broker.rack` = host.
    Without racks, two brokers of one host can hold both replicas of a partition; with the
    host as rack, every partition spans both hosts and leaders still spread over all brokers."""
    hosts = {1: "host1", 2: "host1", 3: "host2", 4: "host2"}
    unaware = assign_replicas_rack_aware(dict.fromkeys(hosts), 8, 2, rng=random.Random(1))
    assert any(len({hosts[b] for b in replicas}) == 1 for replicas in unaware)
    for seed in range(20):
        got = assign_replicas_rack_aware(hosts, 8, 2, rng=random.Random(seed))
        assert all(len({hosts[b] for b in replicas}) == 2 for replicas in got)
        assert Counter(r[0] for r in got) == dict.fromkeys(hosts, 2)
