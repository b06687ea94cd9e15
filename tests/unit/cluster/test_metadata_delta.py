"""MetadataDelta.changed_partitions: what a metadata listener applies. A topic the new snapshot
keeps as it was (the same object) is skipped whole, not compared partition by partition: with
100 topics of 1,000 partitions every CreateTopics compared all 100,000 (issue 28)."""

from __future__ import annotations

import dataclasses
import uuid

from odradek.cluster.metadata import ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo


def _topic(name: str, n: int, epoch: int = 0) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), tuple(PartitionInfo(p, 1, (1,), (1,), epoch) for p in range(n)))


def _snap(*topics: TopicInfo) -> ClusterSnapshot:
    return ClusterSnapshot("c", 1, (), {t.name: t for t in topics})


class _Counting(tuple):
    """A partitions tuple that counts how often it is read."""

    reads = 0

    def __getitem__(self, i):
        _Counting.reads += 1
        return super().__getitem__(i)


def test_only_new_and_changed_partitions_and_kept_topics_are_not_walked():
    a, b = _topic("a", 3), _topic("b", 4)
    kept = dataclasses.replace(a, partitions=_Counting(a.partitions))
    before = _snap(kept, b)
    b2 = dataclasses.replace(
        b, partitions=b.partitions[:2] + (dataclasses.replace(b.partitions[2], leader_epoch=1),) + b.partitions[3:]
    )
    c = _topic("c", 2)
    after = _snap(kept, b2, c)
    _Counting.reads = 0
    got = [(t.name, p.partition) for t, p in MetadataDelta(before, after).changed_partitions()]
    assert got == [("b", 2), ("c", 0), ("c", 1)]
    assert _Counting.reads == 0


def test_a_topic_recreated_under_its_name_is_new_whole():
    a = _topic("a", 2)
    a2 = _topic("a", 2)  # another id
    got = [(t.topic_id, p.partition) for t, p in MetadataDelta(_snap(a), _snap(a2)).changed_partitions()]
    assert got == [(a2.topic_id, 0), (a2.topic_id, 1)]
