"""The hand-written Metadata response encoder writes exactly what kio writes, every version.

Pure: builds random brokers and topics, encodes them both ways, compares bytes, and reads
ours back with kio's reader.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.metadata_codec import (
    MAX_VERSION,
    MIN_VERSION,
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_response,
    encode_topic,
)

I32 = st.integers(-(2**31), 2**31 - 1)
NODES = st.lists(st.integers(-1, 5000), max_size=4)
ERRORS = st.sampled_from([0, 3, 5, 17, 100])

brokers = st.lists(
    st.builds(
        MetadataBroker,
        node_id=st.integers(0, 5000),
        host=st.text(min_size=1, max_size=20),
        port=st.integers(1, 65535),
        rack=st.one_of(st.none(), st.text(max_size=8)),
    ),
    max_size=3,
)
partitions = st.builds(
    MetadataPartition,
    error_code=ERRORS,
    partition_index=st.integers(0, 2**31 - 1),
    leader=st.integers(-1, 5000),
    leader_epoch=st.integers(-1, 2**31 - 1),
    replicas=NODES,
    isr=NODES,
    offline_replicas=NODES,
)
topics = st.lists(
    st.builds(
        MetadataTopic,
        error_code=ERRORS,
        name=st.text(min_size=1, max_size=30),
        topic_id=st.uuids(),
        is_internal=st.booleans(),
        partitions=st.lists(partitions, max_size=4),
        authorized_operations=I32,
    ),
    max_size=3,
)


def kio_bytes(version, bs, cluster_id, controller_id, ts, cluster_ops) -> bytes:
    cls = messages.response_class(3, version)
    mod = messages.module_of(cls)
    kbrokers = tuple(
        make(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in bs
    )
    ktopics = tuple(
        make(
            mod.MetadataResponseTopic,
            error_code=t.error_code,
            name=t.name,
            topic_id=t.topic_id,
            is_internal=t.is_internal,
            partitions=tuple(
                make(
                    mod.MetadataResponsePartition,
                    error_code=p.error_code,
                    partition_index=p.partition_index,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=tuple(p.replicas),
                    isr_nodes=tuple(p.isr),
                    offline_replicas=tuple(p.offline_replicas),
                )
                for p in t.partitions
            ),
            topic_authorized_operations=t.authorized_operations,
        )
        for t in ts
    )
    return messages.encode(
        make(
            cls,
            throttle_time=0,
            brokers=kbrokers,
            cluster_id=cluster_id,
            controller_id=controller_id,
            topics=ktopics,
            cluster_authorized_operations=cluster_ops,
            error_code=0,
        )
    )


@settings(max_examples=60, deadline=None)
@given(
    bs=brokers,
    cluster_id=st.one_of(st.none(), st.text(max_size=22)),
    controller_id=st.integers(-1, 5000),
    ts=topics,
    cluster_ops=I32,
)
def test_same_bytes_as_kio_every_version(bs, cluster_id, controller_id, ts, cluster_ops):
    for v in range(MIN_VERSION, MAX_VERSION + 1):
        ours = encode_metadata_response(v, bs, cluster_id, controller_id, [encode_topic(v, t) for t in ts], cluster_ops)
        assert ours == kio_bytes(v, bs, cluster_id, controller_id, ts, cluster_ops), f"v{v}"
        back = messages.decode_response(3, v, ours)
        assert [t.name for t in back.topics] == [t.name for t in ts]


def test_a_thousand_partitions_read_back_by_kio():
    parts = [MetadataPartition(0, i, 1, 0, (1,), (1,)) for i in range(1000)]
    t = MetadataTopic(0, "t", uuid.uuid4(), False, parts, -(2**31))
    for v in range(MIN_VERSION, MAX_VERSION + 1):
        back = messages.decode_response(3, v, encode_metadata_response(v, [], "c", 1, [encode_topic(v, t)]))
        assert [p.partition_index for p in back.topics[0].partitions] == list(range(1000)), f"v{v}"
