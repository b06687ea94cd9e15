"""The client's metadata never goes back to an older leader epoch of a partition (KIP-320, as
Java's Metadata.updateLatestMetadata): simulator seed 16493, where a leader deposed while cut
from ZooKeeper answered Metadata naming itself, the consumer fetched its position from it, got
OFFSET_OUT_OF_RANGE from its shorter log and reset to the earliest offset."""

from __future__ import annotations

import uuid

from odradek.client.cluster import ClusterMetadata, PartitionInfo, TopicInfo, _keep_newer_leaders


def _md(leader: int, epoch: int, topic_id=None) -> ClusterMetadata:
    md = ClusterMetadata()
    ti = TopicInfo("t", topic_id)
    ti.partitions[0] = PartitionInfo("t", 0, leader, epoch, (1, 2, 3), (1, 2))
    ti.partitions[1] = PartitionInfo("t", 1, 2, 0, (1, 2, 3), (1, 2))
    md.topics["t"] = ti
    return md


def test_a_partition_answered_with_an_older_leader_epoch_keeps_the_newer_leader():
    known, stale = _md(leader=1, epoch=1), _md(leader=3, epoch=0)
    _keep_newer_leaders(known, stale)
    assert (stale.topics["t"].partitions[0].leader, stale.topics["t"].partitions[0].leader_epoch) == (1, 1)
    assert stale.topics["t"].partitions[1].leader == 2  # the others as answered


def test_the_same_or_a_newer_epoch_is_taken():
    for epoch in (1, 2):
        known, new = _md(leader=1, epoch=1), _md(leader=3, epoch=epoch)
        _keep_newer_leaders(known, new)
        assert new.topics["t"].partitions[0].leader == 3


def test_a_topic_created_again_or_a_broker_without_epochs_starts_over():
    recreated = _md(leader=3, epoch=0, topic_id=uuid.uuid4())
    _keep_newer_leaders(_md(leader=1, epoch=4, topic_id=uuid.uuid4()), recreated)
    assert recreated.topics["t"].partitions[0].leader == 3
    no_epochs = _md(leader=3, epoch=-1)
    _keep_newer_leaders(_md(leader=1, epoch=4), no_epochs)
    assert no_epochs.topics["t"].partitions[0].leader == 3
